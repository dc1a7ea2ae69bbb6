//! A fenced store: the protected resource's side of fencing, for resources
//! that live in Redis and as a model for those that do not. It keeps a
//! value and the highest fencing token it has accepted, in the hash `NAME`
//! (fields `token` and `value`), and accepts a write only if the writer's
//! token is at least that high, atomically. A holder whose lease ran out
//! while it was paused, and whose lock another holder has since taken with
//! a larger token, is refused with [`Error::StaleToken`] once the newer
//! holder has written. See [`guides::safety`](crate::guides::safety).

use std::sync::Arc;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::lock::LockGuard;
use crate::scripts;

/// A value in Redis guarded by fencing tokens (see the module docs).
///
/// ```no_run
/// # async fn demo(client: locksmith::Client) -> locksmith::Result<()> {
/// let lock = client.lock("report")?;
/// let store = client.fenced_store("report:output")?;
/// let guard = lock.lock().await?;
/// store.write_with(&guard, b"the report").await?;   // refused if stale
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FencedStore {
    /// The client whose connection carries the writes.
    client: Client,
    /// The store's key.
    name: Arc<str>,
}

impl Client {
    /// A handle on the fenced store `name` (a hash with fields `token` and
    /// `value`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `name` is empty or longer than the
    /// client's name limit.
    pub fn fenced_store(&self, name: impl Into<String>) -> Result<FencedStore> {
        let name = self.checked_name(name)?;
        Ok(FencedStore {
            client: self.clone(),
            name: name.into(),
        })
    }
}

impl FencedStore {
    /// The store's name (also its key).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Writes `value` under fencing token `token`: accepted if `token` is
    /// at least the highest the store has accepted (the same holder may
    /// write again), refused otherwise with nothing changed.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a token above 2^53 (tokens are
    /// compared as numbers; lock fencing tokens are counters, far below);
    /// [`Error::StaleToken`] when a larger token has written already;
    /// [`Error::WrongType`] when the key holds something else; connection
    /// errors and timeouts.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped after the command was sent, the write may
    /// or may not have happened; [`FencedStore::read`] shows which.
    pub async fn write(&self, token: u64, value: &[u8]) -> Result<()> {
        crate::engine::validate::settable(token, "a fencing token")?;
        let mut invocation = scripts::FENCED_WRITE.prepare_invoke();
        invocation.key(&*self.name).arg(token).arg(value);
        let (written, highest): (i64, u64) = self.client.invoke(&invocation, &self.name).await?;
        if written == 1 {
            Ok(())
        } else {
            Err(Error::StaleToken {
                name: self.name.to_string(),
                token,
                highest,
            })
        }
    }

    /// [`FencedStore::write`] with the token of `guard`.
    ///
    /// # Errors
    /// As for [`FencedStore::write`].
    ///
    /// # Cancel safety
    /// As for [`FencedStore::write`].
    pub async fn write_with(&self, guard: &LockGuard, value: &[u8]) -> Result<()> {
        self.write(guard.fencing_token(), value).await
    }

    /// The value and the token that wrote it; `None` before the first
    /// write.
    ///
    /// # Errors
    /// [`Error::WrongType`] when the key holds something else; connection
    /// errors and timeouts.
    ///
    /// # Cancel safety
    /// Cancel safe: a read.
    pub async fn read(&self) -> Result<Option<(u64, Vec<u8>)>> {
        let mut conn = self.client.connection();
        let (token, value): (Option<u64>, Option<Vec<u8>>) = redis::cmd("HMGET")
            .arg(&*self.name)
            .arg("token")
            .arg("value")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.client.map_err(e, Some(&self.name)))?;
        // A token without a value (a hash written by hand) reads as an
        // empty value: the token still fences.
        Ok(token.map(|t| (t, value.unwrap_or_default())))
    }
}
