//! Locks whose slot moves to another node while they are in use: the
//! migration's `ASK`, `TRYAGAIN` and `MOVED` answers are followed without
//! an error reaching a caller, and exclusion holds throughout (a counter
//! read and written back under each lock would lose increments to any
//! overlap). Run twice: every lock in the moving slot, and half of the
//! locks in other slots of the same node, so the moving slot's requests
//! travel in calls that carry several slots (one call per node on Redis 7:
//! the call must run none of a slot it no longer serves whole).

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use locksmith::Client;
use locksmith_testkit::RedisCluster;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use redis::AsyncCommands;

/// Lock names in the moving slot's run.
const NAMES: usize = 8;
const TASKS: usize = 64;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_keep_excluding_while_their_slot_moves() {
    let cluster = start().await;
    // Every name in the slot of `{moving}`.
    let names = (0..NAMES).map(|n| format!("{{moving}}:{n}")).collect();
    run(cluster, names).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_carry_several_slots_leave_out_the_moving_one() {
    if common::lacks_7_0("a script that reaches several slots") {
        return;
    }
    snapshotter();
    let cluster = start().await;
    // Half of 32 names in the moving slot, half in four other slots served
    // by the same node, two tasks per name: calls carry several slots
    // together (one call is out per node, the rest queue).
    let home = cluster.node_for_key("{moving}").unwrap();
    let others: Vec<String> = (0..1000)
        .map(|i| format!("other{i}"))
        .filter(|tag| cluster.node_for_key(&format!("{{{tag}}}")).unwrap() == home)
        .take(4)
        .collect();
    assert_eq!(others.len(), 4, "slots on the moving slot's node");
    let names = (0..32)
        .map(|n| match n % 2 {
            0 => format!("{{moving}}:{n}"),
            _ => format!("{{{}}}:{n}", others[n % 4 / 2 + 2 * (n / 16)]),
        })
        .collect();
    // Every command the home node runs is logged, to find calls that
    // carried several slots (their probe keys are among their arguments).
    let mut node = cluster.nodes()[home]
        .connection()
        .expect("a connection to the home node");
    common::log_every_command(&mut node);
    run(cluster.clone(), names).await;
    let log = common::logged_commands(&mut node);
    let across = log
        .iter()
        .filter(|args| common::evalsha_keys(args) == Some(0))
        .count();
    let resent = resends();
    eprintln!(
        "{across} of {} logged commands carried several slots; {resent} requests found their slot moving and were sent again",
        log.len()
    );
    assert!(across > 0, "no call carried several slots");
    assert!(
        resent > 0,
        "no request of a call carrying several slots met the moving slot"
    );
}

/// The recorder of this test binary, installed by the first caller.
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this binary");
        snapshotter
    })
}

/// Requests sent again because their slot was not served whole where a
/// call carrying several slots went (`locksmith_cross_slot_resends_total`).
fn resends() -> u64 {
    snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "locksmith_cross_slot_resends_total")
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => n,
            _ => 0,
        })
        .sum()
}

async fn start() -> Arc<RedisCluster> {
    Arc::new(
        tokio::task::spawn_blocking(|| RedisCluster::start().expect("a cluster"))
            .await
            .unwrap(),
    )
}

/// 64 tasks lock and release `names` (a counter under each) while the
/// slot of `{moving}` moves away and back.
async fn run(cluster: Arc<RedisCluster>, names: Vec<String>) {
    let url = common::cluster_url(&cluster);
    let client = Client::builder(&url)
        .command_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect");
    let raw = redis::cluster::ClusterClient::new(cluster.initial_nodes())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    // Keys that only fill the slot, so that its migration (3 keys per
    // MIGRATE, 30 ms apart) lasts most of a second each way.
    for i in 0..60 {
        let mut raw = raw.clone();
        let _: () = raw.set(format!("{{moving}}:filler:{i}"), i).await.unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..names.len()).map(|_| AtomicU64::new(0)).collect());
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (client, mut raw, stop, done) =
            (client.clone(), raw.clone(), stop.clone(), done.clone());
        let n = t % names.len();
        let name = names[n].clone();
        tasks.push(tokio::spawn(async move {
            let lock = client
                .lock(format!("{name}:lock"))
                .map_err(|e| e.to_string())?;
            let counter = format!("{name}:count");
            let mut rounds = 0u64;
            // Bounded in count and time: the migration takes a few seconds.
            while !stop.load(Ordering::Relaxed) && rounds < 10_000 {
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
                done[n].fetch_add(1, Ordering::Relaxed);
                guard.release().await.map_err(|e| format!("release: {e}"))?;
                rounds += 1;
            }
            Ok::<u64, String>(rounds)
        }));
    }
    // Let the tasks get going, then move the slot away and back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let moving = cluster.clone();
    let moves = tokio::task::spawn_blocking(move || {
        let home = moving.node_for_key("{moving}")?;
        let away = *moving
            .primaries()?
            .iter()
            .find(|&&p| p != home)
            .expect("another primary");
        let there = moving.migrate_slot("{moving}", away, 3, Duration::from_millis(30))?;
        std::thread::sleep(Duration::from_millis(300));
        let back = moving.migrate_slot("{moving}", home, 3, Duration::from_millis(30))?;
        std::io::Result::Ok((there, back))
    })
    .await
    .unwrap()
    .expect("the slot moved");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for task in tasks {
        let rounds = tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("every task finishes")
            .unwrap()
            .expect("no lock call failed while the slot moved");
        total += rounds;
    }
    eprintln!(
        "{total} lock rounds; keys moved away {}, back {}",
        moves.0, moves.1
    );
    assert!(
        moves.0 > 0 && moves.1 > 0,
        "keys moved both ways: {moves:?}"
    );
    assert!(
        total > TASKS as u64,
        "the tasks kept locking: {total} rounds"
    );
    let mut raw = raw;
    let mut counts = HashMap::new();
    for (n, done) in done.iter().enumerate() {
        let counter = format!("{}:count", names[n]);
        let stored: u64 = raw.get(&counter).await.unwrap();
        counts.insert(n, (stored, done.load(Ordering::Relaxed)));
    }
    for (n, (stored, done)) in &counts {
        assert_eq!(
            stored, done,
            "lock {n}: {done} increments under the lock, the counter kept {stored}: holds overlapped"
        );
    }
    client.close().await.unwrap();
}
