//! MultiLock on every topology: opposite orders never deadlock, a busy
//! member leaves nothing held, cancellation leaves nothing held, bad input.

use std::time::Duration;

use locksmith::ErrorKind;

use crate::common::{eventually, Env};

crate::on_every_topology!(
    opposite_orders_never_deadlock,
    a_busy_member_leaves_nothing_held,
    bad_input_is_refused,
);

async fn opposite_orders_never_deadlock(env: Env) {
    let clients = [
        env.client(Duration::from_secs(30)).await,
        env.client(Duration::from_secs(30)).await,
    ];
    // Names spread over slots on a cluster.
    let names: Vec<String> = ["alpha", "bravo", "charlie"]
        .iter()
        .map(|n| env.name(n))
        .collect();
    let mut reversed = names.clone();
    reversed.reverse();
    let mut tasks = Vec::new();
    for (i, order) in [names.clone(), reversed].into_iter().enumerate() {
        let multi = clients[i].multi_lock(order).unwrap();
        tasks.push(tokio::spawn(async move {
            for _ in 0..64 {
                let guard = multi.lock().await.unwrap();
                assert_eq!(guard.fencing_tokens().len(), 3);
                tokio::time::sleep(Duration::from_millis(1)).await;
                guard.release().await.unwrap();
            }
        }));
    }
    let all = async {
        for t in tasks {
            t.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("no deadlock: 2 x 64 rounds finish");
    assert!(env.existing(&names).is_empty(), "all released");
}

async fn a_busy_member_leaves_nothing_held(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    let names: Vec<String> = ["from", "to", "ledger"]
        .iter()
        .map(|n| env.name(n))
        .collect();
    let busy = client.lock(names[1].clone()).unwrap().lock().await.unwrap();
    let multi = client.multi_lock(names.clone()).unwrap();
    assert!(multi.try_lock().await.unwrap().is_none());
    assert!(multi
        .try_lock_for(Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
    let free: Vec<String> = names.iter().filter(|n| **n != names[1]).cloned().collect();
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.existing(&free).is_empty()
        })
        .await,
        "members taken before the busy one were released"
    );
    // Cancelled while waiting for the busy member: nothing held either.
    let _ = tokio::time::timeout(Duration::from_millis(200), multi.lock()).await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.existing(&free).is_empty()
        })
        .await
    );

    busy.release().await.unwrap();

    // One member deleted behind the holder's back: the guard's lost signal
    // fires at that member's next renewal, and release reports it while
    // still releasing the others.
    let fast = env.client(Duration::from_millis(600)).await;
    let guard = fast
        .multi_lock(names.clone())
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .expect("all free now");
    assert!(!guard.is_lost());
    let _: i64 = redis::cmd("DEL")
        .arg(&names[0])
        .query(&mut env.node_for(&names[0]))
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the lost signal fires");
    assert!(guard.is_lost());
    assert_eq!(
        guard.release().await.unwrap_err().kind(),
        ErrorKind::NotHeld
    );
    assert!(env.existing(&names).is_empty(), "the others were released");
}

async fn bad_input_is_refused(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    let none: [&str; 0] = [];
    assert_eq!(
        client.multi_lock(none).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let err = client.multi_lock(["a", "b", "a"]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.to_string().contains("twice"), "{err}");
    assert_eq!(
        client.multi_lock(["a", ""]).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}
