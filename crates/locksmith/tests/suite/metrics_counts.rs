//! The metrics a scripted workload leaves behind, read through a debugging
//! recorder installed as the global recorder (so the test runs in a
//! process of its own: see `common::in_own_process`). Its snapshots drain what they read, so totals
//! add the snapshots up.

use std::collections::HashMap;
use std::time::Duration;

use locksmith::Client;
use locksmith_testkit::RedisServer;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;

/// (name, sorted labels) -> value, counters and gauges as f64, histograms
/// as their sample count.
type Metrics = HashMap<(String, Vec<(String, String)>), f64>;

fn read(snapshotter: &Snapshotter) -> Metrics {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let (kind, key) = key.into_parts();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            let v = match (kind, value) {
                (MetricKind::Counter, DebugValue::Counter(n)) => n as f64,
                (MetricKind::Gauge, DebugValue::Gauge(g)) => g.into_inner(),
                (MetricKind::Histogram, DebugValue::Histogram(h)) => h.len() as f64,
                _ => f64::NAN,
            };
            ((key.name().to_owned(), labels), v)
        })
        .collect()
}

fn get(m: &Metrics, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut want: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    want.sort();
    m.get(&(name.to_owned(), want)).copied().unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_workload_leaves_the_expected_counts() {
    // The global recorder would see the other tests of this binary.
    if !crate::common::in_own_process(
        module_path!(),
        "a_scripted_workload_leaves_the_expected_counts",
    ) {
        return;
    }
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this process");

    let server = RedisServer::start().unwrap();
    let client = Client::open(&server.url()).await.unwrap();
    // 3 grants and releases of a lock.
    let lock = client.lock("m:lock").unwrap();
    for _ in 0..3 {
        lock.lock().await.unwrap().release().await.unwrap();
    }
    // A timeout: held by another owner.
    let held = client.lock("m:lock").unwrap().lock().await.unwrap();
    assert!(lock
        .try_lock_for(Duration::from_millis(50))
        .await
        .unwrap()
        .is_none());
    // A lost lease found at release: a fixed lease that ran out.
    let short = client
        .lock("m:short")
        .unwrap()
        .with_lease(Duration::from_millis(100))
        .unwrap()
        .lock()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(short.release().await.is_err());
    // Semaphore: 2 grants, released.
    let sem = client.semaphore("m:sem").unwrap();
    sem.try_set_permits(2).await.unwrap();
    let (a, b) = (sem.acquire(1).await.unwrap(), sem.acquire(1).await.unwrap());
    let during = read(&snapshotter);
    a.release().await.unwrap();
    b.release().await.unwrap();
    // A latch wait that opens.
    let latch = client.count_down_latch("m:latch").unwrap();
    latch.try_set_count(1).await.unwrap();
    latch.count_down().await.unwrap();
    assert!(latch.wait_for(Duration::from_secs(1)).await.unwrap());
    held.release().await.unwrap();

    // A snapshot drains what it reads: the totals are both snapshots.
    let mut m = read(&snapshotter);
    for (k, v) in &during {
        *m.entry(k.clone()).or_default() += v;
    }
    let granted = [("kind", "lock"), ("outcome", "granted")];
    // 3 + the other owner's + the fixed-lease lock's.
    let mut keys: Vec<_> = m
        .iter()
        .map(|((n, l), v)| format!("{n} {l:?} = {v}"))
        .collect();
    keys.sort();
    assert_eq!(
        get(&m, "locksmith_acquires_total", &granted),
        5.0,
        "{keys:#?}"
    );
    assert_eq!(
        get(
            &m,
            "locksmith_acquires_total",
            &[("kind", "lock"), ("outcome", "timeout")]
        ),
        1.0
    );
    assert_eq!(
        get(&m, "locksmith_acquire_wait_seconds", &[("kind", "lock")]),
        5.0
    );
    assert_eq!(
        get(
            &m,
            "locksmith_releases_total",
            &[("kind", "lock"), ("outcome", "ok")]
        ),
        4.0
    );
    assert_eq!(
        get(
            &m,
            "locksmith_releases_total",
            &[("kind", "lock"), ("outcome", "not_held")]
        ),
        1.0
    );
    assert_eq!(
        get(&m, "locksmith_leases_lost_total", &[("kind", "lock")]),
        1.0
    );
    assert_eq!(get(&m, "locksmith_hold_seconds", &[("kind", "lock")]), 5.0);
    assert_eq!(get(&m, "locksmith_holders", &[("kind", "lock")]), 0.0);
    assert_eq!(get(&m, "locksmith_waiters", &[("kind", "lock")]), 0.0);
    // While both permits were held, the gauge said 2.
    assert_eq!(
        get(&during, "locksmith_holders", &[("kind", "semaphore")]),
        2.0
    );
    assert_eq!(
        get(
            &m,
            "locksmith_acquires_total",
            &[("kind", "semaphore"), ("outcome", "granted")]
        ),
        2.0
    );
    assert_eq!(
        get(
            &m,
            "locksmith_releases_total",
            &[("kind", "semaphore"), ("outcome", "ok")]
        ),
        2.0
    );
    assert_eq!(
        get(
            &m,
            "locksmith_acquires_total",
            &[("kind", "latch"), ("outcome", "granted")]
        ),
        1.0
    );
    // Names are not labels by default.
    assert!(m
        .keys()
        .all(|(_, labels)| labels.iter().all(|(k, _)| k != "name")));

    // With names as labels each object's series carry its name, and the
    // outcomes of a cancelled acquire and a dropped guard are counted.
    let named = Client::builder(server.url())
        .metric_names(true)
        .build()
        .await
        .unwrap();
    let a = named.lock("m:named-a").unwrap();
    a.lock().await.unwrap().release().await.unwrap();
    let guard = a.lock().await.unwrap();
    let other = named.lock("m:named-a").unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(50), other.lock())
            .await
            .is_err(),
        "held by another owner"
    );
    guard.release().await.unwrap();
    drop(named.lock("m:named-b").unwrap().lock().await.unwrap());
    let m = read(&snapshotter);
    let of = |name: &'static str, outcome: &'static str| {
        [("kind", "lock"), ("name", name), ("outcome", outcome)]
    };
    assert_eq!(
        get(&m, "locksmith_acquires_total", &of("m:named-a", "granted")),
        2.0
    );
    assert_eq!(
        get(
            &m,
            "locksmith_acquires_total",
            &of("m:named-a", "cancelled")
        ),
        1.0
    );
    assert_eq!(
        get(&m, "locksmith_releases_total", &of("m:named-a", "ok")),
        2.0
    );
    assert_eq!(
        get(&m, "locksmith_releases_total", &of("m:named-b", "dropped")),
        1.0
    );
    assert_eq!(
        get(
            &m,
            "locksmith_holders",
            &[("kind", "lock"), ("name", "m:named-a")]
        ),
        0.0
    );
    named.close().await.unwrap();
}
