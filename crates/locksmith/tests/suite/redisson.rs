//! A Java service running Redisson's RLock and a locksmith service share one
//! lock, on every topology. The Java side is played by Redisson's acquire
//! and release logic, written here in Lua from the protocol facts (hash
//! NAME, field `<uuid>:<thread-id>`, PEXPIRE lease, busy answers PTTL, final
//! release deletes and publishes 0 on `redisson_lock__channel:{NAME}`, with
//! the publish command passed in as Redisson does: `spublish` on a cluster,
//! where Redisson also waits with `SSUBSCRIBE`; `publish` elsewhere).

use std::time::{Duration, Instant};

use redis::Script;

use locksmith::NotifyMode;

use crate::common::{setup, Env, Topo};

/// Acquire as RLock does it: nil when acquired, else the PTTL.
const JAVA_ACQUIRE: &str = r#"
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1);
    redis.call('pexpire', KEYS[1], ARGV[1]);
    return nil;
end;
return redis.call('pttl', KEYS[1]);
"#;

/// Release as RLock does it: nil for a non-owner, 0 still held, 1 freed.
const JAVA_RELEASE: &str = r#"
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then
    return nil;
end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then
    redis.call('pexpire', KEYS[1], ARGV[2]);
    return 0;
else
    redis.call('del', KEYS[1]);
    redis.call(ARGV[4], KEYS[2], ARGV[1]);
    return 1;
end;
"#;

/// The Java client: its UUID and a thread id make the owner field. It
/// talks straight to the node that owns the lock's slot, as Redisson does.
struct JavaClient {
    /// The owning node.
    node: redis::Client,
    /// The lock name and its channel.
    name: String,
    channel: String,
    /// Redisson's publish and subscribe commands on this topology.
    sharded: bool,
    owner: String,
}

impl JavaClient {
    fn new(env: &Env, name: &str) -> Self {
        JavaClient {
            node: redis::Client::open(env.node_url_for(name)).unwrap(),
            name: name.to_owned(),
            channel: format!("redisson_lock__channel:{{{name}}}"),
            sharded: env.redisson_sharded(),
            owner: "6f1c2d3e-4b5a-4c6d-8e9f-0a1b2c3d4e5f:57".into(),
        }
    }

    /// One try: None when acquired, Some(pttl) when busy.
    fn try_acquire(&self) -> Option<i64> {
        Script::new(JAVA_ACQUIRE)
            .key(&self.name)
            .arg(30_000)
            .arg(&self.owner)
            .invoke(&mut self.node.get_connection().unwrap())
            .unwrap()
    }

    /// RLock.lock(): subscribe, try, wait for the unlock message, retry.
    fn lock(&self, limit: Duration) -> bool {
        let mut sub = self.node.get_connection().unwrap();
        let subscribe = if self.sharded {
            "SSUBSCRIBE"
        } else {
            "SUBSCRIBE"
        };
        redis::cmd(subscribe)
            .arg(&self.channel)
            .exec(&mut sub)
            .unwrap();
        let deadline = Instant::now() + limit;
        loop {
            let Some(ttl) = self.try_acquire() else {
                return true;
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let wait = left.min(Duration::from_millis(ttl.max(1) as u64));
            sub.set_read_timeout(Some(wait)).unwrap();
            if let Ok(redis::Value::Array(parts)) = sub.recv_response() {
                let payload: i64 = redis::from_redis_value(parts[2].clone()).unwrap();
                assert_eq!(payload, 0, "locksmith publishes Redisson's unlock message");
            }
        }
    }

    fn release(&self) -> Option<i64> {
        Script::new(JAVA_RELEASE)
            .key(&self.name)
            .key(&self.channel)
            .arg(0)
            .arg(30_000)
            .arg(&self.owner)
            .arg(if self.sharded { "spublish" } else { "publish" })
            .invoke(&mut self.node.get_connection().unwrap())
            .unwrap()
    }
}

crate::on_every_topology!(
    java_holder_excludes_locksmith_and_its_release_wakes_our_waiter,
    locksmith_holder_excludes_java_and_its_release_wakes_the_java_waiter,
);

async fn java_holder_excludes_locksmith_and_its_release_wakes_our_waiter(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    let name = env.name("shared:inventory");
    let java = JavaClient::new(&env, &name);
    assert_eq!(java.try_acquire(), None);
    assert_eq!(java.try_acquire(), None, "Redisson re-enters its own lock");

    let lock = client.lock(name.clone()).unwrap();
    assert!(
        lock.try_lock().await.unwrap().is_none(),
        "locksmith is excluded"
    );
    let info = lock.info().await.unwrap();
    assert_eq!(info.holders, vec![(java.owner.clone(), 2)]);

    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let guard = lock.try_lock_for(Duration::from_secs(20)).await.unwrap();
        (guard, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(java.release(), Some(0));
    assert_eq!(java.release(), Some(1));
    let (guard, waited) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    let guard = guard.expect("woken by the Java client's unlock message");
    // Woken by the message, not by the 30 s lease running out.
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
    guard.release().await.unwrap();
}

async fn locksmith_holder_excludes_java_and_its_release_wakes_the_java_waiter(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    let name = env.name("shared:inventory");
    let lock = client.lock(name.clone()).unwrap();
    let guard = lock.lock().await.unwrap();

    let java = JavaClient::new(&env, &name);
    let busy = java.try_acquire().expect("Java sees the lock as busy");
    assert!(
        busy > 0 && busy <= 30_000,
        "busy answer is the PTTL: {busy}"
    );
    assert_eq!(java.release(), None, "a non-owner cannot release");

    let java_waiter = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let got = java.lock(Duration::from_secs(20));
        (got, started.elapsed(), java)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    guard.release().await.unwrap();
    let (got, waited, java) = tokio::time::timeout(Duration::from_secs(25), java_waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(got, "the Java waiter acquires");
    assert!(
        waited < Duration::from_secs(10),
        "woken by our release message, waited {waited:?}"
    );
    assert!(client
        .lock(name)
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .is_none());
    assert_eq!(java.release(), Some(1));
}

#[tokio::test]
async fn owner_field_has_redissons_shape() {
    let (_server, client) = setup(Duration::from_secs(30)).await;
    let lock = client.lock("shape").unwrap();
    let guard = lock.lock().await.unwrap();
    let info = lock.info().await.unwrap();
    let (field, count) = &info.holders[0];
    let (uuid, holder) = field.rsplit_once(':').unwrap();
    assert_eq!(uuid, client.id().hyphenated().to_string());
    assert_eq!(uuid.len(), 36);
    assert!(uuid
        .chars()
        .all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c)));
    assert!(!holder.is_empty() && holder.chars().all(|c| c.is_ascii_digit()));
    assert_eq!(*count, 1);
    assert_eq!(info.fencing_counter, guard.fencing_token());
    guard.release().await.unwrap();
}

/// On a cluster, [`NotifyMode::Classic`] and [`NotifyMode::Both`] serve
/// clients that only know classic pub/sub (node-redisson, for one): a
/// classic Redisson-protocol waiter is woken by our release, and our waiter
/// is woken by its classic release. ([`NotifyMode::Sharded`], the default,
/// is what the tests above use on a cluster.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_and_both_notifications_on_a_cluster_reach_classic_clients() {
    let env = Env::new(Topo::Cluster).await;
    for mode in [NotifyMode::Classic, NotifyMode::Both] {
        // A 10 s command bound: connecting to the cluster (its probes) is
        // not what this test is about, and under the full suite's load it
        // once took longer than the 2 s the suite's clients had then.
        let built = env
            .builder(Duration::from_secs(30))
            .command_timeout(Duration::from_secs(10))
            .cluster_notify(mode)
            .build()
            .await;
        if mode == NotifyMode::Both && !crate::common::has_7_0() {
            // Both needs sharded pub/sub: refused at connect, naming the
            // server and the mode that works there.
            let Err(err) = built else {
                panic!("Both is refused before Redis 7.0");
            };
            assert_eq!(err.kind(), locksmith::ErrorKind::Unsupported, "{err}");
            assert!(
                err.to_string().contains("Redis 6.") && err.to_string().contains("Classic"),
                "{err}"
            );
            continue;
        }
        let client = built.unwrap();
        assert_eq!(client.notify_mode(), mode);
        let name = env.name(&format!("classic:{mode:?}"));
        let mut java = JavaClient::new(&env, &name);
        java.sharded = false;

        // Our release wakes the classic Java waiter.
        let guard = client.lock(name.clone()).unwrap().lock().await.unwrap();
        let java_waiter = tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let got = java.lock(Duration::from_secs(20));
            (got, started.elapsed(), java)
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        guard.release().await.unwrap();
        let (got, waited, java) = java_waiter.await.unwrap();
        assert!(got, "{mode:?}: the classic waiter acquires");
        assert!(
            waited < Duration::from_secs(10),
            "{mode:?}: waited {waited:?}"
        );

        // Its classic release wakes our waiter.
        let lock = client.lock(name.clone()).unwrap();
        let waiter = tokio::spawn(async move {
            let started = Instant::now();
            let got = lock.try_lock_for(Duration::from_secs(20)).await.unwrap();
            (got, started.elapsed())
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(java.release(), Some(1));
        let (got, waited) = waiter.await.unwrap();
        let got = got.expect("our waiter acquires");
        assert!(
            waited < Duration::from_secs(10),
            "{mode:?}: waited {waited:?}"
        );
        got.release().await.unwrap();
    }
}
