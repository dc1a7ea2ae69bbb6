//! A cluster where the cross-slot variant of the batch scripts cannot be
//! loaded (Redis 6 does not know its `allow-cross-slot-keys` flag; here a
//! user who may not run `SCRIPT LOAD` stands in for it): requests of
//! several slots bound for one node go as one call per slot, pipelined to
//! the node in one round trip (`engine::batch`, `Lua::run_pipelined`).
//! Under 64 tasks locking names of many slots, no caller sees an error,
//! no call declares no keys (the cross-slot variant never ran), and
//! exclusion holds: a counter read and written back under each lock would
//! lose increments to any overlap.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use locksmith::Client;
use locksmith_testkit::RedisCluster;
use redis::AsyncCommands;

const NAMES: usize = 16;
const TASKS: usize = 64;
/// Lock rounds per task, bounded in time as well (see `run`).
const ROUNDS: u64 = 150;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_cross_slot_script_several_slots_go_as_one_call_each() {
    let cluster = Arc::new(
        tokio::task::spawn_blocking(|| RedisCluster::start_without_replicas().expect("a cluster"))
            .await
            .unwrap(),
    );
    let names: Vec<String> = (0..NAMES).map(|n| format!("{{per-slot-{n}}}")).collect();
    let primaries: std::collections::HashSet<usize> = names
        .iter()
        .map(|n| cluster.node_for_key(n).expect("the node of a name"))
        .collect();
    assert!(
        primaries.len() > 1,
        "the names are spread over several primaries"
    );

    // Warm-up as the default user, who may load scripts: every script the
    // workload needs is on every node, so the restricted user below only
    // misses the cross-slot variant (which the client always tries to
    // load itself before its first call carrying several slots).
    let url = common::cluster_url(&cluster);
    let admin = Client::builder(&url).build().await.expect("connect");
    run(&cluster, &admin, &names, 20).await;
    admin.close().await.unwrap();

    // The user the workload runs as: everything but `SCRIPT LOAD`.
    for node in cluster.nodes() {
        let mut conn = node.connection().expect("a connection to a node");
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg("app")
            .arg("on")
            .arg(">app-pass")
            .arg("~*")
            .arg(common::all_channels())
            .arg("+@all")
            // Before 7.0 no script reaches several slots (and ACL rules
            // name no subcommand): the user may load scripts there.
            .arg(if common::has_7_0() {
                "-script|load"
            } else {
                "+@all"
            })
            .query(&mut conn)
            .unwrap();
        // Every command from here on is logged, to tell a call of the
        // cross-slot variant (it declares no keys) from one per slot.
        common::log_every_command(&mut conn);
    }
    let restricted = format!("redis+cluster://app:app-pass@{}", cluster.addrs().join(","));
    let client = Client::builder(&restricted)
        .build()
        .await
        .expect("connect as the restricted user");
    let total = run(&cluster, &client, &names, ROUNDS).await;
    client.close().await.unwrap();

    let (mut keyed, mut keyless) = (0, 0);
    for node in cluster.nodes() {
        let mut conn = node.connection().unwrap();
        for args in common::logged_commands(&mut conn) {
            match common::evalsha_keys(&args) {
                Some(0) => keyless += 1,
                Some(_) => keyed += 1,
                None => {}
            }
        }
    }
    eprintln!("{total} lock rounds; {keyed} script calls declared their keys, {keyless} none");
    assert_eq!(keyless, 0, "a call of the cross-slot variant ran");
    assert!(keyed > 0, "the script calls were logged");
}

/// `TASKS` tasks lock and release `names` (a counter under each), up to
/// `rounds` rounds each and 20 seconds; answers the rounds done. Fails if
/// any call fails or the counters lost an increment.
async fn run(cluster: &RedisCluster, client: &Client, names: &[String], rounds: u64) -> u64 {
    let raw = redis::cluster::ClusterClient::new(cluster.initial_nodes())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (client, mut raw) = (client.clone(), raw.clone());
        let name = names[t % names.len()].clone();
        tasks.push(tokio::spawn(async move {
            let lock = client
                .lock(format!("{name}:lock"))
                .map_err(|e| e.to_string())?;
            let counter = format!("{name}:count");
            let mut done = 0u64;
            while done < rounds && started.elapsed() < Duration::from_secs(20) {
                let guard = lock.lock().await.map_err(|e| format!("lock: {e}"))?;
                let seen: Option<u64> = raw
                    .get(&counter)
                    .await
                    .map_err(|e| format!("reading the counter: {e}"))?;
                tokio::task::yield_now().await;
                let _: () = raw
                    .set(&counter, seen.unwrap_or(0) + 1)
                    .await
                    .map_err(|e| format!("writing the counter: {e}"))?;
                guard.release().await.map_err(|e| format!("release: {e}"))?;
                done += 1;
            }
            Ok::<u64, String>(done)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("every task finishes")
            .unwrap()
            .expect("no lock call failed");
    }
    assert!(total > 0, "the tasks locked");
    // Each name's counter holds exactly the rounds run under its lock
    // (this run's and earlier ones'): it is deleted after it is checked.
    let mut raw = raw;
    let mut counted = 0;
    for name in names {
        let counter = format!("{name}:count");
        let stored: Option<u64> = raw.get(&counter).await.unwrap();
        counted += stored.unwrap_or(0);
        let _: () = raw.del(&counter).await.unwrap();
    }
    assert_eq!(
        counted, total,
        "{total} increments under the locks, the counters kept {counted}: holds overlapped"
    );
    total
}
