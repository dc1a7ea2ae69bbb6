//! What the counted kinds (lock, fair lock, read-write lock) and the
//! simple lock answer and
//! keep locally around a release, and how their waits clean up after
//! themselves: the shared release core, its receipts, and the wake-ups of
//! withdrawn or failed waiters.
//!
//! - A release whose reply is cut after the server ran it is resent and
//!   answers `Ok` with release receipts on (the resend finds the receipt
//!   its first send left), `Unconfirmed` without them, never `NotHeld`.
//! - A release of a hold that a restart wiped answers an error, never `Ok`,
//!   even though its first send may have failed and been resent: `NotHeld`
//!   with receipts, `NotHeld` or `Unconfirmed` without (which one depends on
//!   whether the client noticed the broken connection before the send).
//! - A release that re-arms the remaining holds measures the new lease
//!   from when it was sent, so the local deadline never ends after the
//!   server's expiry.
//! - A cancelled fair wait or writer claim is cleaned up even when the same
//!   owner calls again at once; a withdrawn claim wakes the readers it held
//!   back; an atomic MultiLock that was woken and failed passes the wake-up
//!   on to a plain waiter behind it.
//! - An acquire dropped after its first send's reply was cut, anywhere in
//!   its reconnect and resend, leaves nothing held (its grant is undone).

use crate::common;

use std::time::{Duration, Instant};

use common::client;
use locksmith::{Client, Error, LockGuard};
use locksmith_testkit::{FaultMode, FaultProxy, RedisServer};

/// A client that reaches `server` through `proxy`.
async fn proxied(proxy: &FaultProxy, lease: Duration) -> Client {
    connect(&proxy.url(), lease, false).await
}

/// A client of `url`, with release receipts on or off.
async fn connect(url: &str, lease: Duration, receipts: bool) -> Client {
    Client::builder(url)
        .lease(lease)
        .command_timeout(Duration::from_secs(2))
        .release_receipts(receipts)
        .build()
        .await
        .expect("connect")
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    let mut conn = server.connection().unwrap();
    redis::cmd("PTTL").arg(key).query(&mut conn).unwrap()
}

fn exists(server: &RedisServer, key: &str) -> bool {
    let mut conn = server.connection().unwrap();
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut conn)
        .unwrap()
        == 1
}

/// The kinds with a counted hold, each taking one hold of lock `name`.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Lock,
    Fair,
    Write,
    Read,
    /// The simple lock (compare-and-delete release; receipts too).
    Simple,
}

const KINDS: [Kind; 5] = [
    Kind::Lock,
    Kind::Fair,
    Kind::Write,
    Kind::Read,
    Kind::Simple,
];

async fn take(client: &Client, kind: Kind, name: &str, lease: Duration) -> LockGuard {
    acquire(client, kind, name, lease).await.unwrap()
}

/// One acquire of `kind` (waiting as long as it takes).
async fn acquire(
    client: &Client,
    kind: Kind,
    name: &str,
    lease: Duration,
) -> locksmith::Result<LockGuard> {
    match kind {
        Kind::Lock => {
            client
                .lock(name)
                .unwrap()
                .with_lease(lease)
                .unwrap()
                .lock()
                .await
        }
        Kind::Fair => {
            let lock = client.fair_lock(name).unwrap().with_lease(lease).unwrap();
            lock.lock().await
        }
        Kind::Write => {
            let lock = client.read_write_lock(name).unwrap().with_lease(lease);
            lock.unwrap().write().await
        }
        Kind::Read => {
            let lock = client.read_write_lock(name).unwrap().with_lease(lease);
            lock.unwrap().read().await
        }
        Kind::Simple => {
            let lock = client.simple_lock(name).unwrap().with_lease(lease);
            lock.unwrap().lock().await
        }
    }
}

/// Another owner's attempt at the same kind of hold (a writer for a
/// read hold, so it is refused while the read hold stands).
async fn try_other(client: &Client, kind: Kind, name: &str) -> Option<LockGuard> {
    match kind {
        Kind::Lock => client.lock(name).unwrap().try_lock().await,
        Kind::Fair => client.fair_lock(name).unwrap().try_lock().await,
        Kind::Write | Kind::Read => client.read_write_lock(name).unwrap().try_write().await,
        Kind::Simple => client.simple_lock(name).unwrap().try_lock().await,
    }
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_reply_is_cut_is_resent_and_answers_ok_with_receipts() {
    cut_release(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_reply_is_cut_is_unconfirmed_without_receipts() {
    cut_release(false).await;
}

/// Cuts the reply of a final release of every kind; its resend finds the
/// lock free.
async fn cut_release(receipts: bool) {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let client = connect(&proxy.url(), Duration::from_secs(30), receipts).await;
    let other = common::client(&server, Duration::from_secs(30)).await;
    for kind in KINDS {
        let name = format!("cut-{kind:?}");
        // A first hold and release loads the scripts, so the reply cut
        // below is the release's own answer, not a NOSCRIPT refusal.
        let warm = take(&client, kind, &name, Duration::from_secs(60)).await;
        warm.release().await.unwrap();
        let receipt = format!("{{{name}}}:locksmith_released:");
        let mut conn = server.connection().unwrap();
        let warm_receipts: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{receipt}*"))
            .query(&mut conn)
            .unwrap();
        for key in warm_receipts {
            let _: i64 = redis::cmd("DEL").arg(key).query(&mut conn).unwrap();
        }
        let guard = take(&client, kind, &name, Duration::from_secs(60)).await;
        let cuts = proxy.cuts();
        proxy.cut_reply_after(b"EVALSHA");
        let released = guard.release().await;
        assert!(proxy.cuts() > cuts, "{kind:?}: the release reply was cut");
        if receipts {
            assert!(
                released.is_ok(),
                "{kind:?}: the first send freed the lock, the resend must say so: {released:?}"
            );
        } else {
            assert!(
                matches!(released, Err(Error::Unconfirmed { .. })),
                "{kind:?}: without a receipt the resend cannot tell; it said {released:?}"
            );
        }
        let left: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{receipt}*"))
            .query(&mut conn)
            .unwrap();
        assert_eq!(!left.is_empty(), receipts, "{kind:?}: receipts {left:?}");
        assert!(!exists(&server, &name), "{kind:?}: freed on the server");
        let again = try_other(&other, kind, &name).await;
        assert!(again.is_some(), "{kind:?}: another owner gets it");
        again.unwrap().release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_of_a_hold_a_restart_wiped_never_answers_ok() {
    let mut server = RedisServer::start().unwrap();
    for receipts in [true, false] {
        let a = connect(&server.url(), Duration::from_secs(30), receipts).await;
        let b = client(&server, Duration::from_secs(30)).await;
        for kind in [Kind::Lock, Kind::Fair, Kind::Write, Kind::Simple] {
            let name = format!("wiped-{kind:?}-{receipts}");
            // A fixed lease: no renewal finds the loss before the release.
            let held = take(&a, kind, &name, Duration::from_secs(60)).await;
            assert!(!held.is_lost());
            // No persistence: the restart forgets the hold, and A's
            // connection breaks, so its release is sent again after a
            // reconnect.
            server.restart().unwrap();
            let theirs = loop {
                match try_other(&b, kind, &name).await {
                    Some(guard) => break guard,
                    None => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            };
            let released = held.release().await;
            if receipts {
                assert!(
                    matches!(released, Err(Error::NotHeld { .. })),
                    "{kind:?}: the hold was wiped by the restart; the release said {released:?}"
                );
            } else {
                assert!(
                    matches!(
                        released,
                        Err(Error::NotHeld { .. } | Error::Unconfirmed { .. })
                    ),
                    "{kind:?}: the hold was wiped by the restart; the release said {released:?}"
                );
            }
            assert!(exists(&server, &name), "{kind:?}: B's hold is untouched");
            theirs.release().await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_rearms_the_holds_left_from_when_it_was_sent() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let client = proxied(&proxy, Duration::from_secs(30)).await;
    let lease = Duration::from_secs(3);
    // Each kind with one handle (one owner) and two holds.
    for kind in [Kind::Lock, Kind::Fair, Kind::Write] {
        let name = format!("rearm-{kind:?}");
        proxy.set_mode(FaultMode::Pass);
        let (first, second) = match kind {
            Kind::Lock => {
                let lock = client.lock(&name).unwrap().with_lease(lease).unwrap();
                (lock.lock().await.unwrap(), lock.lock().await.unwrap())
            }
            Kind::Fair => {
                let lock = client.fair_lock(&name).unwrap().with_lease(lease).unwrap();
                (lock.lock().await.unwrap(), lock.lock().await.unwrap())
            }
            _ => {
                let lock = client
                    .read_write_lock(&name)
                    .unwrap()
                    .with_lease(lease)
                    .unwrap();
                (lock.write().await.unwrap(), lock.write().await.unwrap())
            }
        };
        // Every reply now comes back 2 x 300 ms after its request left: the
        // release re-arms the lease when it runs, 300 ms after it was sent.
        proxy.set_mode(FaultMode::Latency(Duration::from_millis(300)));
        second.release().await.unwrap();
        let server_left = pttl(&server, &name);
        let local_left = first.remaining_lease().as_millis() as i64;
        proxy.set_mode(FaultMode::Pass);
        assert!(
            local_left <= server_left + 50,
            "{kind:?}: the guard counts on {local_left} ms, the server keeps the lock {server_left} ms"
        );
        first.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_fair_wait_leaves_the_queue_even_if_its_owner_tries_again_at_once() {
    let server = RedisServer::start().unwrap();
    let holder = client(&server, Duration::from_secs(30)).await;
    let owner = client(&server, Duration::from_secs(30)).await;
    let later = client(&server, Duration::from_secs(30)).await;
    let held = holder.fair_lock("queue").unwrap().lock().await.unwrap();
    let lock = owner.fair_lock("queue").unwrap();
    // Queued, then cancelled.
    let cancelled = tokio::time::timeout(
        Duration::from_millis(200),
        lock.try_lock_for(Duration::from_secs(30)),
    )
    .await;
    assert!(cancelled.is_err(), "the lock is held: the wait was cut");
    // The same owner tries once right away (a single try never queues).
    assert!(lock.try_lock().await.unwrap().is_none());
    let waiter = later.fair_lock("queue").unwrap();
    let waiting = tokio::spawn(async move {
        let guard = waiter.lock().await.unwrap();
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released_at = Instant::now();
    held.release().await.unwrap();
    let (got_at, guard) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the next waiter gets the lock")
        .unwrap();
    let waited = got_at - released_at;
    assert!(
        waited < Duration::from_millis(1500),
        "the next waiter waited {waited:?}: a stale queue entry of the cancelled wait held it back"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_writer_claim_does_not_block_its_owners_read() {
    let server = RedisServer::start().unwrap();
    let reader = client(&server, Duration::from_secs(30)).await;
    let owner = client(&server, Duration::from_secs(30)).await;
    let held = reader
        .read_write_lock("claim")
        .unwrap()
        .read()
        .await
        .unwrap();
    let lock = owner.read_write_lock("claim").unwrap().prefer_writers();
    let cancelled = tokio::time::timeout(Duration::from_millis(200), lock.write()).await;
    assert!(
        cancelled.is_err(),
        "a reader holds it: the write wait was cut"
    );
    // The same owner reads at once: its own withdrawn claim must not hold
    // it back (nor anyone else's reads).
    let started = Instant::now();
    let read = tokio::time::timeout(Duration::from_secs(20), lock.read())
        .await
        .expect("the read completes")
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the read waited {:?} behind its own cancelled claim",
        started.elapsed()
    );
    read.release().await.unwrap();
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_writer_claim_wakes_the_readers_it_held_back() {
    let server = RedisServer::start().unwrap();
    let reader = client(&server, Duration::from_secs(30)).await;
    let writer = client(&server, Duration::from_secs(30)).await;
    let late = client(&server, Duration::from_secs(30)).await;
    let held = reader
        .read_write_lock("withdraw")
        .unwrap()
        .read()
        .await
        .unwrap();
    let claimant = writer.read_write_lock("withdraw").unwrap().prefer_writers();
    let claiming =
        tokio::spawn(async move { claimant.try_write_for(Duration::from_millis(800)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A new reader that prefers writers waits behind the claim.
    let blocked = late.read_write_lock("withdraw").unwrap().prefer_writers();
    let reading = tokio::spawn(async move {
        let guard = blocked.read().await.unwrap();
        (Instant::now(), guard)
    });
    let gave_up = claiming.await.unwrap().unwrap();
    assert!(gave_up.is_none(), "the writer gave up");
    let gave_up_at = Instant::now();
    let (read_at, guard) = tokio::time::timeout(Duration::from_secs(40), reading)
        .await
        .expect("the reader gets in")
        .unwrap();
    let waited = read_at.saturating_duration_since(gave_up_at);
    assert!(
        waited < Duration::from_secs(2),
        "the reader slept {waited:?} after the claim that held it back was withdrawn"
    );
    guard.release().await.unwrap();
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_atomic_multilock_that_fails_after_a_wake_up_passes_it_on() {
    let server = RedisServer::start().unwrap();
    let holders = client(&server, Duration::from_secs(30)).await;
    let waiters = client(&server, Duration::from_secs(30)).await;
    let x = holders.lock("pass-x").unwrap().lock().await.unwrap();
    let y = holders.lock("pass-y").unwrap().lock().await.unwrap();
    let multi = waiters.multi_lock(["pass-x", "pass-y"]).unwrap();
    assert!(multi.is_atomic());
    let multi_wait = tokio::spawn(async move { multi.try_lock_for(Duration::from_secs(20)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A plain waiter for x alone, of the same client, queued behind the
    // MultiLock.
    let plain = waiters.lock("pass-x").unwrap();
    let plain_wait = tokio::spawn(async move {
        let guard = plain.try_lock_for(Duration::from_secs(20)).await.unwrap();
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    x.release().await.unwrap();
    let (got_at, guard) = plain_wait.await.unwrap();
    let guard = guard.expect("the plain waiter gets x");
    let waited = got_at - released_at;
    assert!(
        waited < Duration::from_secs(2),
        "the plain waiter slept {waited:?}: the MultiLock used the wake-up and failed on y"
    );
    guard.release().await.unwrap();
    y.release().await.unwrap();
    let all = multi_wait.await.unwrap().unwrap();
    all.expect("the MultiLock gets both in the end")
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_dropped_while_its_resend_is_under_way_leaves_nothing_held() {
    // The acquire's first send lands (a grant on the server) and its reply
    // is cut; the client reconnects and resends. The caller gives up at
    // some point of that (the scheduler turns below), possibly while the resend
    // still waits in the batcher: the grant must be undone then, not left
    // on the server for its 30 s lease with nobody holding it.
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let client = proxied(&proxy, Duration::from_secs(30)).await;
    let other = common::client(&server, Duration::from_secs(30)).await;
    let lease = Duration::from_secs(30);
    let mut dropped_after_cut = 0;
    for kind in KINDS {
        for spins in [0u32, 1, 2, 4, 8, 16, 32, 64] {
            let name = format!("dropped-resend-{kind:?}-{spins}");
            // Loads the scripts: the cut must hit the acquire's own answer.
            take(&client, kind, &name, lease)
                .await
                .release()
                .await
                .unwrap();
            let cuts = proxy.cuts();
            proxy.cut_reply_after(b"EVALSHA");
            // Drops the acquire `spins` scheduler turns after its reply
            // was cut: somewhere in its reconnect and resend.
            let mut attempt = Box::pin(acquire(&client, kind, &name, lease));
            let mut left = None;
            let outcome = loop {
                tokio::select! {
                    biased;
                    result = &mut attempt => break Some(result),
                    () = tokio::task::yield_now() => {
                        if proxy.cuts() > cuts {
                            let left = left.get_or_insert(spins);
                            if *left == 0 {
                                break None;
                            }
                            *left -= 1;
                        }
                    }
                }
            };
            proxy.disarm_cut();
            match outcome {
                // The resend answered first: a plain hold, released.
                Some(Ok(guard)) => {
                    guard.release().await.unwrap();
                    continue;
                }
                Some(Err(e)) => panic!("{kind:?}: the acquire failed: {e}"),
                None => dropped_after_cut += 1,
            }
            drop(attempt);
            let started = Instant::now();
            let theirs = loop {
                if let Some(guard) = try_other(&other, kind, &name).await {
                    break Some(guard);
                }
                if started.elapsed() > Duration::from_secs(5) {
                    break None;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            let Some(theirs) = theirs else {
                panic!("{kind:?}, dropped {spins} turns after the cut: the lock is still held 5 s later (lease 30 s): the dropped acquire's grant was not undone");
            };
            theirs.release().await.unwrap();
        }
    }
    assert!(
        dropped_after_cut > 0,
        "no acquire was dropped after its reply was cut: the test proved nothing"
    );
}
