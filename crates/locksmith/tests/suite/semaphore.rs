//! The counting semaphore on every topology: its operations, bad input,
//! exclusion under random cancellation, wake-ups sized to the released
//! permits, and sharing one semaphore with a Redisson-style client.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use locksmith::ErrorKind;
use redis::Script;

use crate::common::{eventually, Env, Topo};

crate::on_every_topology!(
    operations_follow_redisson_semantics,
    bad_input_is_refused_and_changes_nothing,
    holders_never_exceed_permits_under_random_cancellation,
    a_release_wakes_as_many_waiters_as_it_satisfies,
    a_redisson_client_shares_the_semaphore,
);

/// A random number below `n` (the test needs no seedable generator).
fn random_below(n: u64) -> u64 {
    (uuid::Uuid::new_v4().as_u128() % u128::from(n)) as u64
}

fn get(env: &Env, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut env.node_for(key))
        .unwrap()
}

async fn operations_follow_redisson_semantics(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    let name = env.name("pool");
    let pool = client.semaphore(name.clone()).unwrap();
    assert_eq!(pool.available().await.unwrap(), 0, "absent counts as 0");
    assert!(pool.try_acquire(1).await.unwrap().is_none());
    assert!(pool.try_set_permits(3).await.unwrap());
    assert!(
        !pool.try_set_permits(10).await.unwrap(),
        "only the first set wins"
    );
    assert_eq!(get(&env, &name).as_deref(), Some("3"), "Redisson's layout");

    let two = pool.try_acquire(2).await.unwrap().expect("2 of 3");
    assert_eq!(two.permits(), 2);
    assert!(pool.try_acquire(2).await.unwrap().is_none(), "only 1 left");
    assert_eq!(pool.available().await.unwrap(), 1);
    two.release().await.unwrap();
    assert_eq!(pool.available().await.unwrap(), 3);

    // A dropped guard gives its permits back in the background.
    drop(pool.acquire(3).await.unwrap());
    let back = pool.clone();
    assert!(
        eventually(Duration::from_secs(5), || async {
            back.available().await.unwrap() == 3
        })
        .await
    );

    // forget() keeps them taken; release(n) gives them back by hand.
    let kept = pool.acquire(2).await.unwrap().forget();
    assert_eq!(kept, 2);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(pool.available().await.unwrap(), 1);
    pool.release(2).await.unwrap();

    assert_eq!(pool.add_permits(-5).await.unwrap(), -2, "may go negative");
    assert!(pool.try_acquire(1).await.unwrap().is_none());
    assert_eq!(pool.add_permits(4).await.unwrap(), 2);
    assert_eq!(pool.drain().await.unwrap(), 2);
    assert_eq!(pool.available().await.unwrap(), 0);
    assert_eq!(pool.drain().await.unwrap(), 0);
}

async fn bad_input_is_refused_and_changes_nothing(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    assert_eq!(
        client.semaphore("").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let name = env.name("bad");
    let pool = client.semaphore(name.clone()).unwrap();
    pool.try_set_permits(2).await.unwrap();
    for n in [0, (1 << 53) + 1] {
        assert_eq!(
            pool.try_acquire(n).await.unwrap_err().kind(),
            ErrorKind::InvalidArgument,
            "{n} permits"
        );
        assert_eq!(
            pool.release(n).await.unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }
    assert_eq!(
        pool.add_permits(0).await.unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        pool.try_set_permits((1 << 53) + 1)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(get(&env, &name).as_deref(), Some("2"), "nothing changed");

    // A key of another kind under the name: a clear error naming the key.
    let hash = env.name("a-hash");
    let _: () = redis::cmd("HSET")
        .arg(&hash)
        .arg("f")
        .arg("v")
        .query(&mut env.node_for(&hash))
        .unwrap();
    let wrong = client.semaphore(hash.clone()).unwrap();
    for err in [
        wrong.try_acquire(1).await.unwrap_err(),
        wrong.release(1).await.unwrap_err(),
        wrong.available().await.unwrap_err(),
        wrong.drain().await.unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::WrongType, "{err}");
        assert!(err.to_string().contains(&hash), "{err}");
    }
    // A string that is not a count is refused the same way.
    let text = env.name("text");
    let _: () = redis::cmd("SET")
        .arg(&text)
        .arg("hello")
        .query(&mut env.node_for(&text))
        .unwrap();
    let wrong = client.semaphore(text.clone()).unwrap();
    assert_eq!(
        wrong.add_permits(1).await.unwrap_err().kind(),
        ErrorKind::WrongType
    );
    assert_eq!(
        wrong.try_acquire(1).await.unwrap_err().kind(),
        ErrorKind::WrongType
    );
    assert_eq!(get(&env, &text).as_deref(), Some("hello"));
}

async fn holders_never_exceed_permits_under_random_cancellation(env: Env) {
    const PERMITS: usize = 4;
    const TASKS: usize = 16;
    const ROUNDS: usize = 125;
    let clients = [
        env.client(Duration::from_secs(30)).await,
        env.client(Duration::from_secs(30)).await,
    ];
    let name = env.name("cancel");
    clients[0]
        .semaphore(name.clone())
        .unwrap()
        .try_set_permits(PERMITS as u64)
        .await
        .unwrap();
    let holders = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let grants = Arc::new(AtomicUsize::new(0));
    let cancelled = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let pool = clients[t % 2].semaphore(name.clone()).unwrap();
        let (holders, most, grants) = (holders.clone(), most.clone(), grants.clone());
        let cancelled = cancelled.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                // Cancel at a random point: before sending, in flight,
                // while queued, or not at all.
                let patience = Duration::from_micros(random_below(4_000));
                let Ok(acquired) = tokio::time::timeout(patience, pool.acquire(1)).await else {
                    cancelled.fetch_add(1, Ordering::SeqCst);
                    continue;
                };
                let permits = acquired.unwrap();
                let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                grants.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_micros(random_below(500))).await;
                holders.fetch_sub(1, Ordering::SeqCst);
                permits.release().await.unwrap();
            }
        }));
    }
    let all = async {
        for task in tasks {
            task.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(90), all)
        .await
        .expect("bounded run");
    assert!(
        most.load(Ordering::SeqCst) <= PERMITS,
        "never more holders than permits"
    );
    assert!(grants.load(Ordering::SeqCst) > 0, "some acquires succeeded");
    assert!(
        cancelled.load(Ordering::SeqCst) > 0,
        "some acquires were cancelled"
    );
    // Every permit taken by a cancelled acquire comes back.
    let pool = clients[0].semaphore(name).unwrap();
    let settled = eventually(Duration::from_secs(10), || async {
        pool.available().await.unwrap() == PERMITS as i64
    })
    .await;
    assert!(
        settled,
        "no permit lost: {} available",
        pool.available().await.unwrap()
    );
}

async fn a_release_wakes_as_many_waiters_as_it_satisfies(env: Env) {
    // No fallback re-check during the test: only messages wake waiters.
    let client = env
        .builder(Duration::from_secs(30))
        .recheck_interval(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let name = env.name("wake");
    let pool = client.semaphore(name.clone()).unwrap();
    pool.try_set_permits(0).await.unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let mut waiters = Vec::new();
    for _ in 0..6 {
        let pool = pool.clone();
        let done = done.clone();
        waiters.push(tokio::spawn(async move {
            let permits = pool.acquire(1).await.unwrap();
            done.fetch_add(1, Ordering::SeqCst);
            permits.forget();
        }));
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            client.subscription_count() == 1
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(done.load(Ordering::SeqCst), 0);
    let calls_before = env.evalsha_calls(&name);
    pool.release(2).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            done.load(Ordering::SeqCst) == 2
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        done.load(Ordering::SeqCst),
        2,
        "the other four keep waiting"
    );
    if env.topo == Topo::Single {
        // The release script, plus the two woken waiters' acquires (one
        // call or two): the four others were not woken to fail a retry.
        let calls = env.evalsha_calls(&name) - calls_before;
        assert!(calls <= 3, "{calls} script calls");
    }
    pool.release(4).await.unwrap();
    let all = async {
        for w in waiters {
            w.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(10), all)
        .await
        .expect("every waiter wakes");
    assert_eq!(pool.available().await.unwrap(), 0);
}

/// Redisson's `tryAcquire(permits)`: 1 taken, 0 not.
const JAVA_TRY_ACQUIRE: &str = r#"
local value = redis.call('get', KEYS[1]);
if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then
    local val = redis.call('decrby', KEYS[1], ARGV[1]);
    return 1;
end;
return 0;
"#;

/// Redisson's `release(permits)`: INCRBY and announce the new count.
const JAVA_RELEASE: &str = r#"
local value = redis.call('incrby', KEYS[1], ARGV[1]);
redis.call(ARGV[2], KEYS[2], value);
"#;

async fn a_redisson_client_shares_the_semaphore(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    let name = env.name("shared-pool");
    let channel = format!("redisson_sc:{{{name}}}");
    let sharded = env.redisson_sharded();
    let publish = if sharded { "spublish" } else { "publish" };
    let node = redis::Client::open(env.node_url_for(&name)).unwrap();
    let pool = client.semaphore(name.clone()).unwrap();
    pool.try_set_permits(1).await.unwrap();

    // Java takes the only permit; our waiter wakes on Java's release.
    let java_acquire = |n: u64| -> i64 {
        Script::new(JAVA_TRY_ACQUIRE)
            .key(&name)
            .arg(n)
            .invoke(&mut node.get_connection().unwrap())
            .unwrap()
    };
    assert_eq!(java_acquire(1), 1);
    assert!(pool.try_acquire(1).await.unwrap().is_none());
    let waiting = pool.clone();
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let permits = waiting
            .try_acquire_for(1, Duration::from_secs(20))
            .await
            .unwrap();
        (permits, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let () = Script::new(JAVA_RELEASE)
        .key(&name)
        .key(&channel)
        .arg(1)
        .arg(publish)
        .invoke(&mut node.get_connection().unwrap())
        .unwrap();
    let (permits, waited) = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .unwrap()
        .unwrap();
    let permits = permits.expect("woken by the Java release");
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");

    // Java waits (subscribed to the channel, as RSemaphore does); our
    // release announces the new count, which it acts on.
    assert_eq!(java_acquire(1), 0);
    let java_name = name.clone();
    // Released only once the Java side listens (on a loaded machine its
    // subscription can take longer than any fixed pause).
    let (listening, subscribed) = std::sync::mpsc::channel();
    let java_waiter = tokio::task::spawn_blocking(move || {
        let mut sub = node.get_connection().unwrap();
        let subscribe = if sharded { "SSUBSCRIBE" } else { "SUBSCRIBE" };
        redis::cmd(subscribe).arg(&channel).exec(&mut sub).unwrap();
        listening.send(()).unwrap();
        sub.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let message = sub.recv_response().unwrap();
        let redis::Value::Array(parts) = message else {
            panic!("not a message: {message:?}")
        };
        let count: i64 = redis::from_redis_value(parts[2].clone()).unwrap();
        let got: i64 = Script::new(JAVA_TRY_ACQUIRE)
            .key(&java_name)
            .arg(1)
            .invoke(&mut node.get_connection().unwrap())
            .unwrap();
        (count, got)
    });
    tokio::task::spawn_blocking(move || subscribed.recv().unwrap())
        .await
        .unwrap();
    permits.release().await.unwrap();
    let (count, got) = tokio::time::timeout(Duration::from_secs(20), java_waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(count, 1, "the message is the new number of permits");
    assert_eq!(got, 1, "the Java waiter takes the permit");
    assert_eq!(pool.available().await.unwrap(), 0);
}
