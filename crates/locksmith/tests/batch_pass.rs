//! The batcher's run-queue pass: a caller that finds a free place for a
//! call first lets the tasks ready to run go (see `engine::batch`). A
//! caller dropped during that pass has its request withdrawn, as one
//! dropped while queued: nothing reaches the server.

mod common;

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
