//! Gaps an audit found in the tests of issue 21's defects 3, 8 and 11,
//! each closed by one test here (a real redis-server through the testkit;
//! a FaultProxy where a reply must be held, cut or lost).
//!
//! - Defect 8, first half: a fair or write acquire whose first send was
//!   granted and whose reply was lost, dropped while its resend waits in
//!   the batcher's queue behind `MAX_IN_FLIGHT` (2) calls of the same
//!   script, leaves nothing held: the grant is undone once the queued
//!   resend is withdrawn, long before its 30 s lease.
//! - Defect 8, second half: a grant too few replicas acknowledged is
//!   undone even when the undo's first send is lost and the acquire is
//!   cancelled while the undo is under way.
//! - Defect 11: a resent release of a fair, write or read hold whose lease
//!   ran out before the first send answers `NotHeld`; a resent release
//!   that was not the final one answers one hold released (and the other
//!   hold stays, counted 1), or, when it finds the hold gone, never `Ok`;
//!   a read release of a hold a restart wiped never answers `Ok`.
//! - Defect 3: a semaphore `drain` whose reply is cut on a cluster runs
//!   exactly once (a resend would drain again and answer 0).
//!
//! The first two depend on a timeline (a proxy latency against the command
//! timeout or the replica acknowledgement wait); each test's comments give
//! the timeline and its margins, and the test checks on the server that the
//! scenario it needs happened.

use crate::common;

use std::time::{Duration, Instant};

use common::proxied_cluster;
use locksmith::{Client, Error, ErrorKind, FairLock, LockGuard, ReadWriteLock};
use locksmith_testkit::{FaultMode, FaultProxy, RedisServer};

/// A lease far longer than any bound below: only an undo or a release can
/// free the lock in time.
const LEASE: Duration = Duration::from_secs(30);

/// The counted kinds besides the plain lock (which has these tests in
/// failed_release.rs and release_answers.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Fair,
    Write,
    Read,
}

/// One owner's handle on a lock of some kind.
#[derive(Debug, Clone)]
enum Handle {
    Fair(FairLock),
    Write(ReadWriteLock),
    Read(ReadWriteLock),
}

impl Handle {
    /// A new owner of lock `name`, as `kind`, with a fixed lease (no
    /// renewal traffic on the connection).
    fn new(client: &Client, kind: Kind, name: &str, lease: Duration) -> Handle {
        match kind {
            Kind::Fair => Handle::Fair(client.fair_lock(name).unwrap().with_lease(lease).unwrap()),
            Kind::Write => Handle::Write(
                client
                    .read_write_lock(name)
                    .unwrap()
                    .with_lease(lease)
                    .unwrap(),
            ),
            Kind::Read => Handle::Read(
                client
                    .read_write_lock(name)
                    .unwrap()
                    .with_lease(lease)
                    .unwrap(),
            ),
        }
    }

    /// The same owner; a writer prefers writers (its wait puts a claim on
    /// the server, which the wait takes back with the owner's state held).
    fn preferring_writers(self) -> Handle {
        match self {
            Handle::Write(lock) => Handle::Write(lock.prefer_writers()),
            other => other,
        }
    }

    /// Waits for one hold (the waiting method, not a single try).
    async fn acquire(&self) -> locksmith::Result<LockGuard> {
        match self {
            Handle::Fair(lock) => lock.lock().await,
            Handle::Write(lock) => lock.write().await,
            Handle::Read(lock) => lock.read().await,
        }
    }

    /// One try.
    async fn try_once(&self) -> locksmith::Result<Option<LockGuard>> {
        match self {
            Handle::Fair(lock) => lock.try_lock().await,
            Handle::Write(lock) => lock.try_write().await,
            Handle::Read(lock) => lock.try_read().await,
        }
    }

    /// The owner id.
    fn owner(&self) -> &str {
        match self {
            Handle::Fair(lock) => lock.owner(),
            Handle::Write(lock) | Handle::Read(lock) => lock.owner(),
        }
    }

    /// This owner's field in the lock hash (its hold count).
    fn field(&self) -> String {
        match self {
            Handle::Fair(lock) => lock.owner().to_owned(),
            Handle::Write(lock) => format!("{}:write", lock.owner()),
            Handle::Read(lock) => lock.owner().to_owned(),
        }
    }
}

/// What another owner tries to take to prove a hold of `kind` stands (a
/// writer against a read hold).
fn rival(kind: Kind) -> Kind {
    match kind {
        Kind::Fair => Kind::Fair,
        Kind::Write | Kind::Read => Kind::Write,
    }
}

/// A client of `url` with a 2 s command timeout and release receipts on or
/// off (as release_answers.rs's).
async fn connect(url: &str, lease: Duration, receipts: bool) -> Client {
    Client::builder(url)
        .lease(lease)
        .command_timeout(Duration::from_secs(2))
        .release_receipts(receipts)
        .build()
        .await
        .expect("connect")
}

/// A client behind `proxy` with the short timeouts of failed_release.rs
/// (command 300 ms), so a 400 ms latency loses a reply.
async fn short_timeouts(proxy: &FaultProxy) -> Client {
    Client::builder(proxy.url())
        .lease(Duration::from_secs(5))
        .command_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("connect through the proxy")
}

fn admin(server: &RedisServer) -> redis::Connection {
    server.connection().expect("admin connection")
}

fn exists(server: &RedisServer, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut admin(server))
        .unwrap()
        == 1
}

fn hget(server: &RedisServer, key: &str, field: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query(&mut admin(server))
        .unwrap()
}

fn hgetall(server: &RedisServer, key: &str) -> Vec<(String, String)> {
    redis::cmd("HGETALL")
        .arg(key)
        .query(&mut admin(server))
        .unwrap()
}

fn get(server: &RedisServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut admin(server))
        .unwrap()
}

fn zscore(server: &RedisServer, key: &str, member: &str) -> Option<String> {
    redis::cmd("ZSCORE")
        .arg(key)
        .arg(member)
        .query(&mut admin(server))
        .unwrap()
}

fn lrange(server: &RedisServer, key: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(&mut admin(server))
        .unwrap()
}

/// Script calls `server` has run so far.
fn evalsha_calls(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut admin(server))
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// The fencing counter of lock `name`: named in every acquire request of
/// the fair and read-write locks (KEYS), and in none of their release,
/// leave or info calls.
fn token_key(name: &str) -> String {
    format!("redisson_lock_token:{{{name}}}")
}

/// Logs every command `server` runs with its arguments (the slow log with
/// a threshold of 0), from now on.
fn log_every_command(server: &RedisServer) {
    common::log_every_command(&mut admin(server));
}

/// `EVALSHA` calls logged since [`log_every_command`] that name `key`
/// among their arguments. (The slow log keeps the first 32 arguments of a
/// call: a batch of up to two fair or read-write requests fits whole.)
fn script_calls_naming(server: &RedisServer, key: &str) -> usize {
    common::logged_commands(&mut admin(server))
        .iter()
        .filter(|args| common::evalsha_keys(args).is_some() && args.iter().any(|a| a == key))
        .count()
}

/// What `owner` (a handle of `kind`) still has on the server for lock
/// `name`: the lock hash itself (anyone's), its fair queue entry and
/// give-up time, its writer claim.
fn leftovers(server: &RedisServer, kind: Kind, name: &str, owner: &str) -> Vec<String> {
    let mut left = Vec::new();
    if exists(server, name) {
        left.push(format!("the lock hash {name}: {:?}", hgetall(server, name)));
    }
    match kind {
        Kind::Fair => {
            let queue = format!("redisson_lock_queue:{{{name}}}");
            if lrange(server, &queue).iter().any(|o| o == owner) {
                left.push(format!("a place in {queue}"));
            }
            let timeouts = format!("redisson_lock_timeout:{{{name}}}");
            if let Some(score) = zscore(server, &timeouts, owner) {
                left.push(format!("a give-up time {score} in {timeouts}"));
            }
        }
        Kind::Write | Kind::Read => {
            let writers = format!("{{{name}}}:locksmith_writers");
            if let Some(score) = zscore(server, &writers, owner) {
                left.push(format!("a writer claim until {score} in {writers}"));
            }
        }
    }
    left
}

// ---------------------------------------------------------------------
// Defect 8, first half: a resend withdrawn from the batcher's queue.
// ---------------------------------------------------------------------

/// Every chunk through the proxy is held this long, each way.
const QUEUED_LATENCY: Duration = Duration::from_millis(1500);
/// The client's command timeout: shorter than a round trip through the
/// proxy (2 x 1.5 s), so every reply is lost to a timeout.
const QUEUED_TIMEOUT: Duration = Duration::from_secs(2);
/// When the first of the other acquires of the same client and script
/// starts.
const QUEUED_OTHERS_AT: Duration = Duration::from_millis(1000);
/// How long after the first the rest start: apart, so that the first
/// goes out alone and the rest find both places taken (started together,
/// they would all travel in one call, as the batcher lets the tasks ready
/// to run queue before it sends).
const QUEUED_SECOND_AFTER: Duration = Duration::from_millis(100);
/// How many start after the first: more than one call carries (128), so
/// that the call that takes the queue when the first send's place frees
/// leaves the last of them queued, and the acquire's resend behind them.
/// (The batcher sends a completed call's queue after one pass of the run
/// queue, in which the resend is queued: with fewer, it would travel in
/// that call.)
const QUEUED_BEHIND: usize = 130;
/// When the acquire is dropped.
const QUEUED_DROP_AT: Duration = Duration::from_millis(2500);

/// Defect 8 (fair lock): "a resend still queued in the batcher is dropped
/// together with its undo when the caller is dropped, so a grant from the
/// first send is held for a full lease by nobody".
///
/// Before the engine's acquire core (commit 2232f37), each send of an
/// acquire went through `Batcher::call_undoable` with the undo attached to
/// that send's request; a resend still waiting in the queue when its caller
/// went away was withdrawn unsent and its undo dropped with it, while the
/// first send's grant (whose reply was lost) stayed on the server for its
/// whole lease. Now the undo is armed from the first send until the
/// request settles, and runs once the withdrawn resend has left the queue.
///
/// The existing random-drop test (release_answers.rs) never makes the
/// resend wait in the queue; this one does, deterministically by a
/// timeline rather than by scheduler turns. Not with a cut reply: a cut
/// resets the one multiplexed connection of a single-server client, which
/// fails every call in flight with it, so nothing would stay in flight.
/// Replies are lost to the command timeout instead (the connection stays
/// up): see [`resend_queued_then_dropped`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_acquire_dropped_while_its_resend_waits_in_the_batcher_queue_leaves_nothing_held() {
    resend_queued_then_dropped(Kind::Fair).await;
}

/// Defect 8 (read-write lock, writer): as
/// [`a_fair_acquire_dropped_while_its_resend_waits_in_the_batcher_queue_leaves_nothing_held`],
/// for `write()`. The old code lost the undo of a queued resend the same
/// way (the read-write lock shared the fair lock's `attempt::send`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_acquire_dropped_while_its_resend_waits_in_the_batcher_queue_leaves_nothing_held() {
    resend_queued_then_dropped(Kind::Write).await;
}

/// The timeline, from the first send S1 of the acquire (every request and
/// reply chunk is held 1.5 s by the proxy, one after another per
/// direction; the command timeout is 2 s):
///
/// - 0 ms: S1 goes out alone (1 call in flight).
/// - 1000: a single try of another lock, of the same client and script,
///   is sent (2 in flight); 100 ms later 130 more tries of other locks
///   wait in the queue.
/// - 1500: S1 reaches the server: granted (lease 30 s). Its reply would
///   reach the client at 3000.
/// - 2000: S1 times out. The acquire queues its resend S2 behind the 130,
///   and S1's place goes to a call of the first 128 of them (still 2 in
///   flight: the first try, sent at 1000, and that call); S2 stays queued
///   behind the last two.
/// - 2500: the acquire is dropped (S2 is still queued: the first try
///   holds its place until its own timeout at 3000). The grant is on the
///   server.
/// - 3000: the first try times out; the queue is taken, S2 is withdrawn
///   unsent, and the undo of S1's grant goes out.
///
/// Margins: 500 ms on each side of the drop. The slow log proves S2 never
/// reached the server (only S1 names the lock's fencing counter).
async fn resend_queued_then_dropped(kind: Kind) {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let client = Client::builder(proxy.url())
        .lease(LEASE)
        .command_timeout(QUEUED_TIMEOUT)
        .build()
        .await
        .expect("connect through the proxy");
    let other = common::client(&server, LEASE).await;
    let name = format!("queued-resend-{kind:?}");
    let mine = Handle::new(&client, kind, &name, LEASE);
    let others: Vec<Handle> = (0..=QUEUED_BEHIND)
        .map(|i| Handle::new(&client, kind, &format!("{name}-busy-{i}"), LEASE))
        .collect();
    // Warm-up, through the proxy while it passes: the scripts are loaded
    // (a NOSCRIPT round trip would shift the timeline) and the fair
    // owner's channel is kept subscribed.
    mine.acquire()
        .await
        .expect("warm-up")
        .release()
        .await
        .unwrap();
    for busy in &others {
        busy.try_once()
            .await
            .unwrap()
            .expect("a free lock")
            .release()
            .await
            .unwrap();
    }
    let counter = token_key(&name);
    log_every_command(&server);

    proxy.set_mode(FaultMode::Latency(QUEUED_LATENCY));
    let started = tokio::time::Instant::now();
    let mut attempt = Box::pin(mine.acquire());
    let early = tokio::time::timeout_at(started + QUEUED_OTHERS_AT, &mut attempt).await;
    assert!(
        early.is_err(),
        "{kind:?}: the acquire cannot end before its first reply is due: {early:?}"
    );
    // More calls of the same batcher (same client, same script): the
    // first fills the second place in flight, the rest queue.
    let mut busy = Vec::new();
    for (i, h) in others.iter().cloned().enumerate() {
        if i == 1 {
            tokio::time::sleep(QUEUED_SECOND_AFTER).await;
        }
        busy.push(tokio::spawn(async move { h.try_once().await }));
    }
    let early = tokio::time::timeout_at(started + QUEUED_DROP_AT, &mut attempt).await;
    assert!(
        early.is_err(),
        "{kind:?}: every reply is lost to the timeout, the acquire cannot have ended: {early:?}"
    );
    let granted = hget(&server, &name, &mine.field());
    assert_eq!(
        granted.as_deref(),
        Some("1"),
        "{kind:?}: the first send's grant must be on the server when the acquire is dropped \
         (it reached the server at 1.5 s); the timeline did not hold"
    );
    drop(attempt);
    let dropped_at = Instant::now();
    proxy.set_mode(FaultMode::Pass);

    // The undo goes out once the queued resend is withdrawn (at 3 s, the
    // first other try's timeout): the lock is free well within 5 s of the
    // drop, and nothing of the owner's is left (lease 30 s).
    let owner = mine.owner().to_owned();
    let (srv, lock, owner_ref) = (&server, name.as_str(), owner.as_str());
    let clean = common::eventually(Duration::from_secs(5), || async move {
        leftovers(srv, kind, lock, owner_ref).is_empty()
    })
    .await;
    assert!(
        clean,
        "{kind:?}: {:?} after the drop, {:?} is left (lease 30 s): the grant of the first send \
         was not undone when its queued resend was withdrawn",
        dropped_at.elapsed(),
        leftovers(&server, kind, &name, &owner)
    );
    // The other tries end (their resends are answered now); once they have,
    // everything sent before them on the connection has run.
    for task in busy {
        let done = tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("the other tries end")
            .unwrap();
        if let Ok(Some(guard)) = done {
            let _ = guard.release().await;
        }
    }
    // Before any other client asks for the lock (its acquire would name
    // the counter too).
    assert_eq!(
        script_calls_naming(&server, &counter),
        1,
        "{kind:?}: only the first send may have reached the server; a second acquire call for \
         {name} means the resend was sent, not withdrawn from the queue, and the test did not \
         exercise the queued case"
    );
    let theirs = Handle::new(&other, kind, &name, LEASE)
        .try_once()
        .await
        .unwrap();
    assert!(
        theirs.is_some(),
        "{kind:?}: another client gets the lock {:?} after the drop",
        dropped_at.elapsed()
    );
    theirs.unwrap().release().await.unwrap();
}

// ---------------------------------------------------------------------
// Defect 8, second half: the NotReplicated undo under cancellation.
// ---------------------------------------------------------------------

/// Every chunk through the proxy is held this long, each way.
const UNREPLICATED_LATENCY: Duration = Duration::from_millis(600);
/// How long `WAIT` waits for the (paused) replica.
const UNREPLICATED_ACK_WAIT: Duration = Duration::from_millis(400);
/// When the proxy resets every connection (and keeps resetting new ones).
const UNREPLICATED_RESET_AT: Duration = Duration::from_millis(2100);
/// When the acquire is dropped.
const UNREPLICATED_CANCEL_AT: Duration = Duration::from_millis(2400);
/// When the proxy passes traffic again.
const UNREPLICATED_RESET_UNTIL: Duration = Duration::from_millis(3100);

/// Defect 8 (fair lock): "the NotReplicated undo is awaited inline and
/// abandoned on cancellation".
///
/// Before commit 2232f37 a grant too few replicas acknowledged was undone
/// inline (`undo_grant(..).await` inside the acquire: one release, resent
/// at most twice); a caller that gave up while it ran dropped it, and an
/// undo whose sends were lost gave up, so the grant stayed for its whole
/// lease. Now dropping the armed state hands the undo to the client's
/// background work, which sends it until Redis answers.
///
/// `lock()` is used because it keeps the caller waiting until the undo is
/// done (its wait entry is taken back with the owner's state held), so the
/// cancel lands while the undo is under way, old code or new.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_grant_too_few_replicas_saw_is_undone_though_the_acquire_is_cancelled_mid_undo() {
    undone_though_cancelled_mid_undo(Kind::Fair).await;
}

/// Defect 8 (read-write lock, writer): as
/// [`a_fair_grant_too_few_replicas_saw_is_undone_though_the_acquire_is_cancelled_mid_undo`],
/// for a writer that prefers writers (its claim, like the fair queue
/// entry, is taken back with the owner's state held, so `write()` too
/// waits for the undo). The old read-write lock awaited `undo_grant`
/// inline the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_grant_too_few_replicas_saw_is_undone_though_the_acquire_is_cancelled_mid_undo() {
    undone_though_cancelled_mid_undo(Kind::Write).await;
}

/// A primary and one replica of its own, in sync.
fn primary_with_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start().unwrap();
    let replica = RedisServer::builder()
        .arg("--replicaof")
        .arg("127.0.0.1")
        .arg(primary.port().to_string())
        .start()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut replica.connection().unwrap())
            .unwrap();
        if info.contains("master_link_status:up") {
            break;
        }
        assert!(Instant::now() < deadline, "the replica never synced");
        std::thread::sleep(Duration::from_millis(50));
    }
    (primary, replica)
}

/// The timeline, from the acquire's send (its script call and `WAIT 1
/// 400` in one chunk; the proxy holds each chunk 600 ms, one after
/// another per direction; the replica is frozen with SIGSTOP):
///
/// - 600 ms: the grant runs on the primary; `WAIT` blocks until 1000 and
///   answers 0.
/// - 1800: the client has both replies (the script's at 1200, `WAIT`'s
///   behind it at 1800): `NotReplicated`, and the undo (a release, plus
///   its own `WAIT`) is sent; the proxy holds it until 2400.
/// - 2100: the proxy resets every connection, and every new one until
///   3100: the undo's first send never reaches Redis, and its resends fail.
/// - 2400: the acquire is dropped (it still waits for the owner's state,
///   which the undo holds).
/// - 3100: traffic passes again; only an undo that is still being sent
///   can free the lock before its 30 s lease.
///
/// Margins: 300 ms on each side of the reset.
async fn undone_though_cancelled_mid_undo(kind: Kind) {
    let (primary, replica) = tokio::task::spawn_blocking(primary_with_replica)
        .await
        .unwrap();
    let proxy = FaultProxy::start(&primary.addr()).unwrap();
    let client = Client::builder(proxy.url())
        .lease(LEASE)
        .command_timeout(Duration::from_secs(5))
        .replica_acks(1, UNREPLICATED_ACK_WAIT)
        .build()
        .await
        .expect("connect through the proxy");
    assert_eq!(client.replica_acks(), 1);
    let name = format!("unreplicated-{kind:?}");
    let handle = Handle::new(&client, kind, &name, LEASE).preferring_writers();
    // Warm-up while the replica acknowledges: scripts loaded, the fair
    // owner's channel kept subscribed. On a loaded machine the replica may
    // miss the acknowledgement window now and then: that grant is undone
    // (NotReplicated), and the warm-up tries again.
    let mut tries = 0;
    let warm = loop {
        tries += 1;
        match handle.acquire().await {
            Err(e) if e.kind() == ErrorKind::NotReplicated && tries < 5 => continue,
            other => break other.expect("warm-up: the replica acknowledges"),
        }
    };
    warm.release().await.unwrap();
    let counter = token_key(&name);
    let tokens_before = get(&primary, &counter);

    replica.pause().expect("freeze the replica");
    proxy.set_mode(FaultMode::Latency(UNREPLICATED_LATENCY));
    let started = tokio::time::Instant::now();
    let mut attempt = Box::pin(handle.acquire());
    let early = tokio::time::timeout_at(started + UNREPLICATED_RESET_AT, &mut attempt).await;
    proxy.set_mode(FaultMode::Reset);
    // The grant ran at 0.6 s; its undo is held in the proxy (being reset).
    let landed = hget(&primary, &name, &handle.field());
    let outcome = match early {
        Ok(done) => Some(done),
        Err(_) => tokio::time::timeout_at(started + UNREPLICATED_CANCEL_AT, &mut attempt)
            .await
            .ok(),
    };
    drop(attempt);
    tokio::time::sleep_until(started + UNREPLICATED_RESET_UNTIL).await;
    proxy.set_mode(FaultMode::Pass);
    let healed_at = Instant::now();

    assert_eq!(
        landed.as_deref(),
        Some("1"),
        "{kind:?}: the grant must be on the primary, not yet undone, when the proxy resets \
         (2.1 s; the undo cannot reach the primary before 2.4 s); the timeline did not hold"
    );
    match &outcome {
        // Cancelled while it waited for the undo: the case under test.
        None => {}
        Some(Err(e)) if e.kind() == ErrorKind::NotReplicated => {}
        Some(other) => panic!(
            "{kind:?}: the acquire ended with {other:?}; expected NotReplicated (the replica is \
             frozen) or a cancel while its undo ran"
        ),
    }
    assert_ne!(
        get(&primary, &counter),
        tokens_before,
        "{kind:?}: a grant landed (the fencing counter moved)"
    );
    let owner = handle.owner().to_owned();
    let (srv, lock, owner_ref) = (&primary, name.as_str(), owner.as_str());
    let clean = common::eventually(Duration::from_secs(10), || async move {
        leftovers(srv, kind, lock, owner_ref).is_empty()
    })
    .await;
    assert!(
        clean,
        "{kind:?}: {:?} after the proxy healed, {:?} is left (lease 30 s): the undo of the grant \
         too few replicas saw was abandoned",
        healed_at.elapsed(),
        leftovers(&primary, kind, &name, &owner)
    );
    replica.resume().expect("thaw the replica");
}

// ---------------------------------------------------------------------
// Defect 11: what a resent release of a fair or read-write hold answers.
// ---------------------------------------------------------------------

/// Defect 11: "Fair/rw release resend reports success too readily (`Ok((_,
/// 0)) if sends > 1`), even when the lease was lost before the first
/// send". failed_release.rs pins this for the plain lock; this is the fair
/// lock, the writer and a reader.
///
/// The old fair and read-write `release_call` answered `Ok` for any resend
/// that found the hold gone. Now a resend finding no hold answers
/// `NotHeld` when the lease had run out on the server before the first
/// send (the local deadline plus the command timeout, the latest the
/// server's expiry can be), even without release receipts (off here, so
/// only that rule can make the answer exact; `Unconfirmed` would mean it
/// did not apply).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_release_of_a_lease_lost_before_it_was_sent_answers_not_held_for_fair_write_and_read(
) {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let client = short_timeouts(&proxy).await;
    for kind in [Kind::Fair, Kind::Write, Kind::Read] {
        let name = format!("lost-then-resent-{kind:?}");
        proxy.set_mode(FaultMode::Pass);
        // Loads the acquire and release scripts.
        Handle::new(&client, kind, &name, Duration::from_secs(60))
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        let guard = Handle::new(&client, kind, &name, Duration::from_millis(200))
            .acquire()
            .await
            .unwrap();
        // Past the lease and one command timeout (300 ms) more.
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(guard.is_lost(), "{kind:?}: the lease ran out locally");
        assert!(!exists(&server, &name), "{kind:?}: and on the server");

        // The first send is held past the command timeout (its reply is
        // lost to the client), so the release is resent; both find nothing.
        let calls = evalsha_calls(&server);
        proxy.set_mode(FaultMode::Latency(Duration::from_millis(400)));
        let releasing = tokio::spawn(guard.release());
        tokio::time::sleep(Duration::from_millis(350)).await;
        proxy.set_mode(FaultMode::Pass);
        let result = tokio::time::timeout(Duration::from_secs(10), releasing)
            .await
            .expect("the release ends")
            .unwrap();
        assert_eq!(
            result.as_ref().map_err(|e| e.kind()),
            Err(ErrorKind::NotHeld),
            "{kind:?}: the lease ran out before the release was first sent; it said {result:?}"
        );
        assert!(
            evalsha_calls(&server) >= calls + 2,
            "{kind:?}: the release was resent (else this test proves nothing)"
        );
    }
}

/// Defect 11, a release that is not the final one: the owner holds twice
/// (a reentrant acquire), releases once, and that release's reply is cut
/// after the server ran it. The resend finds one hold where it expected
/// two: one hold released, answered `Ok`, never a final release; the other
/// hold stays on the server (count 1) and in its guard, which releases it
/// later as the last one. With release receipts off and on.
///
/// (The old code answered this one correctly too, `{4, 1}`; its failure on
/// a non-final release is the next test's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_partial_release_answers_one_released_and_keeps_the_other_hold() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let other = common::client(&server, LEASE).await;
    for receipts in [false, true] {
        let client = connect(&proxy.url(), LEASE, receipts).await;
        for kind in [Kind::Fair, Kind::Write, Kind::Read] {
            let name = format!("partial-{kind:?}-{receipts}");
            // Loads the scripts: the cut must hit the release's own answer.
            Handle::new(&client, kind, &name, Duration::from_secs(60))
                .acquire()
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
            // A fixed lease: no renewal call can take the cut.
            let handle = Handle::new(&client, kind, &name, Duration::from_secs(60));
            let outer = handle.acquire().await.unwrap();
            let inner = handle.acquire().await.unwrap();
            assert_eq!(
                hget(&server, &name, &handle.field()).as_deref(),
                Some("2"),
                "{kind:?}: two holds"
            );

            let cuts = proxy.cuts();
            proxy.cut_reply_after(b"EVALSHA");
            let released = tokio::time::timeout(Duration::from_secs(10), inner.release())
                .await
                .expect("the release ends");
            proxy.disarm_cut();
            assert!(proxy.cuts() > cuts, "{kind:?}: the release reply was cut");
            assert!(
                released.is_ok(),
                "{kind:?}, receipts {receipts}: the first send released one of two holds, the \
                 resend found the other; it said {released:?}"
            );
            assert_eq!(
                hget(&server, &name, &handle.field()).as_deref(),
                Some("1"),
                "{kind:?}: one hold left on the server"
            );
            assert!(!outer.is_lost(), "{kind:?}: the other hold is still held");
            assert!(
                outer.remaining_lease() > Duration::from_secs(30),
                "{kind:?}: and its lease was not cut: {:?}",
                outer.remaining_lease()
            );
            let theirs = Handle::new(&other, rival(kind), &name, LEASE)
                .try_once()
                .await
                .unwrap();
            assert!(theirs.is_none(), "{kind:?}: nobody else gets it");
            // Had the resend been read as the final release, the owner
            // would count 0 holds and this would answer NotHeld.
            let last = outer.release().await;
            assert!(
                last.is_ok(),
                "{kind:?}: the remaining hold is released as the last one: {last:?}"
            );
            assert!(!exists(&server, &name), "{kind:?}: free");
        }
    }
}

/// Defect 11, "even when ... the release was not the final one": the
/// owner holds twice and releases once; the first send is held past the
/// command timeout, and before it reaches the server the hold is wiped
/// (an admin's DEL, as a force-unlock or a failover would). Both sends
/// find nothing. The old `Ok((_, 0)) if sends > 1` read that as "my first
/// send freed it" and answered `Ok`; a release of one of two holds cannot
/// have freed the lock, so the answer must say the hold was lost, and the
/// remaining guard must know.
///
/// Note: `NotHeld` is the exact answer here (the first send of a
/// non-final release can never leave the hold gone); today's core answers
/// `Unconfirmed` (engine/counted.rs `apply_release`: only `lost_before` or a
/// receipt of a final release make "gone after a resend" exact). Both are
/// accepted; `Ok` is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_partial_release_that_finds_the_hold_gone_never_answers_ok() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let client = short_timeouts(&proxy).await;
    for kind in [Kind::Fair, Kind::Write, Kind::Read] {
        let name = format!("partial-gone-{kind:?}");
        proxy.set_mode(FaultMode::Pass);
        Handle::new(&client, kind, &name, Duration::from_secs(60))
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        let handle = Handle::new(&client, kind, &name, Duration::from_secs(60));
        let outer = handle.acquire().await.unwrap();
        let inner = handle.acquire().await.unwrap();

        proxy.set_mode(FaultMode::Latency(Duration::from_millis(400)));
        let releasing = tokio::spawn(inner.release());
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Wiped while the first send is still in the proxy (it reaches the
        // server at 400 ms, after the command timeout at 300 ms).
        let _: i64 = redis::cmd("DEL")
            .arg(&name)
            .query(&mut admin(&server))
            .unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
        proxy.set_mode(FaultMode::Pass);
        let result = tokio::time::timeout(Duration::from_secs(10), releasing)
            .await
            .expect("the release ends")
            .unwrap();
        assert!(
            matches!(
                result,
                Err(Error::NotHeld { .. } | Error::Unconfirmed { .. })
            ),
            "{kind:?}: a release of one of two holds found the hold gone after a resend; it \
             cannot have freed it itself, yet it said {result:?}"
        );
        assert!(
            outer.is_lost(),
            "{kind:?}: the remaining guard must know the hold is gone"
        );
        let last = outer.release().await;
        assert!(
            last.is_err(),
            "{kind:?}: nothing is left to release: {last:?}"
        );
    }
}

/// Defect 13 / 11, the Read case of release_answers.rs's
/// `a_release_of_a_hold_a_restart_wiped_never_answers_ok` (which covers
/// the lock, the fair lock and the writer): A holds a read hold, the
/// server restarts empty (no persistence; A's connection breaks, so its
/// release is resent after a reconnect), B takes the write lock, and A's
/// read release must not answer `Ok`. The old code read "gone after a
/// resend" as "my first send freed it" and answered `Ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_release_of_a_hold_a_restart_wiped_never_answers_ok() {
    let mut server = RedisServer::start().unwrap();
    for receipts in [true, false] {
        let a = connect(&server.url(), LEASE, receipts).await;
        let b = common::client(&server, LEASE).await;
        let name = format!("wiped-Read-{receipts}");
        // A fixed lease: no renewal finds the loss before the release.
        let held = Handle::new(&a, Kind::Read, &name, Duration::from_secs(60))
            .acquire()
            .await
            .unwrap();
        assert!(!held.is_lost());
        server.restart().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let theirs = loop {
            match Handle::new(&b, Kind::Write, &name, LEASE).try_once().await {
                Ok(Some(guard)) => break guard,
                Ok(None) => {}
                Err(e) if e.is_reply_lost() => {}
                Err(e) => panic!("B's write attempt failed: {e}"),
            }
            assert!(
                Instant::now() < deadline,
                "B never got the write lock after the restart"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let released = held.release().await;
        if receipts {
            assert!(
                matches!(released, Err(Error::NotHeld { .. })),
                "Read: the hold was wiped by the restart; the release said {released:?}"
            );
        } else {
            assert!(
                matches!(
                    released,
                    Err(Error::NotHeld { .. } | Error::Unconfirmed { .. })
                ),
                "Read: the hold was wiped by the restart; the release said {released:?}"
            );
        }
        assert!(exists(&server, &name), "Read: B's hold is untouched");
        theirs.release().await.unwrap();
    }
}

// ---------------------------------------------------------------------
// Defect 3: a semaphore drain is never resent (setup as at_most_once.rs).
// ---------------------------------------------------------------------

/// Defect 3, the `drain` case: "a `drain` answers 0 the second time". The
/// cluster client resent non-idempotent scripts after a dropped connection
/// (redis-rs's `.retries(3)` re-queues on a broken pipe), so a drain whose
/// reply was cut ran again, found 0 permits and answered `Ok(0)`: the
/// permits were taken and nobody was told how many. Now the drain goes out
/// on the connection that never resends: it runs once, and the caller
/// hears the outcome is unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_whose_reply_is_cut_runs_exactly_once() {
    if common::lacks_7_0(
        "a node announcing another port while it runs (cluster-announce-port at runtime)",
    ) {
        return;
    }
    let name = "drain:{slot}";
    let setup = tokio::task::spawn_blocking(move || proxied_cluster(name))
        .await
        .unwrap();
    let client = setup.client().await;

    let semaphore = client.semaphore(name).unwrap();
    // Also loads the update script (drain's) on the owner.
    assert!(semaphore.try_set_permits(5).await.unwrap());
    assert_eq!(setup.get(name), Some(5));

    let calls = evalsha_calls(&setup.cluster.nodes()[setup.node]);
    setup.proxy.cut_reply_after(b"EVALSHA");
    let drained = semaphore.drain().await;
    assert_eq!(setup.proxy.cuts(), 1, "the reply was cut");
    assert!(
        drained.is_err(),
        "the outcome is unknown; Ok(0) is a hidden second run's answer: {drained:?}"
    );
    assert_eq!(setup.get(name), Some(0), "drained");
    assert_eq!(
        evalsha_calls(&setup.cluster.nodes()[setup.node]) - calls,
        1,
        "drain ran exactly once on the owner"
    );

    // The connection recovers: the next calls work and run once each.
    let added = semaphore.add_permits(3).await;
    assert_eq!(added.as_ref().ok(), Some(&3), "{added:?}");
    let again = semaphore.drain().await;
    assert_eq!(again.as_ref().ok(), Some(&3), "{again:?}");
    assert_eq!(setup.get(name), Some(0));
}
