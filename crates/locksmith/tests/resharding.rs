//! Locks whose slot moves to another node while they are in use: the
//! migration's `ASK`, `TRYAGAIN` and `MOVED` answers are followed without
//! an error reaching a caller, and exclusion holds throughout (a counter
//! read and written back under each lock would lose increments to any
//! overlap).

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use locksmith::Client;
use locksmith_testkit::RedisCluster;
use redis::AsyncCommands;

/// Lock names, all in the slot of the hash tag `{moving}`.
const NAMES: usize = 8;
const TASKS: usize = 64;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_keep_excluding_while_their_slot_moves() {
    let cluster = Arc::new(
        tokio::task::spawn_blocking(|| RedisCluster::start().expect("a cluster"))
            .await
            .unwrap(),
    );
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
    let stop = Arc::new(AtomicBool::new(false));
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..NAMES).map(|_| AtomicU64::new(0)).collect());
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (client, mut raw, stop, done) =
            (client.clone(), raw.clone(), stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let n = t % NAMES;
            let lock = client
                .lock(format!("{{moving}}:lock:{n}"))
                .map_err(|e| e.to_string())?;
            let counter = format!("{{moving}}:count:{n}");
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
        let counter = format!("{{moving}}:count:{n}");
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
