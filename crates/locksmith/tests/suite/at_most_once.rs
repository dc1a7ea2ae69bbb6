//! Calls that are not idempotent run at most once, whatever happens to the
//! connection: a semaphore's release and `add_permits`, a latch's
//! `count_down`. The reply of such a call is cut after the server ran it
//! (a FaultProxy in front of the slot's owner on a cluster resets the
//! connection as the reply comes back); the caller may hear an error, but
//! the server must have applied the call exactly once. redis-rs's cluster
//! connection resends a command after a dropped connection, so before
//! these calls went through a connection that never resends, a cut reply
//! added permits twice and counted a latch down twice.

use crate::common;

use common::proxied_cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_replies_never_apply_a_semaphore_or_latch_change_twice() {
    if common::lacks_7_0(
        "a node announcing another port while it runs (cluster-announce-port at runtime)",
    ) {
        return;
    }
    let name = "once:{slot}";
    let (setup, latch_name) = tokio::task::spawn_blocking(move || {
        let setup = proxied_cluster(name);
        // Latch names take no braces on a cluster: find a plain one that
        // the proxied node serves.
        let latch_name = (0..)
            .map(|i| format!("once-latch-{i}"))
            .find(|n| setup.cluster.node_for_key(n).unwrap() == setup.node)
            .unwrap();
        (setup, latch_name)
    })
    .await
    .unwrap();
    let latch_name = latch_name.as_str();
    let client = setup.client().await;

    let semaphore = client.semaphore(name).unwrap();
    assert!(semaphore.try_set_permits(5).await.unwrap());
    assert_eq!(setup.get(name), Some(5));

    // add_permits(1) whose reply is cut: applied once (6), not twice.
    setup.proxy.cut_reply_after(b"EVALSHA");
    let added = semaphore.add_permits(1).await;
    assert_eq!(setup.proxy.cuts(), 1, "the reply was cut");
    assert!(added.is_err(), "the outcome is unknown: {added:?}");
    assert_eq!(setup.get(name), Some(6), "add_permits ran exactly once");

    // release(2) likewise: 8, not 10.
    setup.proxy.cut_reply_after(b"EVALSHA");
    let released = semaphore.release(2).await;
    assert_eq!(setup.proxy.cuts(), 2);
    assert!(released.is_err(), "{released:?}");
    assert_eq!(setup.get(name), Some(8), "release ran exactly once");

    // A latch counted down under a cut reply: 2, not 1.
    let latch = client.count_down_latch(latch_name).unwrap();
    assert!(latch.try_set_count(3).await.unwrap());
    setup.proxy.cut_reply_after(b"EVALSHA");
    let down = latch.count_down().await;
    assert_eq!(setup.proxy.cuts(), 3);
    assert!(down.is_err(), "{down:?}");
    assert_eq!(
        setup.get(latch_name),
        Some(2),
        "count_down ran exactly once"
    );

    // The connection recovers: the next calls work and count once.
    let after = semaphore.add_permits(1).await;
    assert_eq!(after.as_ref().ok(), Some(&9), "{after:?}");
    assert_eq!(latch.count_down().await.unwrap(), 1);
}
