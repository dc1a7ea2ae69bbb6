//! The batcher's run-queue pass: a caller that finds a free place for a
//! call, when the queue's last call carried more than one request, first
//! lets the tasks ready to run go (see `engine::batch`). A caller dropped
//! during that pass has its request withdrawn, as one dropped while
//! queued: nothing reaches the server. After a lone call there is no pass:
//! a lone caller's request goes out at once.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The lock's fencing counter: every grant takes the next value.
fn grants(server: &locksmith_testkit::RedisServer) -> Option<u64> {
    let mut conn = server.connection().expect("a connection to the server");
    redis::cmd("GET")
        .arg("redisson_lock_token:{pass-drop}")
        .query(&mut conn)
        .expect("GET")
}

#[tokio::test(flavor = "current_thread")]
async fn an_acquire_dropped_during_the_pass_before_its_call_is_never_sent() {
    let (server, client) = common::setup(Duration::from_secs(30)).await;
    let lock = client.lock("pass-drop").unwrap();
    // Warm-up: the scripts are loaded and the client's background work
    // started, so the acquire below goes straight to the batcher.
    lock.lock().await.unwrap().release().await.unwrap();
    in_company(&client).await;
    let before = grants(&server);
    assert!(before.is_some(), "the warm-up's grant took a token");

    // The acquire runs as a task; a second task, queued behind it, aborts
    // it. Its first poll queues its request, takes the free place and
    // yields, which puts it behind the second task: so it is dropped
    // during the pass, before its call was sent.
    let mine = lock.clone();
    let attempt = tokio::spawn(async move { mine.lock().await.map(|_guard| ()) });
    let abort = attempt.abort_handle();
    tokio::spawn(async move { abort.abort() });
    let ended = attempt.await;
    assert!(
        ended.as_ref().is_err_and(|e| e.is_cancelled()),
        "the acquire was dropped before it could end: {ended:?}"
    );
    // Give anything sent on its behalf time to land.
    tokio::time::sleep(Duration::from_millis(300)).await;

    // (The acquire's undo, a release of a hold it never got, may have run:
    // it takes no token.)
    assert_eq!(
        grants(&server),
        before,
        "the request of an acquire dropped during the pass was sent and granted"
    );
    let mut conn = server.connection().unwrap();
    let held: bool = redis::cmd("EXISTS")
        .arg("pass-drop")
        .query(&mut conn)
        .unwrap();
    assert!(!held, "nothing of the dropped acquire is on the server");
    // The place was given back: the next acquire goes out and is granted.
    let guard = tokio::time::timeout(Duration::from_secs(5), lock.lock())
        .await
        .expect("the next acquire is not stuck behind the dropped one")
        .unwrap();
    guard.release().await.unwrap();
}

/// Acquires of eight locks at once, so that the acquire batcher's last
/// call carries several requests: two go out alone (the two places), the
/// other six queue and travel together. The next caller then takes the
/// run-queue pass.
async fn in_company(client: &locksmith::Client) {
    let guards = futures_util::future::join_all(
        (0..8).map(|i| async move { client.lock(format!("company-{i}")).unwrap().lock().await }),
    )
    .await;
    for guard in guards {
        guard.unwrap().release().await.unwrap();
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_lone_acquire_after_a_lone_call_goes_out_at_once() {
    let (server, client) = common::setup(Duration::from_secs(30)).await;
    let lock = client.lock("pass-drop").unwrap();
    // Warm-up, alone: the acquire batcher's last call carried one request.
    lock.lock().await.unwrap().release().await.unwrap();
    let before = grants(&server).expect("the warm-up's grant took a token");

    // As above, but with no company there is no pass: the acquire's first
    // poll sends its request, so the abort queued behind it comes after
    // the request went out. The grant lands and is undone.
    let mine = lock.clone();
    let attempt = tokio::spawn(async move { mine.lock().await.map(|_guard| ()) });
    let abort = attempt.abort_handle();
    tokio::spawn(async move { abort.abort() });
    let ended = attempt.await;
    assert!(
        ended.as_ref().is_err_and(|e| e.is_cancelled()),
        "the acquire was dropped before it could end: {ended:?}"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut conn = server.connection().unwrap();
    loop {
        let held: bool = redis::cmd("EXISTS")
            .arg("pass-drop")
            .query(&mut conn)
            .unwrap();
        if grants(&server) == Some(before + 1) && !held {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "a lone acquire waited for company: its request was not sent before the abort \
             (tokens {before} -> {:?}, held {held})",
            grants(&server)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A runtime shut down while calls are out and more requests are queued
/// behind them: the tasks it drops include those holding the calls'
/// places, whose hand-off to the queue would spawn into the closing
/// runtime (which drops the new task unrun at once, with the place it was
/// given). The place is given back instead of handed on again and again
/// (which recursed until the stack overflowed and aborted the process),
/// nothing panics while the runtime drops its tasks, and the client goes
/// on working on another runtime.
#[test]
fn a_runtime_shut_down_with_requests_queued_gives_their_places_back() {
    static PANICS: AtomicUsize = AtomicUsize::new(0);
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        previous(info);
    }));

    let server = locksmith_testkit::RedisServer::start().expect("start redis-server");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = runtime.block_on(common::client(&server, Duration::from_secs(30)));
    let finished = Arc::new(AtomicUsize::new(0));
    runtime.block_on(async {
        // Warm-up: the scripts are loaded.
        let lock = client.lock("shutdown-warm").unwrap();
        lock.lock().await.unwrap().release().await.unwrap();
        // The server holds every command for a while: the calls that go
        // out stay out.
        let mut admin = server.connection().expect("a connection to the server");
        common::pause_all(&mut admin, 1_500);
        // More acquires than two calls carry (128 each): both calls go out
        // and the rest wait in the queue.
        for i in 0..400 {
            let lock = client.lock(format!("shutdown-{i}")).unwrap();
            let finished = finished.clone();
            tokio::spawn(async move {
                let _ = lock.lock().await;
                finished.fetch_add(1, Ordering::SeqCst);
            });
        }
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    });
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "no acquire could end while the server held the calls"
    );
    // Every task is dropped here, in an order the test does not control.
    drop(runtime);
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        0,
        "a task panicked while the runtime dropped it"
    );

    // The client still works from another runtime (the places were given
    // back; the acquire waits out the pause).
    let other = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    other.block_on(async {
        let lock = client.lock("after-shutdown").unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(10), lock.lock())
            .await
            .expect("an acquire after the shutdown is not stuck")
            .expect("granted");
        guard.release().await.unwrap();
    });
}
