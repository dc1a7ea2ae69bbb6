//! Redis Sentinel (cargo feature `sentinel`): [`SentinelConn`], the
//! primary a group of Sentinels names, followed across failovers, and the
//! `+switch-master` watcher.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{IntoConnectionInfo, RedisFuture};
use tokio::sync::watch;

use crate::engine::conn::Timing;
use crate::engine::security::{redact, Security};
use crate::engine::task::TaskSlot;
use crate::engine::topology::{manager_config, Address};
use crate::error::{Error, Result};

/// The primary named by a group of Sentinels, followed across failovers.
#[derive(Clone)]
pub(crate) struct SentinelConn {
    /// Shared by all clones.
    shared: Arc<SentinelShared>,
}

/// What clones of a [`SentinelConn`] share.
struct SentinelShared {
    /// The connection to the current primary and its address.
    current: RwLock<(ConnectionManager, String)>,
    /// Asks the Sentinels; behind an async lock so one re-resolution runs
    /// at a time while the others wait for its outcome.
    resolver: tokio::sync::Mutex<SentinelClient>,
    /// Bumped on every switch to another primary; the notify hub watches
    /// it to move its pub/sub connection too.
    epoch: watch::Sender<u64>,
    /// Connection options for a new primary.
    timing: Timing,
    /// TLS of the connections to the Sentinels.
    security: Security,
    /// The Sentinels and the service, for a fresh lookup.
    address: Address,
    /// The `+switch-master` watcher: started with the connection, started
    /// again on the caller's runtime if the one it ran on has ended, and
    /// ended with the last handle or when the client closes.
    watcher: TaskSlot,
}

impl SentinelConn {
    pub(crate) async fn connect(
        address: &Address,
        timing: Timing,
        security: &Security,
    ) -> Result<SentinelConn> {
        let mut resolver = sentinel_client(address, security)?;
        let describe = address.describe();
        let client = resolver
            .async_get_client()
            .await
            .map_err(|source| sentinel_error(&describe, source))?;
        let addr = client.get_connection_info().addr().to_string();
        let conn = ConnectionManager::new_with_config(
            client,
            security.manager_config(manager_config(timing)),
        )
        .await
        .map_err(|source| Error::Connect {
            addr: format!("{addr} (primary of {describe})"),
            source,
        })?;
        let conn = SentinelConn {
            shared: Arc::new(SentinelShared {
                current: RwLock::new((conn, addr)),
                resolver: tokio::sync::Mutex::new(resolver),
                epoch: watch::channel(0).0,
                timing,
                security: security.clone(),
                address: address.clone(),
                watcher: TaskSlot::default(),
            }),
        };
        conn.ensure_watcher();
        Ok(conn)
    }

    /// Starts the `+switch-master` watcher on the current runtime unless
    /// it runs (or the client closed).
    fn ensure_watcher(&self) {
        let Address::Sentinel { sentinels, .. } = &self.shared.address else {
            return;
        };
        self.shared
            .watcher
            .ensure(|| watch_switches(Arc::downgrade(&self.shared), sentinels.clone()));
    }

    /// Stops the `+switch-master` watcher for good (the client closes).
    pub(crate) fn close(&self) {
        self.shared.watcher.stop();
    }

    /// The connections' TLS and credentials.
    pub(crate) fn security(&self) -> &Security {
        &self.shared.security
    }

    /// The current primary's connection and the epoch it belongs to.
    fn current(&self) -> (ConnectionManager, u64) {
        let current = self
            .shared
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner());
        (current.0.clone(), *self.shared.epoch.borrow())
    }

    /// A receiver that changes whenever the primary changes.
    pub(crate) fn epochs(&self) -> watch::Receiver<u64> {
        self.shared.epoch.subscribe()
    }

    /// A `redis::Client` for the current primary (the notify hub's pub/sub
    /// connection), asking the Sentinels afresh.
    pub(crate) async fn primary_client(&self) -> redis::RedisResult<redis::Client> {
        let mut resolver = self.shared.resolver.lock().await;
        if self.shared.security.rotates() {
            // The lookup checks the named node's role with the data
            // nodes' credentials: the latest ones.
            if let Ok(fresh) = sentinel_client(&self.shared.address, &self.shared.security) {
                *resolver = fresh;
            }
        }
        resolver.async_get_client().await
    }

    /// After a failure seen at `epoch`: asks the Sentinels which node is
    /// the primary and switches to it if it changed. One re-resolution at
    /// a time; callers that queued behind one that switched do nothing.
    async fn follow(&self, epoch: u64) {
        let mut resolver = self.shared.resolver.lock().await;
        if *self.shared.epoch.borrow() != epoch {
            return;
        }
        if self.shared.security.rotates() {
            // The lookup checks the named node's role with the data
            // nodes' credentials: the latest ones.
            if let Ok(fresh) = sentinel_client(&self.shared.address, &self.shared.security) {
                *resolver = fresh;
            }
        }
        let Ok(Ok(client)) =
            tokio::time::timeout(self.shared.timing.command, resolver.async_get_client()).await
        else {
            return;
        };
        let addr = client.get_connection_info().addr().to_string();
        if addr
            == self
                .shared
                .current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .1
        {
            return;
        }
        let connecting = ConnectionManager::new_with_config(
            client,
            self.shared
                .security
                .manager_config(manager_config(self.shared.timing)),
        );
        let Ok(Ok(conn)) = tokio::time::timeout(self.shared.timing.connect, connecting).await
        else {
            return;
        };
        tracing::info!(primary = %addr, "Sentinel named a new primary; switching to it");
        *self
            .shared
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner()) = (conn, addr);
        self.shared.epoch.send_modify(|e| *e += 1);
    }

    /// Runs `op` on the current primary; a failure that may mean a
    /// failover makes the connection follow the Sentinels before the error
    /// is returned (so the caller's resend goes to the new primary), and a
    /// `READONLY` answer is reported as a dropped connection: nothing was
    /// written, and a resend is what the caller should do.
    fn call<'a, T: Send + 'a>(
        &'a mut self,
        op: impl FnOnce(ConnectionManager) -> RedisFuture<'a, T> + Send + 'a,
    ) -> RedisFuture<'a, T> {
        Box::pin(async move {
            // The watcher died with the runtime it ran on: start it here.
            self.ensure_watcher();
            let (conn, epoch) = self.current();
            match op(conn).await {
                Ok(value) => Ok(value),
                Err(e) if is_demoted(&e) => {
                    self.follow(epoch).await;
                    Err(redis::RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        format!(
                            "the primary was demoted ({e}); switched to the one Sentinel names"
                        ),
                    )))
                }
                Err(e)
                    if e.is_io_error()
                        || e.is_connection_dropped()
                        || e.is_connection_refusal()
                        || e.is_timeout() =>
                {
                    self.follow(epoch).await;
                    Err(e)
                }
                Err(e) => Err(e),
            }
        })
    }
}

crate::engine::conn::connection_like!(SentinelConn {
    command(this, cmd) => {
        this.call(move |mut conn| Box::pin(async move { conn.req_packed_command(cmd).await }))
    },
    pipeline(this, pipeline, offset, count) => this.call(move |mut conn| {
        Box::pin(async move { conn.req_packed_commands(pipeline, offset, count).await })
    }),
    db(this) => this.current().0.get_db(),
});

/// Listens for the Sentinels' `+switch-master` announcements and follows
/// each one at once, so the client does not wait for an error to notice a
/// failover (a demoted primary that comes back on its old address would
/// otherwise answer reads as a stale replica). Tries the Sentinels in turn;
/// on every (re)connection it also checks the primary, in case a switch was
/// missed. Ends when the last handle goes or the client closes (its slot
/// drops it wherever it waits).
async fn watch_switches(shared: std::sync::Weak<SentinelShared>, sentinels: Vec<String>) {
    use futures_util::StreamExt;
    let mut next = 0;
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let timing = strong.timing;
        let client = strong.security.client(&sentinels[next % sentinels.len()]);
        drop(strong);
        next += 1;
        let opened = async {
            let client = client
                .map_err(|e| redis::RedisError::from(std::io::Error::other(e.to_string())))?;
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        let Ok(Ok(pubsub)) = tokio::time::timeout(timing.connect, opened).await else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        let follow = |shared: &std::sync::Weak<SentinelShared>| {
            let shared = shared.upgrade();
            async move {
                if let Some(shared) = shared {
                    let conn = SentinelConn { shared };
                    let epoch = *conn.shared.epoch.borrow();
                    conn.follow(epoch).await;
                    true
                } else {
                    false
                }
            }
        };
        if !follow(&shared).await {
            return;
        }
        let mut messages = pubsub.into_on_message();
        while messages.next().await.is_some() {
            tracing::debug!("Sentinel announced a new primary");
            if !follow(&shared).await {
                return;
            }
        }
    }
}

/// True for the answers a demoted primary gives: a write refused
/// (`READONLY`), or `WAIT` refused on a replica.
fn is_demoted(e: &redis::RedisError) -> bool {
    let text = e.to_string();
    e.code() == Some("READONLY")
        || text.contains("READONLY")
        || text.contains("cannot be used with replica")
}

/// The redis-rs Sentinel client for a Sentinel address: the Sentinels'
/// own credentials come from their URLs, the data nodes' from the
/// address, TLS (both) from `security`.
fn sentinel_client(address: &Address, security: &Security) -> Result<SentinelClient> {
    let Address::Sentinel {
        sentinels,
        service,
        username,
        password,
        db,
    } = address
    else {
        return Err(Error::invalid("not a Sentinel address"));
    };
    let bad = |e: redis::RedisError| {
        let sentinels: Vec<String> = sentinels.iter().map(|s| redact(s)).collect();
        Error::invalid(format!("bad Sentinel list {sentinels:?}: {e}"))
    };
    let infos = sentinels
        .iter()
        .map(|s| s.as_str().into_connection_info())
        .collect::<redis::RedisResult<Vec<_>>>()
        .map_err(bad)?;
    let builder = SentinelClientBuilder::new(
        infos.iter().map(|i| i.addr().clone()),
        service.clone(),
        SentinelServerType::Master,
    )
    .map_err(bad)?;
    // The Sentinels' own credentials come from their URLs (the first
    // one's, as redis-rs takes one set for all).
    let mut builder = builder;
    if let Some(first) = infos.first() {
        if let Some(u) = first.redis_settings().username() {
            builder = builder.set_client_to_sentinel_username(u);
        }
        if let Some(p) = first.redis_settings().password() {
            builder = builder.set_client_to_sentinel_password(p);
        }
    }
    if let Some(configure) = security.given_sentinel() {
        // The caller's settings, which may override those: the data nodes'
        // user, password, database and TLS, and the Sentinels' TLS.
        return configure(builder).build().map_err(bad);
    }
    let mut builder = builder.set_client_to_redis_db(*db);
    let (username, password) = match security.current_credentials() {
        Some(c) => (
            c.username.or_else(|| Some("default".to_owned())),
            c.password,
        ),
        None => (username.clone(), password.clone()),
    };
    if let Some(u) = username {
        builder = builder.set_client_to_redis_username(u);
    }
    if let Some(p) = password {
        builder = builder.set_client_to_redis_password(p);
    }
    security
        .sentinel(builder, address.is_tls())
        .build()
        .map_err(bad)
}

/// A clear error for a failed Sentinel lookup: none reachable, or the
/// service unknown to all of them.
fn sentinel_error(describe: &str, source: redis::RedisError) -> Error {
    Error::Connect {
        addr: format!(
            "{describe} (no Sentinel answered with a primary: check the addresses and that they monitor this service name)"
        ),
        source,
    }
}
