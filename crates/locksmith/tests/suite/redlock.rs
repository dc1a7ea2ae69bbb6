//! Redlock against real, independent servers: majority grants, nodes down,
//! a slow node, the exclusion invariant under contention, renewal loss
//! when a majority is partitioned away, cancellation, and bad input.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use locksmith::{Client, ErrorKind, RedlockNodes};
use locksmith_testkit::{FaultMode, FaultProxy, RedisNodes};
use redis::Commands;

use crate::common;

/// Per-node timeout for the tests: generous, the machine is shared (a
/// node's first round also loads the script, and CI has seen one take
/// over 250 ms beside the other test lanes). The tests that expect every
/// node, or a majority, to answer must not lose one to a slow scheduler.
const NODE_TIMEOUT: Duration = Duration::from_secs(1);

async fn redlock(urls: &[String]) -> RedlockNodes {
    RedlockNodes::connect(urls.iter().cloned())
        .await
        .expect("connect the nodes")
        .with_node_timeout(NODE_TIMEOUT)
        .unwrap()
}

/// Whether node `url` holds the lock hash `name`.
fn held_on(url: &str, name: &str) -> bool {
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    conn.exists(name).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_grants_and_release_frees_every_node() {
    let servers = RedisNodes::start(5).unwrap();
    let nodes = redlock(&servers.urls()).await;
    assert_eq!((nodes.len(), nodes.quorum()), (5, 3));
    let lock = nodes.lock("redlock:basic").unwrap();
    let guard = lock.try_lock().await.unwrap().expect("all nodes free");
    assert_eq!(guard.granted_nodes(), 5);
    assert!(guard.fencing_token() >= 1);
    assert!(guard.remaining_lease() > Duration::from_secs(25));
    for url in servers.urls() {
        assert!(held_on(&url, "redlock:basic"), "{url} holds the lock hash");
    }
    // A second contender (another set of connections) cannot have it.
    let other = redlock(&servers.urls()).await;
    assert!(other
        .lock("redlock:basic")
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .is_none());
    // ...and its failed round left nothing behind: the hash has one owner.
    let mut conn = redis::Client::open(servers.urls()[0].as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let owners: Vec<String> = redis::cmd("HKEYS")
        .arg("redlock:basic")
        .query(&mut conn)
        .unwrap();
    assert_eq!(owners.len(), 1, "{owners:?}");
    guard.release().await.unwrap();
    for url in servers.urls() {
        assert!(!held_on(&url, "redlock:basic"), "{url} freed");
    }
    let again = other
        .lock("redlock:basic")
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .expect("free again");
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_with_two_of_five_down_and_fails_fast_with_three() {
    let mut servers = RedisNodes::start(5).unwrap();
    let nodes = redlock(&servers.urls()).await;
    let lock = nodes.lock("redlock:down").unwrap();
    servers.node(0).kill();
    servers.node(3).kill();
    let guard = lock
        .try_lock_for(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("3 of 5 are a majority");
    assert_eq!(guard.granted_nodes(), 3);
    guard.release().await.unwrap();

    servers.node(4).kill();
    let started = Instant::now();
    let err = lock
        .try_lock_for(Duration::from_secs(10))
        .await
        .expect_err("2 of 5 cannot grant");
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    // At once: a node timeout for the replies and at most one more for
    // the undo of the round, far below the 10 s wait.
    assert!(
        started.elapsed() < NODE_TIMEOUT * 2 + Duration::from_secs(2),
        "fails at once, not after the wait: {:?}",
        started.elapsed()
    );
    let text = err.to_string();
    assert!(
        text.contains("2 of 5") && text.contains("needs 3"),
        "{text}"
    );

    // Connecting fresh with 3 of 5 down fails at once too.
    let err = RedlockNodes::connect(servers.urls()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_comes_back_is_used_again() {
    let mut servers = RedisNodes::start(3).unwrap();
    servers.node(2).kill();
    // Each round needs both live nodes: a per-node timeout with room, as a
    // node's first round also loads the script (a fresh-clone CI run saw
    // one take over 250 ms beside the other test lanes).
    let nodes = RedlockNodes::connect(servers.urls())
        .await
        .expect("connect the nodes")
        .with_node_timeout(Duration::from_secs(1))
        .unwrap();
    let lock = nodes.lock("redlock:back").unwrap();
    let guard = lock.try_lock().await.unwrap().expect("2 of 3");
    assert_eq!(guard.granted_nodes(), 2);
    guard.release().await.unwrap();
    servers.node(2).restart().unwrap();
    // Reconnected in the background after the pause.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let guard = lock.try_lock().await.unwrap().expect("free");
        let granted = guard.granted_nodes();
        guard.release().await.unwrap();
        if granted == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "node 2 never came back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_node_costs_at_most_the_node_timeout() {
    let servers = RedisNodes::start(5).unwrap();
    let proxy = FaultProxy::start(&servers.addrs()[4]).unwrap();
    let mut urls = servers.urls();
    urls[4] = proxy.url();
    // Command timeouts past the slow node's round trip: the late grant
    // arrives as a reply, not as a lost one.
    let builders = urls
        .iter()
        .map(|u| Client::builder(u.clone()).command_timeout(Duration::from_secs(10)));
    let nodes = RedlockNodes::connect_with(builders)
        .await
        .unwrap()
        .with_node_timeout(NODE_TIMEOUT)
        .unwrap();
    let lock = nodes.lock("redlock:slow").unwrap();
    // A first round while every node is fast: each has the script loaded
    // after it, so the slow node's late request is the grant itself (not a
    // NOSCRIPT answer that the abandoned request never follows up).
    let warm = lock.try_lock().await.unwrap().expect("all nodes free");
    assert_eq!(warm.granted_nodes(), 5);
    warm.release().await.unwrap();
    // Watches the slow node from before the round until the release is
    // done: its late grant must land there (a latency after the request)
    // and be gone once the release answered.
    let url = servers.urls()[4].clone();
    let (seen, stop) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    // Stops the watcher also when an assertion below fails first.
    struct Stop(Arc<AtomicBool>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let stopping = Stop(stop.clone());
    let watcher = std::thread::spawn({
        let (url, seen, stop) = (url.clone(), seen.clone(), stop.clone());
        move || {
            let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
            while !stop.load(Ordering::SeqCst) {
                if conn.exists("redlock:slow").unwrap() {
                    seen.store(true, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    });
    // Three times the node timeout each way: a round that waited for the
    // slow node could not pass the bound below.
    proxy.set_mode(FaultMode::Latency(NODE_TIMEOUT * 3));
    let started = Instant::now();
    let guard = lock.try_lock().await.unwrap().expect("4 fast nodes");
    let took = started.elapsed();
    assert_eq!(
        guard.granted_nodes(),
        4,
        "the slow node did not answer in time"
    );
    assert!(
        took < NODE_TIMEOUT + Duration::from_millis(1500),
        "bounded by the node timeout, not the latency: {took:?}"
    );
    // The release follows the acquire on each node's connection, so the
    // slow node's late grant is released too.
    tokio::time::timeout(Duration::from_secs(30), guard.release())
        .await
        .expect("the release ends once the slow node answered")
        .unwrap();
    drop(stopping);
    watcher.join().unwrap();
    assert!(
        seen.load(Ordering::SeqCst),
        "the slow node's late grant landed"
    );
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            !held_on(&url, "redlock:slow")
        })
        .await,
        "the slow node kept a grant after release"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_never_both_hold_a_majority() {
    const ROUNDS: usize = 10_000;
    const CONTENDERS: usize = 3;
    let servers = RedisNodes::start(5).unwrap();
    let mut sets = Vec::new();
    for _ in 0..CONTENDERS {
        // Each contender its own connections, as separate services would.
        sets.push(
            redlock(&servers.urls())
                .await
                .with_retry_delay(Duration::from_millis(2))
                .unwrap(),
        );
    }
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let grants = Arc::new(AtomicUsize::new(0));
    let rounds = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut tasks = Vec::new();
    for nodes in sets {
        let (inside, overlaps, grants, rounds) = (
            inside.clone(),
            overlaps.clone(),
            grants.clone(),
            rounds.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let lock = nodes.lock("redlock:invariant").unwrap();
            while rounds.fetch_add(1, Ordering::SeqCst) < ROUNDS && Instant::now() < deadline {
                // No quorum within the node timeout (a loaded machine can
                // stall every node's reply at once) grants nothing: a round
                // like a refused one, which the invariant allows.
                let got = match lock.try_lock().await {
                    Err(e) if e.kind() == ErrorKind::NoQuorum => None,
                    got => got.unwrap(),
                };
                if let Some(guard) = got {
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    grants.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let grants = grants.load(Ordering::SeqCst);
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    assert!(
        rounds.load(Ordering::SeqCst) >= ROUNDS,
        "all rounds ran in time"
    );
    assert!(
        grants > ROUNDS / 10,
        "contenders did get the lock: {grants}"
    );
    for url in servers.urls() {
        assert!(!held_on(&url, "redlock:invariant"), "{url} left held");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_the_hold_and_signals_loss_of_the_majority() {
    let servers = RedisNodes::start(5).unwrap();
    let proxies: Vec<FaultProxy> = servers
        .addrs()
        .iter()
        .map(|a| FaultProxy::start(a).unwrap())
        .collect();
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    // Each node's client renews its part every third of the lease, and a
    // renewal to a black-holed node gives up after the command timeout
    // (the node timeout here): a lease of three node timeouts leaves the
    // live nodes' renewals room on a loaded machine.
    let lease = NODE_TIMEOUT * 3;
    let builders = urls.iter().map(|u| {
        Client::builder(u.clone())
            .lease(lease)
            .command_timeout(NODE_TIMEOUT)
    });
    let nodes = RedlockNodes::connect_with(builders)
        .await
        .unwrap()
        .with_node_timeout(NODE_TIMEOUT)
        .unwrap();
    let lock = nodes.lock("redlock:renew").unwrap();
    let guard = lock.lock().await.unwrap();
    // Renewed by a majority: still held after several leases.
    tokio::time::sleep(lease * 3).await;
    assert!(!guard.is_lost(), "the watchdog kept the hold");
    assert!(held_on(&servers.urls()[0], "redlock:renew"));

    // Two nodes away: still a majority.
    proxies[0].set_mode(FaultMode::BlackHole);
    proxies[1].set_mode(FaultMode::BlackHole);
    tokio::time::sleep(lease * 2).await;
    assert!(!guard.is_lost(), "3 of 5 keep renewing it");

    // A third: no majority can renew; the holder must hear it before the
    // lease it last had confirmed runs out.
    // Every renewal sent before the cut ends by `cut + lease`; nothing
    // sent after it reaches a majority.
    let cut = Instant::now();
    proxies[2].set_mode(FaultMode::BlackHole);
    let lost = guard.lost();
    tokio::time::timeout(lease + Duration::from_secs(1), lost.wait())
        .await
        .expect("the loss was signalled within a lease");
    // Signalled by then at the latest; the slack is this task's wake-up
    // on a loaded machine, not the library's.
    let late = cut.elapsed().saturating_sub(lease);
    assert!(
        late <= Duration::from_millis(300),
        "signalled {late:?} after the last lease sent before the cut ran out"
    );
    assert!(guard.is_lost());
    for p in &proxies {
        p.set_mode(FaultMode::Pass);
    }
    let err = guard.release().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotHeld, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_answering_gone_is_lost_at_once() {
    let servers = RedisNodes::start(3).unwrap();
    // A long lease: its own end cannot be what fires the signal.
    let lease = Duration::from_secs(6);
    let builders = servers
        .urls()
        .into_iter()
        .map(|u| Client::builder(u).lease(lease));
    let nodes = RedlockNodes::connect_with(builders)
        .await
        .unwrap()
        .with_node_timeout(NODE_TIMEOUT)
        .unwrap();
    let guard = nodes.lock("redlock:gone").unwrap().lock().await.unwrap();
    for url in &servers.urls()[..2] {
        delete_on(url, "redlock:gone");
    }
    // The next renewal round (every lease/3) finds it gone on a majority.
    tokio::time::timeout(lease / 3 + Duration::from_secs(1), guard.lost().wait())
        .await
        .expect("the next renewal round finds it gone on a majority");
    assert_eq!(
        guard.release().await.unwrap_err().kind(),
        ErrorKind::NotHeld
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_is_not_renewed_and_ends_by_itself() {
    let servers = RedisNodes::start(3).unwrap();
    let nodes = redlock(&servers.urls()).await;
    let lock = nodes
        .lock("redlock:fixed")
        .unwrap()
        .with_lease(NODE_TIMEOUT * 3)
        .unwrap();
    let guard = lock.try_lock().await.unwrap().unwrap();
    assert!(guard.remaining_lease() <= NODE_TIMEOUT * 3);
    tokio::time::timeout(
        NODE_TIMEOUT * 3 + Duration::from_secs(2),
        guard.lost().wait(),
    )
    .await
    .unwrap();
    // Gone on every node within a third of the lease (the renewal period
    // a watchdog would have used), not kept alive.
    for url in servers.urls() {
        assert!(
            common::eventually(NODE_TIMEOUT, || async { !held_on(&url, "redlock:fixed") }).await,
            "expired on {url}"
        );
    }
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_the_lock_when_the_holder_releases() {
    let servers = RedisNodes::start(3).unwrap();
    let a = redlock(&servers.urls()).await;
    let b = redlock(&servers.urls())
        .await
        .with_retry_delay(Duration::from_secs(5))
        .unwrap();
    let held = a.lock("redlock:handoff").unwrap().lock().await.unwrap();
    let waiter = tokio::spawn(async move {
        let lock = b.lock("redlock:handoff").unwrap();
        let got = lock.try_lock_for(Duration::from_secs(20)).await.unwrap();
        (got.is_some(), Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let (got, at) = waiter.await.unwrap();
    assert!(got);
    // Woken by the release message, not by its 5 s back-off.
    assert!(
        at.duration_since(released) < Duration::from_secs(2),
        "{:?}",
        at.duration_since(released)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_acquire_leaves_nothing_held() {
    let servers = RedisNodes::start(3).unwrap();
    let proxies: Vec<FaultProxy> = servers
        .addrs()
        .iter()
        .map(|a| FaultProxy::start(a).unwrap())
        .collect();
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let nodes = redlock(&urls).await;
    for p in &proxies {
        p.set_mode(FaultMode::Latency(Duration::from_millis(100)));
    }
    let lock = nodes.lock("redlock:cancel").unwrap();
    for cut in [10u64, 60, 120, 180] {
        let _ = tokio::time::timeout(Duration::from_millis(cut), lock.lock()).await;
    }
    for p in &proxies {
        p.set_mode(FaultMode::Pass);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for url in servers.urls() {
        while held_on(&url, "redlock:cancel") {
            assert!(Instant::now() < deadline, "{url} kept a cancelled grant");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_nothing_taken() {
    let servers = RedisNodes::start(3).unwrap();
    let urls = servers.urls();
    for count in [1, 2] {
        let err = RedlockNodes::connect(urls[..count].iter().cloned())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        assert!(err.to_string().contains("at least 3"), "{err}");
    }
    let mut four = urls.clone();
    four.push("redis://127.0.0.1:1".into());
    let err = RedlockNodes::connect(four).await.unwrap_err();
    assert!(err.to_string().contains("odd"), "{err}");
    let twice = vec![urls[0].clone(), urls[1].clone(), urls[0].clone()];
    let err = RedlockNodes::connect(twice).await.unwrap_err();
    assert!(err.to_string().contains("twice"), "{err}");
    // Two spellings of one server: caught by its run_id.
    let alias = urls[0].replace("127.0.0.1", "localhost");
    let err = RedlockNodes::connect(vec![urls[0].clone(), alias, urls[1].clone()])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("same server"), "{err}");
    let err = RedlockNodes::connect(["redis://a:1", "not a url", "redis://b:2"])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");

    let nodes = redlock(&urls).await;
    assert!(nodes.lock("").unwrap_err().is_invalid_argument());
    let lock = nodes.lock("redlock:bad").unwrap();
    let err = lock.with_lease(Duration::from_millis(200)).unwrap_err();
    assert!(err.to_string().contains("drift"), "{err}");
    assert!(lock.with_lease(Duration::ZERO).is_err());
    assert!(nodes.with_node_timeout(Duration::ZERO).is_err());
    assert!(nodes.with_node_timeout(Duration::from_secs(60)).is_err());
    assert!(nodes.with_retry_delay(Duration::ZERO).is_err());

    // A wrong-type key on a majority: a clear error, nothing taken.
    for url in &urls[..2] {
        let mut conn = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let _: () = conn.set("redlock:bad", "a string").unwrap();
    }
    let err = lock.try_lock().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    assert!(err.to_string().contains("wrong type"), "{err}");
    assert!(!held_on(&urls[2], "redlock:bad"), "the third node undone");
}

/// One server under two names counts once, however the set is made:
/// through `RedlockNodes::new` over connected clients (which checked
/// nothing), and when the second name was down at connect and comes up
/// later (it was never checked). Either would let one server count twice
/// toward the majority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_under_two_names_never_counts_twice() {
    let mut servers = RedisNodes::start(3).unwrap();
    let urls = servers.urls();
    let alias = urls[0].replace("127.0.0.1", "localhost");

    // new() over clients: refused.
    let mut clients = Vec::new();
    for url in [&urls[0], &alias, &urls[1]] {
        clients.push(Client::open(url).await.unwrap());
    }
    let err = RedlockNodes::new(clients).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("same server"), "{err}");

    // A second name for server 0, unreachable at connect (a proxy that
    // resets), reachable later.
    let proxy = FaultProxy::start(&servers.addrs()[0]).unwrap();
    proxy.set_mode(FaultMode::Reset);
    let nodes = RedlockNodes::connect(vec![urls[0].clone(), proxy.url(), urls[1].clone()])
        .await
        .expect("two of three reachable")
        .with_node_timeout(NODE_TIMEOUT)
        .unwrap();
    proxy.set_mode(FaultMode::Pass);
    let lock = nodes.lock("redlock:alias").unwrap();
    // Rounds over the next seconds give the down node its reconnects.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        if let Some(guard) = lock.try_lock().await.unwrap() {
            assert!(guard.granted_nodes() <= 2, "the alias was counted");
            guard.release().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // With the only other server gone, server 0 alone (under two names)
    // is no majority.
    servers.node(1).kill();
    let err = lock.try_lock().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    assert!(!held_on(&urls[0], "redlock:alias"), "nothing left held");
}

/// Three servers, a client of the test's own on each (leases of `lease`),
/// and a Redlock set made of those clients: each node's watchdog is one
/// the test can look at.
async fn nodes_of_own_clients(lease: Duration) -> (RedisNodes, Vec<Client>, RedlockNodes) {
    let servers = RedisNodes::start(3).unwrap();
    let mut clients = Vec::new();
    for url in servers.urls() {
        clients.push(Client::builder(url).lease(lease).build().await.unwrap());
    }
    let nodes = RedlockNodes::new(clients.clone())
        .unwrap()
        .with_node_timeout(NODE_TIMEOUT)
        .unwrap();
    (servers, clients, nodes)
}

/// Deletes `key` on the server at `url`, behind the clients' backs.
fn delete_on(url: &str, key: &str) {
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: () = conn.del(key).unwrap();
}

/// Each granting node's part of a hold is kept by that node client's own
/// watchdog, the one its plain locks use (batched with their renewals),
/// not by a renewal task of the Redlock's; releasing takes it off every
/// watchdog. A node whose part is gone on the server is dropped from the
/// hold, which stays held while a majority of parts renew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_watchdog_keeps_its_part_of_the_hold() {
    let lease = NODE_TIMEOUT * 3;
    let (servers, clients, nodes) = nodes_of_own_clients(lease).await;
    // A plain lock beside it on the first node's client.
    let plain = clients[0]
        .lock("plain-beside")
        .unwrap()
        .lock()
        .await
        .unwrap();
    let guard = nodes.lock("redlock:parts").unwrap().lock().await.unwrap();
    let counts: Vec<usize> = clients.iter().map(Client::tracked_lease_count).collect();
    assert_eq!(counts, [2, 1, 1], "one part on each node's watchdog");
    // One node's part gone on the server: the other two keep the hold.
    delete_on(&servers.urls()[0], "redlock:parts");
    tokio::time::sleep(lease * 2).await;
    assert!(!guard.is_lost(), "two of three parts renewed: still held");
    assert!(
        guard.remaining_lease() > lease / 2,
        "renewed past its first lease"
    );
    assert!(!plain.is_lost());
    assert_eq!(clients[0].tracked_lease_count(), 1, "the gone part left");
    guard.release().await.unwrap();
    let counts: Vec<usize> = clients.iter().map(Client::tracked_lease_count).collect();
    assert_eq!(counts, [1, 0, 0], "released: off every watchdog");
    plain.release().await.unwrap();
}

/// A hold that lost its majority is no longer renewed anywhere: the part
/// a node still has runs out with its lease instead of being kept alive
/// (it would block every contender that needs that node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_that_lost_its_majority_is_renewed_nowhere() {
    let lease = NODE_TIMEOUT * 3;
    let (servers, clients, nodes) = nodes_of_own_clients(lease).await;
    let guard = nodes.lock("redlock:gone").unwrap().lock().await.unwrap();
    for url in &servers.urls()[1..] {
        delete_on(url, "redlock:gone");
    }
    tokio::time::timeout(lease * 2, guard.lost().wait())
        .await
        .expect("two parts gone of three: lost");
    // The first node's part goes with the whole: its watchdog drops it,
    // and the key there runs out with the lease it had.
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            clients[0].tracked_lease_count() == 0
        })
        .await,
        "the first node's watchdog still renews its part"
    );
    assert!(
        common::eventually(lease * 2, || async {
            !held_on(&servers.urls()[0], "redlock:gone")
        })
        .await,
        "the first node's part ran out"
    );
    let err = guard.release().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotHeld, "{err}");
}
