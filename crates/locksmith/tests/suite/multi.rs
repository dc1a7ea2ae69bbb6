//! MultiLock on every topology: opposite orders never deadlock, a busy
//! member leaves nothing held, cancellation leaves nothing held, bad input.

use std::time::Duration;

use locksmith::{ErrorKind, Member, MultiLock};

use crate::common::{eventually, Env};

crate::on_every_topology!(
    opposite_orders_never_deadlock,
    a_busy_member_leaves_nothing_held,
    bad_input_is_refused,
    one_slot_is_one_script_call,
    members_of_every_kind,
    each_member_keeps_its_own_lease_in_one_script_call,
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
    // 1.5 s leases: renewed often, and not lost to a stall under load.
    let fast = env.client(Duration::from_millis(1_500)).await;
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
    // One lock through two clients of one deployment under different
    // addresses (`localhost`, `127.0.0.1`): the same lock twice, which the
    // ordered path would wait on forever.
    let alias = env.url.replace("127.0.0.1", "localhost");
    assert_ne!(alias, env.url);
    let other = env.builder(Duration::from_secs(30)).build().await.unwrap();
    let aliased = env
        .builder_for(&alias)
        .lease(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    let name = env.name("aliased");
    let err = MultiLock::new([
        Member::from(client.lock(name.clone()).unwrap()),
        Member::from(aliased.lock(name.clone()).unwrap()),
    ])
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("twice"), "{err}");
    // Two clients of one address are still one lock twice; two names are
    // two locks.
    assert!(MultiLock::new([
        Member::from(client.lock(name.clone()).unwrap()),
        Member::from(other.lock(name.clone()).unwrap()),
    ])
    .is_err());
    assert!(MultiLock::new([
        Member::from(client.lock(name.clone()).unwrap()),
        Member::from(aliased.lock(env.name("another")).unwrap()),
    ])
    .is_ok());
}

async fn one_slot_is_one_script_call(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    // A shared hash tag: one slot on a cluster.
    let tag = env.name("transfer");
    let names: Vec<String> = (0..4).map(|i| format!("{{{tag}}}:account:{i}")).collect();
    let multi = client.multi_lock(names.clone()).unwrap();
    assert!(multi.is_atomic(), "one client, one slot");
    // Warm up (script load), then count the script calls one acquisition
    // costs on the node that owns the slot.
    multi
        .try_lock()
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    let before = env.evalsha_calls(&names[0]);
    let guard = multi.try_lock().await.unwrap().expect("free");
    let calls = env.evalsha_calls(&names[0]) - before;
    if env.topo == crate::common::Topo::Single {
        assert_eq!(calls, 1, "four locks, one script call");
    } else {
        assert!(calls >= 1);
    }
    assert_eq!(env.existing(&names).len(), 4, "all four held");
    let tokens = guard.fencing_tokens();
    assert_eq!(tokens.len(), 4);
    assert!(tokens.iter().all(|(_, t)| *t >= 2), "{tokens:?}");

    // Another owner: all or nothing, atomically. One member held
    // elsewhere makes the whole set busy and takes nothing.
    let other = client.multi_lock(names.clone()).unwrap();
    assert!(other.try_lock().await.unwrap().is_none());
    guard.release().await.unwrap();
    assert!(env.existing(&names).is_empty());
    let single = client.lock(names[2].clone()).unwrap().lock().await.unwrap();
    assert!(other
        .try_lock_for(Duration::from_millis(100))
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        env.existing(&names),
        vec![names[2].clone()],
        "nothing else taken"
    );
    // A waiter is woken by the busy member's release.
    let waiting = tokio::spawn(async move { other.try_lock_for(Duration::from_secs(20)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    single.release().await.unwrap();
    let got = waiting
        .await
        .unwrap()
        .unwrap()
        .expect("granted after the release");
    // Reentrant through the same handles: counts go to 2 and back.
    got.release().await.unwrap();
    assert!(env.existing(&names).is_empty());

    // Wrong-type key among the members: a clear error naming it, nothing
    // taken.
    let _: () = redis::cmd("SET")
        .arg(&names[3])
        .arg("x")
        .query(&mut env.node_for(&names[3]))
        .unwrap();
    let err = multi.try_lock().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongType, "{err}");
    assert!(err.to_string().contains(&names[3]), "{err}");
    assert_eq!(env.existing(&names), vec![names[3].clone()]);

    // Spread over slots (a cluster) the set is taken in canonical order.
    let spread: Vec<String> = ["a", "b", "c"].iter().map(|n| env.name(n)).collect();
    let multi = client.multi_lock(spread).unwrap();
    assert_eq!(
        multi.is_atomic(),
        env.topo != crate::common::Topo::Cluster,
        "one node unless the names spread over cluster slots"
    );
}

async fn members_of_every_kind(env: Env) {
    let a = env.client(Duration::from_secs(30)).await;
    let b = env.client(Duration::from_secs(30)).await;
    let names: Vec<String> = ["plain", "fair", "rw", "simple"]
        .iter()
        .map(|n| env.name(n))
        .collect();
    let members = || -> Vec<Member> {
        vec![
            Member::from(a.lock(names[0].clone()).unwrap()),
            Member::from(b.fair_lock(names[1].clone()).unwrap()),
            Member::Write(a.read_write_lock(names[2].clone()).unwrap()),
            Member::from(b.simple_lock(names[3].clone()).unwrap()),
        ]
    };
    let multi = MultiLock::new(members()).unwrap();
    assert!(!multi.is_atomic());
    let guard = multi.lock().await.unwrap();
    assert_eq!(guard.guards().len(), 4);
    // A reader of the read-write lock cannot get in while the set holds it.
    let reader = b.read_write_lock(names[2].clone()).unwrap();
    assert!(reader.try_read().await.unwrap().is_none());
    // A second set over the same locks waits, then gets all of them.
    let second = MultiLock::new(members()).unwrap();
    assert!(second.try_lock().await.unwrap().is_none());
    guard.release().await.unwrap();
    let again = second
        .try_lock_for(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("all free again");
    again.release().await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.existing(&names).is_empty()
        })
        .await
    );
    // The read side shares with other readers.
    let shared = MultiLock::new([Member::Read(a.read_write_lock(names[2].clone()).unwrap())])
        .unwrap()
        .lock()
        .await
        .unwrap();
    let other_reader = reader.try_read().await.unwrap().expect("readers share");
    other_reader.release().await.unwrap();
    shared.release().await.unwrap();
    // The same lock twice (name on one node) is refused.
    let err = MultiLock::new([
        Member::from(a.lock(names[0].clone()).unwrap()),
        Member::from(a.fair_lock(names[0].clone()).unwrap()),
    ])
    .unwrap_err();
    assert!(err.to_string().contains("twice"), "{err}");
}

/// The atomic path sets each member's own lease: a 300 ms member beside a
/// watchdog member leaves the watchdog member with its full lease on the
/// server (it once got the first member's 300 ms, and expired under a
/// guard that believed it renewed), and the watchdog keeps it.
async fn each_member_keeps_its_own_lease_in_one_script_call(env: Env) {
    let client = env.client(Duration::from_secs(3)).await;
    let tag = env.name("leases");
    let (short_name, long_name) = (
        format!("{{{tag}}}:a-short"),
        format!("{{{tag}}}:b-watchdog"),
    );
    let short = client
        .lock(short_name.clone())
        .unwrap()
        .with_lease(Duration::from_millis(300))
        .unwrap();
    let long = client.lock(long_name.clone()).unwrap();
    let multi = MultiLock::new([Member::from(short), Member::from(long.clone())]).unwrap();
    assert!(multi.is_atomic(), "one client, one slot");
    let guard = multi.try_lock().await.unwrap().expect("free");
    let pttl = |name: &str| -> i64 {
        redis::cmd("PTTL")
            .arg(name)
            .query(&mut env.node_for(name))
            .unwrap()
    };
    assert!(
        pttl(&long_name) > 1_000,
        "the watchdog member has its own lease: {} ms",
        pttl(&long_name)
    );
    assert!(pttl(&short_name) <= 300, "{}", pttl(&short_name));
    // Past the short lease and past what the short one would have left the
    // other with: the watchdog member is still held, on the server too.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        env.existing(std::slice::from_ref(&long_name)),
        vec![long_name.clone()]
    );
    assert!(env.existing(std::slice::from_ref(&short_name)).is_empty());
    assert_eq!(long.hold_count().await.unwrap(), 1);
    // Another owner cannot take the watchdog member.
    let other = client.lock(long_name.clone()).unwrap();
    assert!(other.try_lock().await.unwrap().is_none());
    drop(guard);
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.existing(std::slice::from_ref(&long_name)).is_empty()
        })
        .await
    );
}

/// A MultiLock over a non-reentrant lock the task already holds refuses,
/// as that lock's own acquire does, and takes none of its members (the
/// atomic path, all members on one node, and the path one after another).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multilock_over_a_held_non_reentrant_lock_refuses_reentry() {
    let (_server, client) = crate::common::setup(Duration::from_secs(30)).await;
    let single = client.non_reentrant_lock("nr-held").unwrap();
    let guard = single.lock().await.unwrap();
    let other = client.lock("nr-other").unwrap();
    let multi = locksmith::MultiLock::new([single.clone().into(), other.clone().into()]).unwrap();
    let err = multi.try_lock().await.unwrap_err();
    assert_eq!(err.kind(), locksmith::ErrorKind::Reentry, "{err}");
    assert!(!other.is_locked().await.unwrap(), "no member was taken");
    assert_eq!(single.hold_count().await.unwrap(), 1, "still one hold");
    guard.release().await.unwrap();
    let both = multi.try_lock().await.unwrap().expect("free now");
    both.release().await.unwrap();
}
