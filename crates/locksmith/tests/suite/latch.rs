//! The count-down latch on every topology: its operations, bad input,
//! every waiter in every client waking when it reaches zero, and sharing
//! one latch with a Redisson-style client.

use std::time::{Duration, Instant};

use locksmith::ErrorKind;
use redis::Script;

use crate::common::{eventually, Env, Topo};

crate::on_every_topology!(
    operations_follow_redisson_semantics,
    bad_input_is_refused_and_changes_nothing,
    every_waiter_in_every_client_wakes_at_zero,
    a_redisson_client_shares_the_latch,
);

async fn operations_follow_redisson_semantics(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    let name = env.name("boot");
    let latch = client.count_down_latch(name.clone()).unwrap();
    assert_eq!(latch.count().await.unwrap(), 0, "absent is open");
    assert!(latch.wait_for(Duration::ZERO).await.unwrap());
    assert_eq!(latch.count_down().await.unwrap(), 0, "open stays open");
    assert!(env.existing(std::slice::from_ref(&name)).is_empty());

    assert!(latch.try_set_count(2).await.unwrap());
    assert!(
        !latch.try_set_count(5).await.unwrap(),
        "only the first set wins"
    );
    assert_eq!(latch.count().await.unwrap(), 2);
    assert!(!latch.wait_for(Duration::from_millis(50)).await.unwrap());
    assert_eq!(latch.count_down().await.unwrap(), 1);
    assert_eq!(latch.count_down().await.unwrap(), 0);
    assert!(
        env.existing(std::slice::from_ref(&name)).is_empty(),
        "at zero the key is deleted, as in Redisson"
    );
    assert!(latch.wait_for(Duration::ZERO).await.unwrap());

    // It can be armed again, and deleting it opens it.
    assert!(latch.try_set_count(3).await.unwrap());
    assert!(latch.delete().await.unwrap());
    assert!(!latch.delete().await.unwrap());
    assert_eq!(latch.count().await.unwrap(), 0);
}

async fn bad_input_is_refused_and_changes_nothing(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    assert_eq!(
        client.count_down_latch("").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    if env.topo == Topo::Cluster {
        let err = client.count_down_latch("job{7}").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(err.to_string().contains("brace"), "{err}");
    }
    let name = env.name("bad");
    let latch = client.count_down_latch(name.clone()).unwrap();
    for n in [0, (1 << 53) + 1] {
        assert_eq!(
            latch.try_set_count(n).await.unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }
    assert!(env.existing(std::slice::from_ref(&name)).is_empty());

    let list = env.name("a-list");
    let _: () = redis::cmd("RPUSH")
        .arg(&list)
        .arg("x")
        .query(&mut env.node_for(&list))
        .unwrap();
    let wrong = client.count_down_latch(list.clone()).unwrap();
    for err in [
        wrong.count_down().await.unwrap_err(),
        wrong.try_set_count(1).await.unwrap_err(),
        wrong.count().await.unwrap_err(),
        wrong.wait_for(Duration::from_millis(10)).await.unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::WrongType, "{err}");
        assert!(err.to_string().contains(&list), "{err}");
    }
    let len: i64 = redis::cmd("LLEN")
        .arg(&list)
        .query(&mut env.node_for(&list))
        .unwrap();
    assert_eq!(len, 1, "nothing changed");
}

async fn every_waiter_in_every_client_wakes_at_zero(env: Env) {
    // Only the message can wake them within the test: the fallback
    // re-check is pushed out of reach.
    let mut clients = Vec::new();
    for _ in 0..2 {
        clients.push(
            env.builder(Duration::from_secs(30))
                .recheck_interval(Duration::from_secs(120))
                .build()
                .await
                .unwrap(),
        );
    }
    let name = env.name("gate");
    let latch = clients[0].count_down_latch(name.clone()).unwrap();
    latch.try_set_count(3).await.unwrap();
    let mut waiters = Vec::new();
    for i in 0..20 {
        let latch = clients[i % 2].count_down_latch(name.clone()).unwrap();
        waiters.push(tokio::spawn(async move {
            latch.wait_for(Duration::from_secs(60)).await.unwrap();
            Instant::now()
        }));
    }
    let subscribed = eventually(Duration::from_secs(10), || async {
        clients.iter().all(|c| c.subscription_count() == 1)
    })
    .await;
    assert!(subscribed);
    tokio::time::sleep(Duration::from_millis(200)).await;
    latch.count_down().await.unwrap();
    latch.count_down().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        waiters.iter().all(|w| !w.is_finished()),
        "nobody wakes before zero"
    );
    let opened = Instant::now();
    latch.count_down().await.unwrap();
    let mut latest = Duration::ZERO;
    for w in waiters {
        let woke = tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .expect("every waiter wakes")
            .unwrap();
        latest = latest.max(woke.saturating_duration_since(opened));
    }
    // Far below the 120 s fallback: woken by the message.
    assert!(
        latest < Duration::from_secs(20),
        "last woke after {latest:?}"
    );
    for c in &clients {
        assert!(
            eventually(Duration::from_secs(5), || async {
                c.subscription_count() == 0
            })
            .await
        );
    }
}

/// Redisson's `countDown()`.
const JAVA_COUNT_DOWN: &str = r#"
local v = redis.call('decr', KEYS[1]);
if v <= 0 then redis.call('del', KEYS[1]) end;
if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end;
"#;

async fn a_redisson_client_shares_the_latch(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    let name = env.name("shared-gate");
    let channel = format!("redisson_countdownlatch__channel__{{{name}}}");
    let sharded = env.redisson_sharded();
    let publish = if sharded { "spublish" } else { "publish" };
    let node = redis::Client::open(env.node_url_for(&name)).unwrap();
    let latch = client.count_down_latch(name.clone()).unwrap();

    // Java counts down the last one; our waiter wakes.
    latch.try_set_count(1).await.unwrap();
    let waiting = latch.clone();
    let waiter = tokio::spawn(async move { waiting.wait_for(Duration::from_secs(20)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let () = Script::new(JAVA_COUNT_DOWN)
        .key(&name)
        .key(&channel)
        .arg(0)
        .arg(publish)
        .invoke(&mut node.get_connection().unwrap())
        .unwrap();
    let opened = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(opened);

    // Java waits on the channel; our count-down publishes Redisson's `0`.
    latch.try_set_count(1).await.unwrap();
    // Counted down only once the Java side listens (on a loaded machine
    // its subscription can take longer than any fixed pause).
    let (listening, subscribed) = std::sync::mpsc::channel();
    let java_waiter = tokio::task::spawn_blocking(move || {
        let mut sub = node.get_connection().unwrap();
        let subscribe = if sharded { "SSUBSCRIBE" } else { "SUBSCRIBE" };
        redis::cmd(subscribe).arg(&channel).exec(&mut sub).unwrap();
        listening.send(()).unwrap();
        sub.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let redis::Value::Array(parts) = sub.recv_response().unwrap() else {
            panic!("not a message")
        };
        redis::from_redis_value::<i64>(parts[2].clone()).unwrap()
    });
    tokio::task::spawn_blocking(move || subscribed.recv().unwrap())
        .await
        .unwrap();
    assert_eq!(latch.count_down().await.unwrap(), 0);
    let message = tokio::time::timeout(Duration::from_secs(20), java_waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(message, 0, "Redisson's zero-count message");
}
