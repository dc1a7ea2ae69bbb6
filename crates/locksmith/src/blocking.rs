//! A blocking facade for programs that are not async (cron jobs, CLIs,
//! build tools): the same primitives, guards and errors, over the async
//! implementation running on a runtime thread the client owns.
//!
//! Enable with the `blocking` cargo feature.
//!
//! ```no_run
//! # fn demo() -> locksmith::Result<()> {
//! use std::time::Duration;
//! let client = locksmith::blocking::Client::open("redis://127.0.0.1:6379")?;
//! let lock = client.lock("nightly-report")?;
//! if let Some(guard) = lock.try_lock_for(Duration::from_secs(5))? {
//!     println!("token {}", guard.fencing_token());
//!     guard.release()?;
//! }
//! # Ok(()) }
//! ```
//!
//! Covered: [`Client::lock`], [`Client::fair_lock`], the read and write
//! sides of a read-write lock, [`Client::simple_lock`],
//! [`Client::multi_lock`], [`Client::semaphore`],
//! [`Client::expirable_semaphore`], [`Client::count_down_latch`] and
//! [`Client::id_generator`]; anything else of the async API (Redlock,
//! fenced stores, inspection) runs through [`Client::block_on`] on
//! [`Client::as_async`].
//!
//! Every call blocks the calling thread until the async call completes.
//! Calling from a thread where a Tokio runtime is entered (an async task,
//! but also `spawn_blocking`) is refused with [`Error::InvalidArgument`]:
//! use the async API there. A dropped guard releases before the drop
//! returns (bounded by the command timeout), so a program that ends right
//! after leaves nothing held.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};

/// A connected client and the runtime thread its calls run on. Cheap to
/// clone; the runtime stops when the last clone (and every handle and
/// guard made from it) is dropped.
#[derive(Debug, Clone)]
pub struct Client {
    inner: crate::Client,
    runtime: Arc<Runtime>,
}

/// The runtime thread; shut down without blocking when its last owner is
/// dropped inside an async context (where a blocking shutdown would panic).
#[derive(Debug)]
struct Runtime(Option<tokio::runtime::Runtime>);

impl std::ops::Deref for Runtime {
    type Target = tokio::runtime::Runtime;
    fn deref(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("present until dropped")
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                rt.shutdown_background();
            }
        }
    }
}

impl Client {
    /// Connects to `url` with default options (see [`crate::ClientBuilder`]).
    ///
    /// # Errors
    /// As [`crate::ClientBuilder::build`]; [`Error::InvalidArgument`] when
    /// called from inside an async runtime.
    pub fn open(url: &str) -> Result<Client> {
        Client::build(crate::ClientBuilder::new(url))
    }

    /// Connects with the options of `builder`.
    ///
    /// # Errors
    /// As [`Client::open`].
    pub fn build(builder: crate::ClientBuilder) -> Result<Client> {
        outside_async()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("locksmith-blocking")
            .enable_all()
            .build()
            .map_err(|e| {
                Error::Redis(redis::RedisError::from(std::io::Error::other(format!(
                    "cannot start the runtime thread: {e}"
                ))))
            })?;
        let inner = runtime.block_on(builder.build())?;
        Ok(Client {
            inner,
            runtime: Arc::new(Runtime(Some(runtime))),
        })
    }

    /// The async client underneath, for anything the facade does not cover
    /// (run it with [`Client::block_on`]).
    pub fn as_async(&self) -> &crate::Client {
        &self.inner
    }

    /// Runs any future of the async API on this client's runtime and
    /// waits for it.
    ///
    /// # Errors
    /// The future's own; [`Error::InvalidArgument`] when called from inside
    /// an async runtime.
    pub fn block_on<T>(&self, future: impl Future<Output = Result<T>>) -> Result<T> {
        outside_async()?;
        self.runtime.block_on(future)
    }

    /// Closes the client and waits for its background work (see
    /// [`crate::Client::close`]): new acquires fail with
    /// [`Error::Closed`], holds still held report lost, and the releases
    /// of dropped guards and the undo of interrupted acquires are done
    /// before this returns.
    ///
    /// # Errors
    /// As [`crate::Client::close`]; [`Error::InvalidArgument`] when called
    /// from inside an async runtime.
    pub fn close(&self) -> Result<()> {
        self.block_on(self.inner.close())
    }

    /// A reentrant lock handle (see [`crate::Client::lock`]).
    ///
    /// # Errors
    /// As [`crate::Client::lock`].
    pub fn lock(&self, name: impl Into<String>) -> Result<Lock> {
        Ok(Lock {
            client: self.clone(),
            inner: LockKind::Reentrant(self.inner.lock(name)?),
        })
    }

    /// A fair lock handle (see [`crate::Client::fair_lock`]).
    ///
    /// # Errors
    /// As [`crate::Client::fair_lock`].
    pub fn fair_lock(&self, name: impl Into<String>) -> Result<Lock> {
        Ok(Lock {
            client: self.clone(),
            inner: LockKind::Fair(self.inner.fair_lock(name)?),
        })
    }

    /// The read side of a read-write lock (see
    /// [`crate::Client::read_write_lock`]).
    ///
    /// # Errors
    /// As [`crate::Client::read_write_lock`].
    pub fn read_lock(&self, name: impl Into<String>) -> Result<Lock> {
        Ok(Lock {
            client: self.clone(),
            inner: LockKind::Read(self.inner.read_write_lock(name)?),
        })
    }

    /// The write side of a read-write lock (see
    /// [`crate::Client::read_write_lock`]).
    ///
    /// # Errors
    /// As [`crate::Client::read_write_lock`].
    pub fn write_lock(&self, name: impl Into<String>) -> Result<Lock> {
        Ok(Lock {
            client: self.clone(),
            inner: LockKind::Write(self.inner.read_write_lock(name)?),
        })
    }

    /// A simple (`SET NX PX`) lock handle (see
    /// [`crate::Client::simple_lock`]).
    ///
    /// # Errors
    /// As [`crate::Client::simple_lock`].
    pub fn simple_lock(&self, name: impl Into<String>) -> Result<Lock> {
        Ok(Lock {
            client: self.clone(),
            inner: LockKind::Simple(self.inner.simple_lock(name)?),
        })
    }

    /// A MultiLock over reentrant locks `names` (see
    /// [`crate::Client::multi_lock`]).
    ///
    /// # Errors
    /// As [`crate::Client::multi_lock`].
    pub fn multi_lock<I, S>(&self, names: I) -> Result<MultiLock>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Ok(MultiLock {
            client: self.clone(),
            inner: self.inner.multi_lock(names)?,
        })
    }

    /// A semaphore whose permits have ids and leases (see
    /// [`crate::Client::expirable_semaphore`]).
    ///
    /// # Errors
    /// As [`crate::Client::expirable_semaphore`].
    pub fn expirable_semaphore(&self, name: impl Into<String>) -> Result<ExpirableSemaphore> {
        Ok(ExpirableSemaphore {
            client: self.clone(),
            inner: self.inner.expirable_semaphore(name)?,
        })
    }

    /// A semaphore (see [`crate::Client::semaphore`]).
    ///
    /// # Errors
    /// As [`crate::Client::semaphore`].
    pub fn semaphore(&self, name: impl Into<String>) -> Result<Semaphore> {
        Ok(Semaphore {
            client: self.clone(),
            inner: self.inner.semaphore(name)?,
        })
    }

    /// A count-down latch (see [`crate::Client::count_down_latch`]).
    ///
    /// # Errors
    /// As [`crate::Client::count_down_latch`].
    pub fn count_down_latch(&self, name: impl Into<String>) -> Result<CountDownLatch> {
        Ok(CountDownLatch {
            client: self.clone(),
            inner: self.inner.count_down_latch(name)?,
        })
    }

    /// An id generator (see [`crate::Client::id_generator`]).
    ///
    /// # Errors
    /// As [`crate::Client::id_generator`].
    pub fn id_generator(&self, prefix: impl Into<String>) -> Result<IdGenerator> {
        Ok(IdGenerator {
            client: self.clone(),
            inner: self.inner.id_generator(prefix)?,
        })
    }
}

impl Client {
    /// A dropped guard's release: awaited here (bounded by the command
    /// timeout) so it is done before the program can end; inside an async
    /// context it runs in the background instead, as the async guards do.
    fn release_on_drop(&self, release: impl Future<Output = Result<()>> + Send + 'static) {
        if tokio::runtime::Handle::try_current().is_ok() {
            self.runtime.spawn(release);
            return;
        }
        let bound = self.inner.config().command_timeout * 3;
        let result = self
            .runtime
            .block_on(async { tokio::time::timeout(bound, release).await });
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "release of a dropped guard failed"),
            Err(_) => tracing::warn!("release of a dropped guard did not finish in {bound:?}; it continues in the background"),
        }
    }
}

/// An async guard owned by a blocking one: released on the client's
/// runtime, when asked (waiting for the answer) or when dropped (see
/// [`Client::release_on_drop`]).
#[derive(Debug)]
struct Owned<G: Release> {
    client: Client,
    /// The guard; `None` once released.
    guard: Option<G>,
}

/// An async guard's release, for [`Owned`].
trait Release: Send + 'static {
    fn release(self) -> impl Future<Output = Result<()>> + Send + 'static;
}

macro_rules! release_via {
    ($($guard:ty),*) => {$(
        impl Release for $guard {
            fn release(self) -> impl Future<Output = Result<()>> + Send + 'static {
                <$guard>::release(self)
            }
        }
    )*};
}
release_via!(
    crate::LockGuard,
    crate::SemaphorePermits,
    crate::MultiGuard,
    crate::Permit
);

impl<G: Release> Owned<G> {
    fn new(client: &Client, guard: G) -> Self {
        Owned {
            client: client.clone(),
            guard: Some(guard),
        }
    }

    fn get(&self) -> Option<&G> {
        self.guard.as_ref()
    }

    /// Runs `call` on the guard on the client's runtime.
    fn with<'a, F: Future<Output = Result<()>>>(
        &'a self,
        call: impl FnOnce(&'a G) -> F,
    ) -> Result<()> {
        match &self.guard {
            Some(guard) => self.client.block_on(call(guard)),
            None => Err(Error::internal("the guard was already released")),
        }
    }

    fn release(mut self) -> Result<()> {
        match self.guard.take() {
            Some(guard) => self.client.block_on(guard.release()),
            None => Ok(()),
        }
    }
}

impl<G: Release> Drop for Owned<G> {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            self.client.release_on_drop(guard.release());
        }
    }
}

/// Refuses to block a thread of an async runtime.
fn outside_async() -> Result<()> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::invalid(
            "the blocking API was called from inside an async runtime; use the async API there",
        ));
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum LockKind {
    Reentrant(crate::Lock),
    Fair(crate::FairLock),
    Read(crate::ReadWriteLock),
    Write(crate::ReadWriteLock),
    Simple(crate::SimpleLock),
}

/// A lock handle of any kind (reentrant, fair, read or write side, simple).
#[derive(Debug, Clone)]
pub struct Lock {
    client: Client,
    inner: LockKind,
}

impl Lock {
    /// The same handle with a fixed lease (no watchdog renewal).
    ///
    /// # Errors
    /// As the async kinds' `with_lease`.
    pub fn with_lease(&self, lease: Duration) -> Result<Lock> {
        let inner = match &self.inner {
            LockKind::Reentrant(l) => LockKind::Reentrant(l.with_lease(lease)?),
            LockKind::Fair(l) => LockKind::Fair(l.with_lease(lease)?),
            LockKind::Read(l) => LockKind::Read(l.with_lease(lease)?),
            LockKind::Write(l) => LockKind::Write(l.with_lease(lease)?),
            LockKind::Simple(l) => LockKind::Simple(l.with_lease(lease)?),
        };
        Ok(Lock {
            client: self.client.clone(),
            inner,
        })
    }

    /// Waits as long as it takes.
    ///
    /// # Errors
    /// As the async `lock` (or `read` / `write`).
    pub fn lock(&self) -> Result<LockGuard> {
        self.acquire(None).and_then(|g| {
            g.ok_or_else(|| Error::internal("an acquire without a deadline returned no guard"))
        })
    }

    /// Tries once; `None` when someone else holds it.
    ///
    /// # Errors
    /// As the async `try_lock`.
    pub fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(Some(Duration::ZERO))
    }

    /// Waits at most `wait`.
    ///
    /// # Errors
    /// As the async `try_lock_for`.
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(Some(wait))
    }

    fn acquire(&self, wait: Option<Duration>) -> Result<Option<LockGuard>> {
        let inner = self.inner.clone();
        let guard = self.client.block_on(async move {
            macro_rules! take {
                ($l:expr, $forever:ident, $once:ident, $bounded:ident) => {
                    match wait {
                        None => $l.$forever().await.map(Some),
                        Some(w) if w.is_zero() => $l.$once().await,
                        Some(w) => $l.$bounded(w).await,
                    }
                };
            }
            match &inner {
                LockKind::Reentrant(l) => take!(l, lock, try_lock, try_lock_for),
                LockKind::Fair(l) => take!(l, lock, try_lock, try_lock_for),
                LockKind::Read(l) => take!(l, read, try_read, try_read_for),
                LockKind::Write(l) => take!(l, write, try_write, try_write_for),
                LockKind::Simple(l) => take!(l, lock, try_lock, try_lock_for),
            }
        })?;
        Ok(guard.map(|inner| LockGuard {
            inner: Owned::new(&self.client, inner),
        }))
    }
}

/// A held lock; dropping it releases in the background.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    inner: Owned<crate::LockGuard>,
}

impl LockGuard {
    /// The grant's fencing token.
    pub fn fencing_token(&self) -> u64 {
        self.inner.get().map_or(0, crate::LockGuard::fencing_token)
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.inner.get().map_or("", crate::LockGuard::name)
    }

    /// The lease left, as known locally.
    pub fn remaining_lease(&self) -> Duration {
        self.inner
            .get()
            .map_or(Duration::ZERO, crate::LockGuard::remaining_lease)
    }

    /// True once the lease is known or assumed lost.
    pub fn is_lost(&self) -> bool {
        self.inner.get().is_none_or(crate::LockGuard::is_lost)
    }

    /// Moves a fixed lease's end forward to `lease` from now.
    ///
    /// # Errors
    /// As [`crate::LockGuard::extend`].
    pub fn extend(&self, lease: Duration) -> Result<()> {
        self.inner.with(|guard| guard.extend(lease))
    }

    /// Releases the hold and waits for the answer.
    ///
    /// # Errors
    /// As [`crate::LockGuard::release`].
    pub fn release(self) -> Result<()> {
        self.inner.release()
    }
}

/// A semaphore (see [`crate::Semaphore`]).
#[derive(Debug, Clone)]
pub struct Semaphore {
    client: Client,
    inner: crate::Semaphore,
}

impl Semaphore {
    /// Sets the number of permits if the semaphore does not exist yet.
    ///
    /// # Errors
    /// As [`crate::Semaphore::try_set_permits`].
    pub fn try_set_permits(&self, permits: u64) -> Result<bool> {
        self.client.block_on(self.inner.try_set_permits(permits))
    }

    /// Permits available now.
    ///
    /// # Errors
    /// As [`crate::Semaphore::available`].
    pub fn available(&self) -> Result<i64> {
        self.client.block_on(self.inner.available())
    }

    /// Waits at most `wait` for `permits` permits.
    ///
    /// # Errors
    /// As [`crate::Semaphore::try_acquire_for`].
    pub fn try_acquire_for(
        &self,
        permits: u64,
        wait: Duration,
    ) -> Result<Option<SemaphorePermits>> {
        let got = self
            .client
            .block_on(self.inner.try_acquire_for(permits, wait))?;
        Ok(got.map(|inner| SemaphorePermits {
            inner: Owned::new(&self.client, inner),
        }))
    }

    /// Waits as long as it takes for `permits` permits.
    ///
    /// # Errors
    /// As [`crate::Semaphore::acquire`].
    pub fn acquire(&self, permits: u64) -> Result<SemaphorePermits> {
        let inner = self.client.block_on(self.inner.acquire(permits))?;
        Ok(SemaphorePermits {
            inner: Owned::new(&self.client, inner),
        })
    }
}

/// Permits taken from a [`Semaphore`]; dropping them gives them back in
/// the background.
#[derive(Debug)]
#[must_use = "dropping the permits gives them back"]
pub struct SemaphorePermits {
    inner: Owned<crate::SemaphorePermits>,
}

impl SemaphorePermits {
    /// How many permits this holds.
    pub fn permits(&self) -> u64 {
        self.inner.get().map_or(0, crate::SemaphorePermits::permits)
    }

    /// Gives the permits back and waits for the answer.
    ///
    /// # Errors
    /// As [`crate::SemaphorePermits::release`].
    pub fn release(self) -> Result<()> {
        self.inner.release()
    }
}

/// A count-down latch (see [`crate::CountDownLatch`]).
#[derive(Debug, Clone)]
pub struct CountDownLatch {
    client: Client,
    inner: crate::CountDownLatch,
}

impl CountDownLatch {
    /// Sets the count if the latch is not set.
    ///
    /// # Errors
    /// As [`crate::CountDownLatch::try_set_count`].
    pub fn try_set_count(&self, count: u64) -> Result<bool> {
        self.client.block_on(self.inner.try_set_count(count))
    }

    /// Counts down by one; answers the count left.
    ///
    /// # Errors
    /// As [`crate::CountDownLatch::count_down`].
    pub fn count_down(&self) -> Result<u64> {
        self.client.block_on(self.inner.count_down())
    }

    /// The count now.
    ///
    /// # Errors
    /// As [`crate::CountDownLatch::count`].
    pub fn count(&self) -> Result<u64> {
        self.client.block_on(self.inner.count())
    }

    /// Waits at most `timeout` for the count to reach zero; false if it
    /// did not.
    ///
    /// # Errors
    /// As [`crate::CountDownLatch::wait_for`].
    pub fn wait_for(&self, timeout: Duration) -> Result<bool> {
        self.client.block_on(self.inner.wait_for(timeout))
    }
}

/// An id generator (see [`crate::IdGenerator`]).
#[derive(Debug, Clone)]
pub struct IdGenerator {
    client: Client,
    inner: crate::IdGenerator,
}

impl IdGenerator {
    /// The next id.
    ///
    /// # Errors
    /// As [`crate::IdGenerator::next_id`].
    pub fn next_id(&self) -> Result<i64> {
        self.client.block_on(self.inner.next_id())
    }
}

/// A MultiLock (see [`crate::MultiLock`]).
#[derive(Debug, Clone)]
pub struct MultiLock {
    client: Client,
    inner: crate::MultiLock,
}

impl MultiLock {
    /// Waits as long as it takes for every member.
    ///
    /// # Errors
    /// As [`crate::MultiLock::lock`].
    pub fn lock(&self) -> Result<MultiGuard> {
        let inner = self.client.block_on(self.inner.lock())?;
        Ok(MultiGuard {
            inner: Owned::new(&self.client, inner),
        })
    }

    /// Waits at most `wait` for every member; `None` (nothing held) when
    /// they could not all be had.
    ///
    /// # Errors
    /// As [`crate::MultiLock::try_lock_for`].
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<MultiGuard>> {
        let got = self.client.block_on(self.inner.try_lock_for(wait))?;
        Ok(got.map(|inner| MultiGuard {
            inner: Owned::new(&self.client, inner),
        }))
    }
}

/// Every member of a [`MultiLock`], held; dropping it releases them all.
#[derive(Debug)]
#[must_use = "dropping the guard releases every member"]
pub struct MultiGuard {
    inner: Owned<crate::MultiGuard>,
}

impl MultiGuard {
    /// Each member's name and fencing token.
    pub fn fencing_tokens(&self) -> Vec<(String, u64)> {
        self.inner.get().map_or_else(Vec::new, |g| {
            g.fencing_tokens()
                .into_iter()
                .map(|(n, t)| (n.to_owned(), t))
                .collect()
        })
    }

    /// True once any member's lease is lost.
    pub fn is_lost(&self) -> bool {
        self.inner.get().is_none_or(crate::MultiGuard::is_lost)
    }

    /// Releases every member and waits for the answer.
    ///
    /// # Errors
    /// As [`crate::MultiGuard::release`].
    pub fn release(self) -> Result<()> {
        self.inner.release()
    }
}

/// A semaphore whose permits have ids and leases (see
/// [`crate::ExpirableSemaphore`]).
#[derive(Debug, Clone)]
pub struct ExpirableSemaphore {
    client: Client,
    inner: crate::ExpirableSemaphore,
}

impl ExpirableSemaphore {
    /// The same semaphore with a fixed permit lease.
    ///
    /// # Errors
    /// As [`crate::ExpirableSemaphore::with_lease`].
    pub fn with_lease(&self, lease: Duration) -> Result<ExpirableSemaphore> {
        Ok(ExpirableSemaphore {
            client: self.client.clone(),
            inner: self.inner.with_lease(lease)?,
        })
    }

    /// Sets the number of permits if the semaphore does not exist yet.
    ///
    /// # Errors
    /// As [`crate::ExpirableSemaphore::try_set_permits`].
    pub fn try_set_permits(&self, permits: u64) -> Result<bool> {
        self.client.block_on(self.inner.try_set_permits(permits))
    }

    /// Permits available now.
    ///
    /// # Errors
    /// As [`crate::ExpirableSemaphore::available`].
    pub fn available(&self) -> Result<i64> {
        self.client.block_on(self.inner.available())
    }

    /// Waits as long as it takes for a permit.
    ///
    /// # Errors
    /// As [`crate::ExpirableSemaphore::acquire`].
    pub fn acquire(&self) -> Result<Permit> {
        let inner = self.client.block_on(self.inner.acquire())?;
        Ok(Permit {
            inner: Owned::new(&self.client, inner),
        })
    }

    /// Waits at most `wait` for a permit.
    ///
    /// # Errors
    /// As [`crate::ExpirableSemaphore::try_acquire_for`].
    pub fn try_acquire_for(&self, wait: Duration) -> Result<Option<Permit>> {
        let got = self.client.block_on(self.inner.try_acquire_for(wait))?;
        Ok(got.map(|inner| Permit {
            inner: Owned::new(&self.client, inner),
        }))
    }
}

/// A permit with an id and a lease; dropping it gives it back.
#[derive(Debug)]
#[must_use = "dropping the permit gives it back"]
pub struct Permit {
    inner: Owned<crate::Permit>,
}

impl Permit {
    /// The permit id.
    pub fn id(&self) -> &str {
        self.inner.get().map_or("", crate::Permit::id)
    }

    /// The lease left, as known locally.
    pub fn remaining_lease(&self) -> Duration {
        self.inner
            .get()
            .map_or(Duration::ZERO, crate::Permit::remaining_lease)
    }

    /// True once the lease is known or assumed lost.
    pub fn is_lost(&self) -> bool {
        self.inner.get().is_none_or(crate::Permit::is_lost)
    }

    /// Moves a fixed lease's end forward to `lease` from now.
    ///
    /// # Errors
    /// As [`crate::Permit::extend`].
    pub fn extend(&self, lease: Duration) -> Result<()> {
        self.inner.with(|permit| permit.extend(lease))
    }

    /// Gives the permit back and waits for the answer.
    ///
    /// # Errors
    /// As [`crate::Permit::release`].
    pub fn release(self) -> Result<()> {
        self.inner.release()
    }
}
