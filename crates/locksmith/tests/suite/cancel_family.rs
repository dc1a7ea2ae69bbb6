//! Cancellation across the family: for every kind but the plain reentrant
//! lock (see `cancel.rs`), acquire futures dropped at arbitrary points,
//! while other owners and another client contend, leave nothing held on
//! the server (no hold, queue entry, writer claim, permit lost or
//! duplicated), no subscription and no watchdog entry behind.
//!
//! Each test runs a bounded number of rounds (at most `ROUNDS`, at most
//! `TIME_CAP`) on a client with a 60 s lease, so an orphaned grant would
//! outlive the checks; successful holds end dropped, released, or with
//! their release cut short.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use locksmith::{Client, Member, MultiLock, ReadWriteLock, RedlockNodes};

use crate::common::{eventually, Env};

crate::on_every_topology!(
    fair_lock_dropped_acquires_leave_nothing_behind,
    read_holds_dropped_acquires_leave_nothing_behind,
    write_holds_dropped_acquires_leave_nothing_behind,
    preferring_writers_dropped_acquires_leave_no_claim_behind,
    simple_lock_dropped_acquires_leave_nothing_behind,
    ordered_multi_lock_dropped_acquires_leave_nothing_behind,
    atomic_multi_lock_dropped_acquires_leave_nothing_behind,
    semaphore_dropped_acquires_lose_and_duplicate_no_permit,
    expirable_semaphore_dropped_acquires_lose_and_duplicate_no_permit,
);

/// Lease of the client whose acquires are cancelled: long, so that an
/// orphaned grant is still there when the checks run.
const LONG_LEASE: Duration = Duration::from_secs(60);
/// Lease of the other client.
const SHORT_LEASE: Duration = Duration::from_secs(2);
/// At most this many cancelled (or completed) acquires per test...
const ROUNDS: usize = 600;
/// ...and for at most this long.
const TIME_CAP: Duration = Duration::from_secs(8);
/// The wait of a bounded acquire: far beyond any budget, so it never ends
/// empty-handed before it is cut.
const LONG_WAIT: Duration = Duration::from_secs(5);
/// The budget of the rounds meant to complete (see [`Rng::budget`]).
const WHOLE: Duration = Duration::from_secs(1);
/// How long a contender waits per round, and holds what it got.
const CONTENDER_WAIT: Duration = Duration::from_millis(50);
const CONTENDER_HOLD: Duration = Duration::from_micros(300);
/// Permits of the semaphores.
const PERMITS: u64 = 4;
/// Per-node timeout of the Redlock test (generous: the machine is shared,
/// and an acquire that no majority answered in time fails the round).
const REDLOCK_NODE_TIMEOUT: Duration = Duration::from_secs(1);

/// xorshift64*: deterministic pseudo-random delays without a dependency
/// (a copy of `cancel.rs`'s).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// An acquire's budget: 0..2.5 ms; one time in ten 0..25 ms; and one
    /// time in forty [`WHOLE`], long enough for a whole acquire, so that
    /// grants (and the cuts after them) happen on a loaded machine too,
    /// where a cluster round trip alone can take longer than 25 ms.
    fn budget(&mut self) -> Duration {
        let draw = self.next();
        if draw.is_multiple_of(40) {
            return WHOLE;
        }
        let range = if draw.is_multiple_of(10) {
            25_000
        } else {
            2_500
        };
        Duration::from_micros(self.next() % range)
    }

    /// A short cut for a nested acquire or a release: 0..0.5 ms.
    fn cut(&mut self) -> Duration {
        Duration::from_micros(self.next() % 500)
    }

    /// True about two times in three.
    fn often(&mut self) -> bool {
        !self.next().is_multiple_of(3)
    }
}

/// Round numbers: at most `ROUNDS`, ending early once `TIME_CAP` passed.
fn rounds() -> impl Iterator<Item = usize> {
    let started = std::time::Instant::now();
    (0..ROUNDS).take_while(move |_| started.elapsed() < TIME_CAP)
}

/// Ends a granted hold (anything with `release(self) -> Result<()>` that
/// releases on drop): dropped (background release), released, or with its
/// release future cut short.
macro_rules! finish {
    ($rng:ident, $held:expr, $what:expr) => {{
        let held = $held;
        match $rng.next() % 3 {
            0 => drop(held),
            1 => {
                if let Err(e) = held.release().await {
                    panic!("{}: releasing a hold failed: {e}", $what);
                }
            }
            _ => {
                let cut = $rng.cut();
                drop(tokio::time::timeout(cut, held.release()).await);
            }
        }
    }};
}

/// Runs `round(n)` for n = 0, 1, ... until `stop` is set.
fn spawn_loop<F, Fut>(stop: &Arc<AtomicBool>, mut round: F) -> tokio::task::JoinHandle<()>
where
    F: FnMut(u64) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let stop = stop.clone();
    tokio::spawn(async move {
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            round(n).await;
            n += 1;
            tokio::task::yield_now().await;
        }
    })
}

/// Stops the contenders and waits (bounded) for each to end.
async fn stop_all(stop: &AtomicBool, contenders: Vec<tokio::task::JoinHandle<()>>) {
    stop.store(true, Ordering::Relaxed);
    for (i, contender) in contenders.into_iter().enumerate() {
        match tokio::time::timeout(Duration::from_secs(20), contender).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("contender {i} failed: {e}"),
            Err(_) => panic!("contender {i} did not stop within 20 s"),
        }
    }
}

/// Waits up to 10 s until `server` finds nothing left (it answers what it
/// found, `None` when clean) and every client tracks no lease, keeps no
/// subscription and parks no waiter; then checks it stays so a moment
/// later (a late duplicate release would show there).
async fn assert_clean<F, Fut>(what: &str, clients: &[&Client], server: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<String>>,
{
    let local = || -> Vec<String> {
        clients
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let (leases, subscriptions, parked) = (
                    c.tracked_lease_count(),
                    c.subscription_count(),
                    c.parked_waiter_count(),
                );
                (leases + subscriptions + parked > 0).then(|| {
                    format!(
                        "client {i}: {leases} tracked leases, {subscriptions} subscriptions, {parked} parked waiters"
                    )
                })
            })
            .collect()
    };
    let clean = eventually(Duration::from_secs(10), || async {
        server().await.is_none() && local().is_empty()
    })
    .await;
    assert!(
        clean,
        "{what}: left behind after 10 s: on the server {:?}; locally {:?}",
        server().await,
        local()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    if let Some(late) = server().await {
        panic!("{what}: clean, then 300 ms later: {late}");
    }
}

/// What is left of several primitives; `None` when nothing.
fn joined(parts: impl IntoIterator<Item = Option<String>>) -> Option<String> {
    let left: Vec<String> = parts.into_iter().flatten().collect();
    (!left.is_empty()).then(|| left.join("; "))
}

/// Redisson's `prefix:{name}` (or `prefix:name` when `name` has a hash
/// tag), as the library lays out auxiliary keys and channels.
fn prefixed(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// Redisson's `{name}:suffix` (or `name:suffix` with a hash tag).
fn suffixed(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// Keys matching `pattern` on the node that owns `route` (KEYS is fine at
/// test scale).
fn keys_like(env: &Env, route: &str, pattern: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query(&mut env.node_for(route))
        .unwrap();
    keys.sort();
    keys
}

/// Channels matching `pattern` with subscribers on the node that owns
/// `route`: classic and sharded.
fn channels_like(env: &Env, route: &str, pattern: &str) -> Vec<String> {
    let mut conn = env.node_for(route);
    let mut channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg(pattern)
        .query(&mut conn)
        .unwrap();
    if crate::common::has_7_0() {
        let sharded: Vec<String> = redis::cmd("PUBSUB")
            .arg("SHARDCHANNELS")
            .arg(pattern)
            .query(&mut conn)
            .unwrap();
        channels.extend(sharded);
    }
    channels.sort();
    channels
}

/// What is left of the reentrant lock `name`.
async fn lock_left(env: &Env, client: &Client, name: &str) -> Option<String> {
    let info = client.lock(name).unwrap().info().await.unwrap();
    let listeners = env.listeners(&prefixed("redisson_lock__channel", name));
    (info.is_locked() || listeners > 0)
        .then(|| format!("lock {name}: {info:?}, {listeners} subscribers"))
}

/// What is left of the fair lock `name`: holds, queue entries, give-up
/// times, subscribed per-owner channels.
async fn fair_left(env: &Env, client: &Client, name: &str) -> Option<String> {
    let info = client.fair_lock(name).unwrap().info().await.unwrap();
    let aux = [
        prefixed("redisson_lock_queue", name),
        prefixed("redisson_lock_timeout", name),
    ];
    let keys = env.existing(&aux);
    let channels = channels_like(
        env,
        name,
        &format!("{}*", prefixed("redisson_lock__channel", name)),
    );
    (info.lock.is_locked() || !info.queue.is_empty() || !keys.is_empty() || !channels.is_empty())
        .then(|| {
            format!("fair lock {name}: {info:?}, queue keys {keys:?}, subscribed {channels:?}")
        })
}

/// What is left of the read-write lock `name`: holds, writer claims, hold
/// keys, subscribers. (Release receipts, `{NAME}:locksmith_released:*`,
/// stay for their own short TTL by design and are not counted.)
async fn rw_left(env: &Env, client: &Client, name: &str) -> Option<String> {
    let info = client.read_write_lock(name).unwrap().info().await.unwrap();
    let keys: Vec<String> = keys_like(env, name, &suffixed(name, "*"))
        .into_iter()
        .filter(|k| !k.contains(":locksmith_released:"))
        .collect();
    let listeners = env.listeners(&prefixed("redisson_rwlock", name));
    (info.mode.is_some()
        || !info.readers.is_empty()
        || info.writer.is_some()
        || info.waiting_writers > 0
        || !keys.is_empty()
        || listeners > 0)
        .then(|| {
            format!("read-write lock {name}: {info:?}, keys {keys:?}, {listeners} subscribers")
        })
}

/// What is left of the simple lock `name`.
async fn simple_left(env: &Env, client: &Client, name: &str) -> Option<String> {
    let locked = client.simple_lock(name).unwrap().is_locked().await.unwrap();
    let listeners = env.listeners(&prefixed("redisson_lock__channel", name));
    (locked || listeners > 0)
        .then(|| format!("simple lock {name}: locked {locked}, {listeners} subscribers"))
}

/// What is wrong with the semaphore `name`: permits not back at
/// `PERMITS` (fewer: lost; more: duplicated), subscribers.
async fn semaphore_left(env: &Env, client: &Client, name: &str) -> Option<String> {
    let available = client.semaphore(name).unwrap().available().await.unwrap();
    let listeners = env.listeners(&prefixed("redisson_sc", name));
    (available != PERMITS as i64 || listeners > 0).then(|| {
        format!(
            "semaphore {name}: {available} of {PERMITS} permits available (fewer: lost, more: duplicated), {listeners} subscribers"
        )
    })
}

/// What is wrong with the permit-expirable semaphore `name`.
async fn expirable_left(env: &Env, client: &Client, name: &str) -> Option<String> {
    let semaphore = client.expirable_semaphore(name).unwrap();
    let available = semaphore.available().await.unwrap();
    let held = semaphore.held().await.unwrap();
    let timeouts = env.existing(&[suffixed(name, "timeout")]);
    let listeners = env.listeners(&prefixed("redisson_sc", name));
    (available != PERMITS as i64 || held != 0 || !timeouts.is_empty() || listeners > 0).then(|| {
        format!(
            "expirable semaphore {name}: {available} of {PERMITS} permits available (fewer: lost, more: duplicated), {held} held, timeout zset {timeouts:?}, {listeners} subscribers"
        )
    })
}

async fn fair_lock_dropped_acquires_leave_nothing_behind(env: Env) {
    let client = env.client(LONG_LEASE).await;
    let other = env.client(SHORT_LEASE).await;
    let name = env.name("cancel-fair");
    let name = name.as_str();

    // Another client and another owner of this client queue, take and
    // release, so cancelled acquires hit a free lock, a busy one, a place
    // in the queue, the head of the queue.
    let stop = Arc::new(AtomicBool::new(false));
    let contenders: Vec<_> = [
        other.fair_lock(name).unwrap(),
        client.fair_lock(name).unwrap(),
    ]
    .into_iter()
    .map(|lock| {
        spawn_loop(&stop, move |_| {
            let lock = lock.clone();
            async move {
                if let Ok(Some(g)) = lock.try_lock_for(CONTENDER_WAIT).await {
                    tokio::time::sleep(CONTENDER_HOLD).await;
                    let _ = g.release().await;
                }
            }
        })
    })
    .collect();

    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut tried, mut acquired) = (0, 0);
    for i in rounds() {
        tried += 1;
        let lock = client.fair_lock(name).unwrap();
        let budget = rng.budget();
        let outcome = if i % 2 == 0 {
            tokio::time::timeout(budget, lock.lock()).await.ok()
        } else {
            tokio::time::timeout(budget, async {
                lock.try_lock_for(LONG_WAIT)
                    .await
                    .map(|g| g.expect("5 s is plenty"))
            })
            .await
            .ok()
        };
        if let Some(guard) = outcome {
            let guard = guard.unwrap_or_else(|e| panic!("fair acquire {i} failed: {e}"));
            acquired += 1;
            if rng.often() {
                // A reentrant acquire dropped mid-flight.
                let cut = rng.cut();
                drop(tokio::time::timeout(cut, lock.lock()).await);
            }
            finish!(rng, guard, "fair lock");
        }
    }
    stop_all(&stop, contenders).await;
    assert!(
        acquired > 0,
        "no fair lock acquire completed in {tried} rounds"
    );
    assert_clean("fair lock", &[&client, &other], || async {
        fair_left(&env, &client, name).await
    })
    .await;
}

/// Which side of a read-write lock the cancelled acquires take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Read,
    Write,
}

async fn read_holds_dropped_acquires_leave_nothing_behind(env: Env) {
    rw_dropped_acquires(env, Side::Read, false).await;
}

async fn write_holds_dropped_acquires_leave_nothing_behind(env: Env) {
    rw_dropped_acquires(env, Side::Write, false).await;
}

/// Writers that prefer themselves: a dropped wait must withdraw its claim
/// (which would otherwise hold back new readers for a whole lease).
async fn preferring_writers_dropped_acquires_leave_no_claim_behind(env: Env) {
    rw_dropped_acquires(env, Side::Write, true).await;
}

async fn rw_dropped_acquires(env: Env, side: Side, prefer: bool) {
    let client = env.client(LONG_LEASE).await;
    let other = env.client(SHORT_LEASE).await;
    let name = env.name(match (side, prefer) {
        (Side::Read, _) => "cancel-rw-read",
        (Side::Write, false) => "cancel-rw-write",
        (Side::Write, true) => "cancel-rw-prefer",
    });
    let name = name.as_str();
    let handle = |c: &Client| -> ReadWriteLock {
        let lock = c.read_write_lock(name).unwrap();
        if prefer {
            lock.prefer_writers()
        } else {
            lock
        }
    };

    // Another client and another owner of this client alternate writing
    // and reading, in opposite phases.
    let stop = Arc::new(AtomicBool::new(false));
    let contenders: Vec<_> = [(handle(&other), true), (handle(&client), false)]
        .into_iter()
        .map(|(lock, write_first)| {
            spawn_loop(&stop, move |n| {
                let lock = lock.clone();
                let write = (n % 2 == 0) == write_first;
                async move {
                    let got = if write {
                        lock.try_write_for(CONTENDER_WAIT).await
                    } else {
                        lock.try_read_for(CONTENDER_WAIT).await
                    };
                    if let Ok(Some(g)) = got {
                        tokio::time::sleep(CONTENDER_HOLD).await;
                        let _ = g.release().await;
                    }
                }
            })
        })
        .collect();

    let what = format!("read-write lock ({side:?} holds, prefer writers {prefer})");
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let (mut tried, mut acquired) = (0, 0);
    for i in rounds() {
        tried += 1;
        let lock = handle(&client);
        let budget = rng.budget();
        let outcome = match (side, i % 2 == 0) {
            (Side::Read, true) => tokio::time::timeout(budget, lock.read()).await.ok(),
            (Side::Read, false) => tokio::time::timeout(budget, async {
                lock.try_read_for(LONG_WAIT)
                    .await
                    .map(|g| g.expect("5 s is plenty"))
            })
            .await
            .ok(),
            (Side::Write, true) => tokio::time::timeout(budget, lock.write()).await.ok(),
            (Side::Write, false) => tokio::time::timeout(budget, async {
                lock.try_write_for(LONG_WAIT)
                    .await
                    .map(|g| g.expect("5 s is plenty"))
            })
            .await
            .ok(),
        };
        if let Some(guard) = outcome {
            let guard = guard.unwrap_or_else(|e| panic!("{what}: acquire {i} failed: {e}"));
            acquired += 1;
            if rng.often() {
                // A reentrant acquire dropped mid-flight: a reader reads
                // again; a writer writes again or takes a read hold.
                let cut = rng.cut();
                let write_again = side == Side::Write && rng.next().is_multiple_of(2);
                let nested = if write_again {
                    tokio::time::timeout(cut, lock.write()).await
                } else {
                    tokio::time::timeout(cut, lock.read()).await
                };
                drop(nested);
            }
            finish!(rng, guard, what);
        }
    }
    stop_all(&stop, contenders).await;
    assert!(
        acquired > 0,
        "{what}: no acquire completed in {tried} rounds"
    );
    assert_clean(&what, &[&client, &other], || async {
        rw_left(&env, &client, name).await
    })
    .await;
}

async fn simple_lock_dropped_acquires_leave_nothing_behind(env: Env) {
    let client = env.client(LONG_LEASE).await;
    let other = env.client(SHORT_LEASE).await;
    let name = env.name("cancel-simple");
    let name = name.as_str();

    let stop = Arc::new(AtomicBool::new(false));
    let contenders: Vec<_> = [
        other.simple_lock(name).unwrap(),
        client.simple_lock(name).unwrap(),
    ]
    .into_iter()
    .map(|lock| {
        spawn_loop(&stop, move |_| {
            let lock = lock.clone();
            async move {
                if let Ok(Some(g)) = lock.try_lock_for(CONTENDER_WAIT).await {
                    tokio::time::sleep(CONTENDER_HOLD).await;
                    let _ = g.release().await;
                }
            }
        })
    })
    .collect();

    // Not reentrant: no nested acquires (one would wait for itself).
    let mut rng = Rng(0x94D0_49BB_1331_11EB);
    let (mut tried, mut acquired) = (0, 0);
    for i in rounds() {
        tried += 1;
        let lock = client.simple_lock(name).unwrap();
        let budget = rng.budget();
        let outcome = if i % 2 == 0 {
            tokio::time::timeout(budget, lock.lock()).await.ok()
        } else {
            tokio::time::timeout(budget, async {
                lock.try_lock_for(LONG_WAIT)
                    .await
                    .map(|g| g.expect("5 s is plenty"))
            })
            .await
            .ok()
        };
        if let Some(guard) = outcome {
            let guard = guard.unwrap_or_else(|e| panic!("simple acquire {i} failed: {e}"));
            acquired += 1;
            finish!(rng, guard, "simple lock");
        }
    }
    stop_all(&stop, contenders).await;
    assert!(
        acquired > 0,
        "no simple lock acquire completed in {tried} rounds"
    );
    assert_clean("simple lock", &[&client, &other], || async {
        simple_left(&env, &client, name).await
    })
    .await;
}

/// A lock, a fair lock, a write side and a read side (all reentrant, so
/// nested acquires are allowed), each a new owner of `client`.
fn mixed_members(client: &Client, names: &[String]) -> Vec<Member> {
    vec![
        Member::from(client.lock(names[0].clone()).unwrap()),
        Member::from(client.fair_lock(names[1].clone()).unwrap()),
        Member::Write(client.read_write_lock(names[2].clone()).unwrap()),
        Member::Read(client.read_write_lock(names[3].clone()).unwrap()),
    ]
}

/// The canonical-order path: members taken one after another, cut between
/// any two of them.
async fn ordered_multi_lock_dropped_acquires_leave_nothing_behind(env: Env) {
    let client = env.client(LONG_LEASE).await;
    let other = env.client(SHORT_LEASE).await;
    let names: Vec<String> = ["mx-plain", "mx-fair", "mx-write", "mx-read"]
        .iter()
        .map(|n| env.name(n))
        .collect();

    let stop = Arc::new(AtomicBool::new(false));
    let contenders: Vec<_> = [
        MultiLock::new(mixed_members(&other, &names)).unwrap(),
        MultiLock::new(mixed_members(&client, &names)).unwrap(),
    ]
    .into_iter()
    .map(|multi| {
        spawn_loop(&stop, move |_| {
            let multi = multi.clone();
            async move {
                if let Ok(Some(g)) = multi.try_lock_for(CONTENDER_WAIT).await {
                    tokio::time::sleep(CONTENDER_HOLD).await;
                    let _ = g.release().await;
                }
            }
        })
    })
    .collect();

    let mut rng = Rng(0xBF58_476D_1CE4_E5B9);
    let (mut tried, mut acquired) = (0, 0);
    for i in rounds() {
        tried += 1;
        let multi = MultiLock::new(mixed_members(&client, &names)).unwrap();
        assert!(!multi.is_atomic(), "mixed kinds go in canonical order");
        let budget = rng.budget();
        let outcome = if i % 2 == 0 {
            tokio::time::timeout(budget, multi.lock()).await.ok()
        } else {
            tokio::time::timeout(budget, async {
                multi
                    .try_lock_for(LONG_WAIT)
                    .await
                    .map(|g| g.expect("5 s is plenty"))
            })
            .await
            .ok()
        };
        if let Some(guard) = outcome {
            let guard =
                guard.unwrap_or_else(|e| panic!("ordered MultiLock acquire {i} failed: {e}"));
            acquired += 1;
            if rng.often() {
                // Every member again, reentrantly, cut mid-flight.
                let cut = rng.cut();
                drop(tokio::time::timeout(cut, multi.lock()).await);
            }
            finish!(rng, guard, "ordered MultiLock");
        }
    }
    stop_all(&stop, contenders).await;
    assert!(
        acquired > 0,
        "no ordered MultiLock acquire completed in {tried} rounds"
    );
    assert_clean("ordered MultiLock", &[&client, &other], || async {
        joined([
            lock_left(&env, &client, &names[0]).await,
            fair_left(&env, &client, &names[1]).await,
            rw_left(&env, &client, &names[2]).await,
            rw_left(&env, &client, &names[3]).await,
        ])
    })
    .await;
}

/// The one-script path: reentrant locks of one client in one slot.
async fn atomic_multi_lock_dropped_acquires_leave_nothing_behind(env: Env) {
    let client = env.client(LONG_LEASE).await;
    let other = env.client(SHORT_LEASE).await;
    // A shared hash tag: one slot on a cluster.
    let tag = env.name("cancel-atomic");
    let names: Vec<String> = (0..3).map(|i| format!("{{{tag}}}:m{i}")).collect();

    // Another client's set, another owner's set of this client, and
    // another client's single member.
    let stop = Arc::new(AtomicBool::new(false));
    let mut contenders: Vec<_> = [
        other.multi_lock(names.clone()).unwrap(),
        client.multi_lock(names.clone()).unwrap(),
    ]
    .into_iter()
    .map(|multi| {
        assert!(multi.is_atomic(), "one client, one slot");
        spawn_loop(&stop, move |_| {
            let multi = multi.clone();
            async move {
                if let Ok(Some(g)) = multi.try_lock_for(CONTENDER_WAIT).await {
                    tokio::time::sleep(CONTENDER_HOLD).await;
                    let _ = g.release().await;
                }
            }
        })
    })
    .collect();
    let single = other.lock(names[1].clone()).unwrap();
    contenders.push(spawn_loop(&stop, move |_| {
        let lock = single.clone();
        async move {
            if let Ok(Some(g)) = lock.try_lock_for(CONTENDER_WAIT).await {
                tokio::time::sleep(CONTENDER_HOLD).await;
                let _ = g.release().await;
            }
        }
    }));

    let mut rng = Rng(0x6A09_E667_F3BC_C909);
    let (mut tried, mut acquired) = (0, 0);
    for i in rounds() {
        tried += 1;
        let multi = client.multi_lock(names.clone()).unwrap();
        assert!(multi.is_atomic(), "one client, one slot");
        let budget = rng.budget();
        let outcome = if i % 2 == 0 {
            tokio::time::timeout(budget, multi.lock()).await.ok()
        } else {
            tokio::time::timeout(budget, async {
                multi
                    .try_lock_for(LONG_WAIT)
                    .await
                    .map(|g| g.expect("5 s is plenty"))
            })
            .await
            .ok()
        };
        if let Some(guard) = outcome {
            let guard =
                guard.unwrap_or_else(|e| panic!("atomic MultiLock acquire {i} failed: {e}"));
            acquired += 1;
            if rng.often() {
                let cut = rng.cut();
                drop(tokio::time::timeout(cut, multi.lock()).await);
            }
            finish!(rng, guard, "atomic MultiLock");
        }
    }
    stop_all(&stop, contenders).await;
    assert!(
        acquired > 0,
        "no atomic MultiLock acquire completed in {tried} rounds"
    );
    assert_clean("atomic MultiLock", &[&client, &other], || async {
        let mut left = Vec::new();
        for name in &names {
            left.push(lock_left(&env, &client, name).await);
        }
        joined(left)
    })
    .await;
}

async fn semaphore_dropped_acquires_lose_and_duplicate_no_permit(env: Env) {
    let client = env.client(LONG_LEASE).await;
    let other = env.client(SHORT_LEASE).await;
    let name = env.name("cancel-semaphore");
    let name = name.as_str();
    assert!(
        client
            .semaphore(name)
            .unwrap()
            .try_set_permits(PERMITS)
            .await
            .unwrap(),
        "a fresh semaphore"
    );

    // Another client takes two at a time, another handle of this client
    // one.
    let stop = Arc::new(AtomicBool::new(false));
    let contenders: Vec<_> = [
        (other.semaphore(name).unwrap(), 2),
        (client.semaphore(name).unwrap(), 1),
    ]
    .into_iter()
    .map(|(semaphore, n)| {
        spawn_loop(&stop, move |_| {
            let semaphore = semaphore.clone();
            async move {
                if let Ok(Some(p)) = semaphore.try_acquire_for(n, CONTENDER_WAIT).await {
                    tokio::time::sleep(CONTENDER_HOLD).await;
                    let _ = p.release().await;
                }
            }
        })
    })
    .collect();

    // Not reentrant: no nested acquires.
    let mut rng = Rng(0xBB67_AE85_84CA_A73B);
    let (mut tried, mut acquired, mut several) = (0, 0, 0);
    for i in rounds() {
        tried += 1;
        let semaphore = client.semaphore(name).unwrap();
        // One permit, or several.
        let n = if rng.next().is_multiple_of(2) {
            1
        } else {
            PERMITS - 1
        };
        let budget = rng.budget();
        let outcome = if i % 2 == 0 {
            tokio::time::timeout(budget, semaphore.acquire(n))
                .await
                .ok()
        } else {
            tokio::time::timeout(budget, async {
                semaphore
                    .try_acquire_for(n, LONG_WAIT)
                    .await
                    .map(|p| p.expect("5 s is plenty"))
            })
            .await
            .ok()
        };
        if let Some(permits) = outcome {
            let permits =
                permits.unwrap_or_else(|e| panic!("semaphore acquire {i} of {n} failed: {e}"));
            assert_eq!(permits.permits(), n);
            acquired += 1;
            if n > 1 {
                several += 1;
            }
            finish!(rng, permits, "semaphore");
        }
    }
    stop_all(&stop, contenders).await;
    assert!(
        acquired > 0,
        "no semaphore acquire completed in {tried} rounds"
    );
    assert!(
        several > 0,
        "no acquire of {} permits completed in {tried} rounds ({acquired} of one did)",
        PERMITS - 1
    );
    assert_clean("semaphore", &[&client, &other], || async {
        semaphore_left(&env, &client, name).await
    })
    .await;
}

async fn expirable_semaphore_dropped_acquires_lose_and_duplicate_no_permit(env: Env) {
    let client = env.client(LONG_LEASE).await;
    let other = env.client(SHORT_LEASE).await;
    let name = env.name("cancel-expirable");
    let name = name.as_str();
    assert!(
        client
            .expirable_semaphore(name)
            .unwrap()
            .try_set_permits(PERMITS)
            .await
            .unwrap(),
        "a fresh semaphore"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let contenders: Vec<_> = [
        other.expirable_semaphore(name).unwrap(),
        client.expirable_semaphore(name).unwrap(),
    ]
    .into_iter()
    .map(|semaphore| {
        spawn_loop(&stop, move |_| {
            let semaphore = semaphore.clone();
            async move {
                if let Ok(Some(p)) = semaphore.try_acquire_for(CONTENDER_WAIT).await {
                    tokio::time::sleep(CONTENDER_HOLD).await;
                    let _ = p.release().await;
                }
            }
        })
    })
    .collect();

    // Not reentrant: no nested acquires.
    let mut rng = Rng(0x3C6E_F372_FE94_F82B);
    let (mut tried, mut acquired) = (0, 0);
    for i in rounds() {
        tried += 1;
        let semaphore = client.expirable_semaphore(name).unwrap();
        let budget = rng.budget();
        let outcome = if i % 2 == 0 {
            tokio::time::timeout(budget, semaphore.acquire()).await.ok()
        } else {
            tokio::time::timeout(budget, async {
                semaphore
                    .try_acquire_for(LONG_WAIT)
                    .await
                    .map(|p| p.expect("5 s is plenty"))
            })
            .await
            .ok()
        };
        if let Some(permit) = outcome {
            let permit =
                permit.unwrap_or_else(|e| panic!("expirable semaphore acquire {i} failed: {e}"));
            acquired += 1;
            finish!(rng, permit, "expirable semaphore");
        }
    }
    stop_all(&stop, contenders).await;
    assert!(
        acquired > 0,
        "no expirable semaphore acquire completed in {tried} rounds"
    );
    assert_clean("expirable semaphore", &[&client, &other], || async {
        expirable_left(&env, &client, name).await
    })
    .await;
}

/// Clients of `urls` with watchdog lease `lease`, as the suite builds them.
async fn node_clients(urls: &[String], lease: Duration) -> Vec<Client> {
    let mut clients = Vec::new();
    for url in urls {
        clients.push(
            Client::builder(url.clone())
                .lease(lease)
                .command_timeout(Duration::from_secs(2))
                .build()
                .await
                .expect("connect"),
        );
    }
    clients
}

/// What is left of the Redlock `name` on each of `urls`: the lock hash and
/// subscribers of its channel.
fn redlock_left(urls: &[String], name: &str) -> Option<String> {
    let channel = prefixed("redisson_lock__channel", name);
    joined(urls.iter().map(|url| {
        let mut conn = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let holders: Vec<String> = redis::cmd("HKEYS").arg(name).query(&mut conn).unwrap();
        let (_, subscribers): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query(&mut conn)
            .unwrap();
        (!holders.is_empty() || subscribers > 0)
            .then(|| format!("{url}: holders {holders:?}, {subscribers} subscribers"))
    }))
}

/// Redlock needs independent servers, which `Env` does not give: three of
/// its own. Rounds cut anywhere (before, during, after the majority
/// answered) are undone on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_dropped_acquires_leave_nothing_behind() {
    let servers = locksmith_testkit::RedisNodes::start(3).expect("start three servers");
    let urls = servers.urls();
    let mine = node_clients(&urls, LONG_LEASE).await;
    let theirs = node_clients(&urls, SHORT_LEASE).await;
    let nodes = RedlockNodes::new(mine.iter().cloned())
        .unwrap()
        .with_node_timeout(REDLOCK_NODE_TIMEOUT)
        .unwrap();
    let other = RedlockNodes::new(theirs.iter().cloned())
        .unwrap()
        .with_node_timeout(REDLOCK_NODE_TIMEOUT)
        .unwrap();
    let name = "cancel-redlock";

    // Another set of clients, and another handle over this set.
    let stop = Arc::new(AtomicBool::new(false));
    let contenders: Vec<_> = [other.lock(name).unwrap(), nodes.lock(name).unwrap()]
        .into_iter()
        .map(|lock| {
            spawn_loop(&stop, move |_| {
                let lock = lock.clone();
                async move {
                    if let Ok(Some(g)) = lock.try_lock_for(CONTENDER_WAIT).await {
                        tokio::time::sleep(CONTENDER_HOLD).await;
                        let _ = g.release().await;
                    }
                }
            })
        })
        .collect();

    // Not reentrant: no nested acquires.
    let mut rng = Rng(0xA54F_F53A_5F1D_36F1);
    let (mut tried, mut acquired) = (0, 0);
    for i in rounds() {
        tried += 1;
        let lock = nodes.lock(name).unwrap();
        let budget = rng.budget();
        let outcome = if i % 2 == 0 {
            tokio::time::timeout(budget, lock.lock()).await.ok()
        } else {
            tokio::time::timeout(budget, async {
                lock.try_lock_for(LONG_WAIT)
                    .await
                    .map(|g| g.expect("5 s is plenty"))
            })
            .await
            .ok()
        };
        if let Some(guard) = outcome {
            let guard = guard.unwrap_or_else(|e| panic!("Redlock acquire {i} failed: {e}"));
            acquired += 1;
            finish!(rng, guard, "Redlock");
        }
    }
    stop_all(&stop, contenders).await;
    assert!(
        acquired > 0,
        "no Redlock acquire completed in {tried} rounds"
    );
    let clients: Vec<&Client> = mine.iter().chain(theirs.iter()).collect();
    assert_clean("Redlock", &clients, || async { redlock_left(&urls, name) }).await;
    drop(servers);
}
