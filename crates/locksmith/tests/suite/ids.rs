//! The id generator against a real server: uniqueness and order under
//! load in both modes, day rollover and clock steps with an injected
//! clock, sequence exhaustion and bad input.

use crate::common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use locksmith::{ErrorKind, IdGenerator};

use common::setup;

/// `per_task` ids from each of 16 tasks in 2 clients: all unique, and
/// increasing within every task.
async fn unique_and_increasing(block: u32, per_task: usize) {
    let (server, first) = setup(Duration::from_secs(30)).await;
    let second = common::client(&server, Duration::from_secs(30)).await;
    let mut tasks = Vec::new();
    for t in 0..16 {
        let client = if t % 2 == 0 { &first } else { &second };
        let ids = client
            .id_generator("orders")
            .unwrap()
            .with_block(block)
            .unwrap();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::with_capacity(per_task);
            for _ in 0..per_task {
                let id = ids.next_id().await.unwrap();
                if let Some(&last) = out.last() {
                    assert!(id > last, "increasing within a task");
                }
                out.push(id);
            }
            out
        }));
    }
    let mut seen = HashSet::with_capacity(16 * per_task);
    for t in tasks {
        for id in tokio::time::timeout(Duration::from_secs(300), t)
            .await
            .expect("bounded")
            .unwrap()
        {
            assert!(id > 0);
            assert!(seen.insert(id), "duplicate id {id}");
        }
    }
    assert_eq!(seen.len(), 16 * per_task);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_block_ids_are_unique() {
    unique_and_increasing(1000, 62_500).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_single_ids_are_unique() {
    unique_and_increasing(1, 62_500).await;
}

#[tokio::test]
async fn ids_roll_over_at_midnight_and_survive_a_clock_step_back() {
    let (_server, client) = setup(Duration::from_secs(30)).await;
    // 2030-05-01T23:59:58Z
    let day_end = 1_903_996_798_i64;
    let now = Arc::new(AtomicI64::new(day_end));
    for block in [1, 100] {
        now.store(day_end, Ordering::SeqCst);
        let clock = now.clone();
        let ids = client
            .id_generator(format!("roll{block}"))
            .unwrap()
            .with_block(block)
            .unwrap()
            .with_clock(move || clock.load(Ordering::SeqCst));
        let a = ids.next_id().await.unwrap();
        let b = ids.next_id().await.unwrap();
        assert!(b > a);
        now.store(day_end + 3, Ordering::SeqCst); // next day, 00:00:01
        let c = ids.next_id().await.unwrap();
        assert!(c > b, "a new day's ids are larger");
        let (secs, seq) = IdGenerator::split(c);
        assert_eq!(secs, day_end + 3 - IdGenerator::DEFAULT_EPOCH);
        assert_eq!(seq, 1, "the sequence restarts");
        // The clock steps back ten seconds: ids keep increasing.
        now.store(day_end - 7, Ordering::SeqCst);
        let d = ids.next_id().await.unwrap();
        assert!(d > c, "held at the latest second");
        assert_eq!(IdGenerator::split(d).0, secs);
    }
}

#[tokio::test]
async fn an_exhausted_day_is_a_clear_error() {
    let (server, client) = setup(Duration::from_secs(30)).await;
    let now = 1_903_996_000_i64;
    let ids = client.id_generator("full").unwrap().with_clock(move || now);
    let day = now / 86_400;
    let mut conn = server.connection().unwrap();
    let _: () = redis::cmd("SET")
        .arg(format!("full:{day}"))
        .arg((1_i64 << 32) - 1)
        .query(&mut conn)
        .unwrap();
    let err = ids.next_id().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Internal);
    assert!(err.to_string().contains("exhausted"), "{err}");
}

#[tokio::test]
async fn bad_input_is_refused() {
    let (server, client) = setup(Duration::from_secs(30)).await;
    assert_eq!(
        client.id_generator("").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let ids = client.id_generator("x").unwrap();
    assert_eq!(
        ids.with_block(0).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let future = std::time::SystemTime::now() + Duration::from_secs(3600);
    let err = ids.with_epoch(future).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.to_string().contains("future"), "{err}");
    assert_eq!(
        ids.with_epoch(UNIX_EPOCH - Duration::from_secs(1))
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument,
        "before 1970"
    );
    // An epoch so far back that today's seconds overflow 31 bits.
    let long_ago = ids.with_clock(|| (1_i64 << 31) + 10);
    assert_eq!(
        long_ago.with_epoch(UNIX_EPOCH).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    // A key of another kind where the day's counter goes.
    let day = std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 86_400;
    let mut conn = server.connection().unwrap();
    let _: () = redis::cmd("HSET")
        .arg(format!("x:{day}"))
        .arg("f")
        .arg("v")
        .query(&mut conn)
        .unwrap();
    let err = ids.next_id().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongType, "{err}");
}
