//! `locksmith list`: one object of every kind is found with its kind and
//! holders, on a single server and on a cluster; an empty server lists
//! nothing.

use std::time::Duration;

use locksmith::Client;
use locksmith_testkit::{FaultProxy, RedisCluster, RedisServer};

/// `locksmith --redis URL list --json EXTRA...`, run to the end.
fn list_output(url: &str, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_locksmith"))
        .args(["--redis", url, "list", "--json"])
        .args(extra)
        .output()
        .unwrap()
}

/// What `list --json` found, asserting it exited 0.
fn list_json(url: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let out = list_output(url, extra);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn kind_of<'a>(objects: &'a [serde_json::Value], name: &str) -> &'a str {
    objects
        .iter()
        .find(|o| o["name"] == name)
        .and_then(|o| o["kind"].as_str())
        .unwrap_or_else(|| panic!("{name} not listed: {objects:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_is_listed_with_its_holders() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    assert!(
        list_json(&url, &[]).is_empty(),
        "nothing on an empty server"
    );
    let a = Client::open(&url).await.unwrap();
    let b = Client::open(&url).await.unwrap();
    let lock = a.lock("l:plain").unwrap().lock().await.unwrap();
    let fair = a.fair_lock("l:fair").unwrap().lock().await.unwrap();
    let fair_waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            b.fair_lock("l:fair")
                .unwrap()
                .try_lock_for(Duration::from_secs(20))
                .await
        })
    };
    let read = a.read_write_lock("l:rw").unwrap().read().await.unwrap();
    let permits = a.expirable_semaphore("l:permits").unwrap();
    permits.try_set_permits(2).await.unwrap();
    let permit = permits.acquire().await.unwrap();
    let semaphore = a.semaphore("l:sem").unwrap();
    semaphore.try_set_permits(1).await.unwrap();
    let taken = semaphore.acquire(1).await.unwrap();
    let sem_waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            b.semaphore("l:sem")
                .unwrap()
                .try_acquire_for(1, Duration::from_secs(20))
                .await
        })
    };
    let latch = a.count_down_latch("l:latch").unwrap();
    latch.try_set_count(2).await.unwrap();
    let latch_waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            b.count_down_latch("l:latch")
                .unwrap()
                .wait_for(Duration::from_secs(20))
                .await
        })
    };
    let simple = a.simple_lock("l:simple").unwrap().lock().await.unwrap();
    let counter = a.count_down_latch("l:counter").unwrap();
    counter.try_set_count(5).await.unwrap();
    // Application keys that only look alike are not listed.
    let mut conn = server.connection().unwrap();
    let _: () = redis::cmd("HSET")
        .arg("l:settings")
        .arg("mode")
        .arg("dark")
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("l:session")
        .arg("0123456789abcdef0123456789abcdef")
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("l:blob")
        .arg(vec![0xffu8; 100])
        .query(&mut conn)
        .unwrap();
    // Every waiter in place before the listing counts it: the fair one in
    // line, the semaphore's and the latch's listening on their channels
    // (without a listener a semaphore or a latch reads as a counter).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let queued: u64 = redis::cmd("LLEN")
            .arg("redisson_lock_queue:{l:fair}")
            .query(&mut conn)
            .unwrap();
        let (_, sem, _, latch): (String, u64, String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("redisson_sc:{l:sem}")
            .arg("redisson_countdownlatch__channel__{l:latch}")
            .query(&mut conn)
            .unwrap();
        if queued == 1 && sem >= 1 && latch >= 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the waiters never waited: {queued} queued, {sem} on the semaphore, {latch} on the latch"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let objects = tokio::task::spawn_blocking(move || list_json(&url, &["--pattern", "l:*"]))
        .await
        .unwrap();
    assert_eq!(kind_of(&objects, "l:plain"), "lock");
    assert_eq!(kind_of(&objects, "l:fair"), "fair-lock");
    assert_eq!(kind_of(&objects, "l:rw"), "read-write-lock");
    assert_eq!(kind_of(&objects, "l:permits"), "permit-semaphore");
    assert_eq!(kind_of(&objects, "l:sem"), "semaphore");
    assert_eq!(kind_of(&objects, "l:latch"), "latch");
    assert_eq!(kind_of(&objects, "l:simple"), "simple-lock");
    assert_eq!(kind_of(&objects, "l:counter"), "counter");
    assert_eq!(
        objects.len(),
        8,
        "internal keys are not listed: {objects:?}"
    );
    let plain = objects.iter().find(|o| o["name"] == "l:plain").unwrap();
    let holders = plain["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1);
    assert!(holders[0][0]
        .as_str()
        .unwrap()
        .starts_with(&a.id().hyphenated().to_string()));
    assert!(plain["remaining_lease_ms"].as_u64().unwrap() > 0);
    let fair_obj = objects.iter().find(|o| o["name"] == "l:fair").unwrap();
    assert_eq!(fair_obj["waiters"], 1, "{fair_obj}");

    fair.release().await.unwrap();
    fair_waiter
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    taken.release().await.unwrap();
    sem_waiter
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    latch.count_down().await.unwrap();
    latch.count_down().await.unwrap();
    assert!(latch_waiter.await.unwrap().unwrap());
    for g in [lock, read, simple] {
        g.release().await.unwrap();
    }
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_scanned_on_every_primary() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap()
        .unwrap();
    let url = format!("redis+cluster://{}", cluster.addrs().join(","));
    // No replica acknowledgement: this is about listing, and on a loaded
    // machine a replica's WAIT can time out (NotReplicated).
    let client = Client::builder(&url)
        .replica_acks(0, Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    // Names in different slots, so on different primaries.
    let names: Vec<String> = (0..6).map(|i| format!("c:lock:{i}")).collect();
    let mut guards = Vec::new();
    for n in &names {
        guards.push(client.lock(n.clone()).unwrap().lock().await.unwrap());
    }
    let nodes: std::collections::HashSet<usize> = names
        .iter()
        .map(|n| cluster.node_for_key(n).unwrap())
        .collect();
    assert!(nodes.len() > 1, "spread over primaries");
    // A count whose name has an unclosed `{`: its permit zset's name
    // hashes to another primary, which answers MOVED there. Not ours: a
    // counter, and the listing goes on.
    let counter = (0..1000)
        .map(|i| format!("c:n{{{i}"))
        .find(|n| {
            cluster.node_for_key(n).unwrap()
                != cluster.node_for_key(&format!("{n}:timeout")).unwrap()
        })
        .expect("a name whose companion lives elsewhere");
    let _: () = redis::cmd("SET")
        .arg(&counter)
        .arg(5)
        .query(
            &mut cluster.nodes()[cluster.node_for_key(&counter).unwrap()]
                .connection()
                .unwrap(),
        )
        .unwrap();
    let listed = tokio::task::spawn_blocking(move || list_json(&url, &["--pattern", "c:*"]))
        .await
        .unwrap();
    assert_eq!(kind_of(&listed, &counter), "counter");
    let mut found: Vec<&str> = listed
        .iter()
        .filter(|o| o["kind"] == "lock")
        .filter_map(|o| o["name"].as_str())
        .collect();
    found.sort_unstable();
    assert_eq!(found, names.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(listed.len(), names.len() + 1, "{listed:?}");
    for g in guards {
        g.release().await.unwrap();
    }
}

/// A reply lost while a key is read makes the listing fail loudly
/// (`EX_UNAVAILABLE`, stderr says it is incomplete) instead of leaving
/// the key out and exiting 0: a short listing must not pass as the whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_lost_while_reading_a_key_fails_the_listing() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let client = Client::open(&server.url()).await.unwrap();
    let guard = client.lock("r:lock").unwrap().lock().await.unwrap();
    // The connection breaks as the key's fields come back.
    proxy.cut_reply_after(b"HGETALL");
    let url = proxy.url();
    let out = tokio::task::spawn_blocking(move || list_output(&url, &[]))
        .await
        .unwrap();
    assert_eq!(proxy.cuts(), 1, "the read was cut: {out:?}");
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("could not scan") && stderr.contains("r:lock"),
        "{stderr}"
    );
    guard.release().await.unwrap();
}

/// A server's error reply while a key is read (here `NOPERM`: a user
/// who may not read the key's fields) fails the listing with its code
/// (77 for a refused right) rather than leaving the key out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_read_fails_the_listing_with_its_code() {
    let server = RedisServer::start().unwrap();
    let mut admin = server.connection().unwrap();
    // Redis 6.0 has no channel rules (every channel is allowed).
    let channels = if locksmith_testkit::server_id() == "redis6" {
        "~*"
    } else {
        "&*"
    };
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("lister")
        .arg(&["on", ">l1ster", "~*", channels, "+@all", "-hgetall"][..])
        .query(&mut admin)
        .unwrap();
    let client = Client::open(&server.url()).await.unwrap();
    let guard = client.lock("n:lock").unwrap().lock().await.unwrap();
    let url = format!("redis://lister:l1ster@{}", server.addr());
    let out = tokio::task::spawn_blocking(move || list_output(&url, &[]))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("n:lock") && stderr.contains("hgetall"),
        "{stderr}"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_in_the_url_is_the_one_listed() {
    let server = RedisServer::start().unwrap();
    let db3 = format!("{}/3", server.url());
    let client = Client::open(&db3).await.unwrap();
    let guard = client.lock("d:lock").unwrap().lock().await.unwrap();
    let (url0, url3) = (server.url(), db3.clone());
    let (in0, in3) =
        tokio::task::spawn_blocking(move || (list_json(&url0, &[]), list_json(&url3, &[])))
            .await
            .unwrap();
    assert!(in0.is_empty(), "{in0:?}");
    assert_eq!(kind_of(&in3, "d:lock"), "lock");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_deployment_is_listed_through_its_primary() {
    let group = tokio::task::spawn_blocking(locksmith_testkit::SentinelGroup::start)
        .await
        .unwrap()
        .unwrap();
    let url = format!(
        "redis+sentinel://{}/{}",
        group.sentinel_addrs().join(","),
        group.master_name()
    );
    let client = Client::open(&url).await.unwrap();
    let guard = client.lock("s:lock").unwrap().lock().await.unwrap();
    let listed = tokio::task::spawn_blocking(move || list_json(&url, &["--pattern", "s:*"]))
        .await
        .unwrap();
    assert_eq!(kind_of(&listed, "s:lock"), "lock");
    guard.release().await.unwrap();
}
