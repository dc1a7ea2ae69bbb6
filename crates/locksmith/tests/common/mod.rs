//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::time::Duration;

use locksmith::Client;
use locksmith_testkit::RedisServer;

/// A fresh server and a client with a short watchdog lease.
pub async fn setup(lease: Duration) -> (RedisServer, Client) {
    let server = RedisServer::start().expect("start redis-server");
    let client = client(&server, lease).await;
    (server, client)
}

/// Another client of `server`.
pub async fn client(server: &RedisServer, lease: Duration) -> Client {
    Client::builder(server.url())
        .lease(lease)
        .command_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect")
}

/// Polls `cond` every 20 ms for at most `limit`; true if it became true.
pub async fn eventually<F, Fut>(limit: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if cond().await {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// All keys on the server but release receipts
/// (`{NAME}:locksmith_released:<owner>`, left by every final release for
/// a few seconds by design: see docs/locks.md, "Lost replies").
pub fn keys(server: &RedisServer) -> Vec<String> {
    let mut conn = server.connection().expect("connection");
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).expect("KEYS");
    keys.retain(|k| !k.contains(":locksmith_released:"));
    keys.sort();
    keys
}

/// The deployments the topology-parametrized suite runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topo {
    /// A fresh single server per test, reached over TLS (its own CA) as a
    /// user holding only the minimal ACL of docs/operations.md.
    Single,
    /// A primary, two replicas and three Sentinels, shared by the tests of
    /// one test binary (names are unique per test).
    Sentinel,
    /// A six-node cluster, shared likewise.
    Cluster,
}

/// One test's view of a deployment: how to build clients on it, names
/// unique to the test, and direct connections to the node that owns a key.
pub struct Env {
    /// Which deployment.
    pub topo: Topo,
    /// The URL clients are built from.
    pub url: String,
    /// The test's own server (single only).
    server: Option<locksmith_testkit::RedisServer>,
    /// Makes names unique to this test on a shared deployment.
    nonce: String,
}

fn shared_sentinel() -> &'static locksmith_testkit::SentinelGroup {
    static GROUP: std::sync::OnceLock<locksmith_testkit::SentinelGroup> =
        std::sync::OnceLock::new();
    GROUP.get_or_init(|| locksmith_testkit::SentinelGroup::start().expect("start sentinel group"))
}

fn shared_cluster() -> &'static locksmith_testkit::RedisCluster {
    static CLUSTER: std::sync::OnceLock<locksmith_testkit::RedisCluster> =
        std::sync::OnceLock::new();
    CLUSTER.get_or_init(|| locksmith_testkit::RedisCluster::start().expect("start cluster"))
}

/// The CA and certificates of the suite's TLS servers, made once.
pub fn suite_tls() -> &'static locksmith_testkit::TlsFiles {
    static FILES: std::sync::OnceLock<locksmith_testkit::TlsFiles> = std::sync::OnceLock::new();
    FILES.get_or_init(|| locksmith_testkit::TlsFiles::generate().expect("make certificates"))
}

/// The ACL rule that lets a user use every pub/sub channel: `&*` (channel
/// rules arrived in Redis 6.2); on Redis 6.0, where every user may use
/// every channel, a rule that changes nothing there (`~*`, every key,
/// which the users given it have already).
pub fn all_channels() -> &'static str {
    if locksmith_testkit::server_id() == "redis6" {
        "~*"
    } else {
        "&*"
    }
}

/// True where the test server speaks Redis 7.0's commands (every server
/// the test kit starts but Redis 6.0): sharded pub/sub, scripts that
/// reach several slots, `CLIENT PAUSE .. WRITE`, `CLUSTER
/// ADDSLOTSRANGE`, ACL subcommand rules, Sentinel ACL users (6.2).
pub fn has_7_0() -> bool {
    locksmith_testkit::server_id() != "redis6"
}

/// Says why a test does nothing on this server, for a test whose subject
/// the server lacks (see [`has_7_0`]); answers true when it should stop.
pub fn lacks_7_0(what: &str) -> bool {
    if has_7_0() {
        return false;
    }
    eprintln!(
        "skipped on {}: {what} arrived in Redis 7.0",
        locksmith_testkit::server_id()
    );
    true
}

/// `CLIENT PAUSE ms` of every command (Redis 6.0 knows no mode; from 6.2
/// the mode `ALL` says the same).
pub fn pause_all(conn: &mut redis::Connection, ms: u64) {
    let mut cmd = redis::cmd("CLIENT");
    cmd.arg("PAUSE").arg(ms);
    if has_7_0() {
        cmd.arg("ALL");
    }
    cmd.exec(conn).expect("CLIENT PAUSE");
}

/// The lines of a `CLIENT LIST` reply whose connection is logged in as
/// `user` (the `user=` field is last on Redis 6.0, followed by others
/// later).
pub fn clients_of<'a>(list: &'a str, user: &str) -> Vec<&'a str> {
    let field = format!("user={user}");
    list.lines()
        .filter(|line| line.split_whitespace().any(|f| f == field))
        .collect()
}

/// A current-thread runtime with every driver, for tests that move a
/// client from one runtime to the next.
pub fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Takes the lock `name` of `client` and releases it.
pub async fn lock_and_release(client: &locksmith::Client, name: &str) {
    client
        .lock(name)
        .unwrap()
        .lock()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// The password of the suite's ACL user on a single server.
pub const SUITE_PASSWORD: &str = "suite-s3cret";

/// The arguments of `ACL SETUSER` (user name first) of the minimal ACL
/// that docs/operations.md documents, with `password`.
pub fn minimal_acl(password: &str) -> Vec<String> {
    let docs = include_str!("../../../../docs/operations.md");
    // The second form is Redis 6.0's (no channel rules, no sharded pub/sub).
    let form = usize::from(locksmith_testkit::server_id() == "redis6");
    let line = docs
        .lines()
        .filter(|l| l.starts_with("ACL SETUSER locksmith "))
        .nth(form)
        .expect("docs/operations.md documents the minimal ACL");
    line.split_whitespace()
        .skip(2)
        .map(|w| {
            if w == ">CHANGE-ME" {
                format!(">{password}")
            } else {
                w.to_owned()
            }
        })
        .collect()
}

/// The URL of a Sentinel group.
pub fn sentinel_url(group: &locksmith_testkit::SentinelGroup) -> String {
    format!(
        "redis+sentinel://{}/{}",
        group.sentinel_addrs().join(","),
        group.master_name()
    )
}

/// The URL of a cluster.
pub fn cluster_url(cluster: &locksmith_testkit::RedisCluster) -> String {
    format!("redis+cluster://{}", cluster.addrs().join(","))
}

impl Env {
    /// Whether a Redisson client publishes and waits with sharded pub/sub
    /// here: on a cluster whose servers have it (Redis 7.0 and later).
    pub fn redisson_sharded(&self) -> bool {
        self.topo == Topo::Cluster && has_7_0()
    }

    /// An environment on `topo` (starting the shared deployment on first
    /// use, off the async runtime's worker).
    pub async fn new(topo: Topo) -> Env {
        let nonce = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
        match topo {
            Topo::Single => {
                // The suite's clients run as a user holding exactly the
                // minimal ACL of docs/operations.md; the test's own checks
                // (node_for, keys) use the default user.
                let server = RedisServer::builder()
                    .tls(suite_tls(), false)
                    .start()
                    .expect("start redis-server");
                let mut admin = server.connection().expect("admin connection");
                let _: () = redis::cmd("ACL")
                    .arg("SETUSER")
                    .arg(minimal_acl(SUITE_PASSWORD))
                    .query(&mut admin)
                    .expect("the documented ACL is accepted");
                Env {
                    topo,
                    url: format!(
                        "rediss://locksmith:{SUITE_PASSWORD}@127.0.0.1:{}",
                        server.tls_port().expect("a TLS port")
                    ),
                    server: Some(server),
                    nonce,
                }
            }
            Topo::Sentinel => {
                let url = tokio::task::spawn_blocking(|| sentinel_url(shared_sentinel()))
                    .await
                    .unwrap();
                Env {
                    topo,
                    url,
                    server: None,
                    nonce,
                }
            }
            Topo::Cluster => {
                let url = tokio::task::spawn_blocking(|| cluster_url(shared_cluster()))
                    .await
                    .unwrap();
                Env {
                    topo,
                    url,
                    server: None,
                    nonce,
                }
            }
        }
    }

    /// A client with watchdog lease `lease`.
    pub async fn client(&self, lease: Duration) -> Client {
        self.builder(lease).build().await.expect("connect")
    }

    /// A builder with the suite's defaults: room for a loaded machine,
    /// 10 s to connect (a cluster connect, twice that, dials every node
    /// twice) and 5 s a command. Replica acknowledgement keeps its default
    /// (on where there are replicas) with 3 s instead of 1 s to come, so a
    /// replica starved of CPU for a second does not fail a grant with
    /// `NotReplicated`; an explicit minimum (`replica_acks`) would refuse
    /// to connect while a replica of the shared deployments is briefly
    /// away.
    pub fn builder(&self, lease: Duration) -> locksmith::ClientBuilder {
        self.builder_for(&self.url)
            .lease(lease)
            .connect_timeout(Duration::from_secs(10))
            .command_timeout(Duration::from_secs(5))
            .replica_ack_timeout(Duration::from_secs(3))
    }

    /// A builder for another URL of this deployment, trusting the suite's
    /// CA where it speaks TLS.
    pub fn builder_for(&self, url: &str) -> locksmith::ClientBuilder {
        let builder = Client::builder(url);
        if url.starts_with("rediss") {
            builder.tls_ca_file(suite_tls().ca_cert())
        } else {
            builder
        }
    }

    /// `base` made unique to this test (and, on a cluster, spread over
    /// slots by the nonce).
    pub fn name(&self, base: &str) -> String {
        format!("{base}:{}", self.nonce)
    }

    /// Counts messages on `channel` from a raw subscriber on the node that
    /// owns it (sharded on a cluster, as Redisson listens there), from the
    /// moment this returns. Counting stops when the counter is dropped.
    pub fn count_messages_on(&self, channel: &str) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
        use std::sync::atomic::{AtomicU64, Ordering};
        let channel = channel.to_owned();
        let url = self.node_url_for(&channel);
        let subscribe = if self.redisson_sharded() {
            "SSUBSCRIBE"
        } else {
            "SUBSCRIBE"
        };
        let count = std::sync::Arc::new(AtomicU64::new(0));
        let seen = std::sync::Arc::downgrade(&count);
        let (ready, subscribed) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
            redis::cmd(subscribe).arg(&channel).exec(&mut conn).unwrap();
            ready.send(()).unwrap();
            // Long enough that a timeout never cuts a message in two on a
            // loaded machine; the thread ends within it of the counter's
            // drop.
            conn.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            while let Some(count) = seen.upgrade() {
                if let Ok(redis::Value::Array(parts)) = conn.recv_response() {
                    let kind: String = redis::from_redis_value(parts[0].clone()).unwrap();
                    if kind.ends_with("message") {
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        });
        subscribed.recv().unwrap();
        count
    }

    /// The URL of the node that owns `key` (the primary).
    pub fn node_url_for(&self, key: &str) -> String {
        match self.topo {
            Topo::Single => self.server.as_ref().unwrap().url(),
            Topo::Sentinel => shared_sentinel().primary_url(),
            Topo::Cluster => {
                let cluster = shared_cluster();
                let i = cluster.node_for_key(key).unwrap();
                cluster.nodes()[i].url()
            }
        }
    }

    /// A direct connection to the node that owns `key` (the primary).
    pub fn node_for(&self, key: &str) -> redis::Connection {
        redis::Client::open(self.node_url_for(key))
            .unwrap()
            .get_connection()
            .unwrap()
    }

    /// Which of `keys` exist.
    pub fn existing(&self, keys: &[String]) -> Vec<String> {
        keys.iter()
            .filter(|k| {
                let n: i64 = redis::cmd("EXISTS")
                    .arg(k.as_str())
                    .query(&mut self.node_for(k))
                    .unwrap();
                n == 1
            })
            .cloned()
            .collect()
    }

    /// Subscribers of `channel` on the node that owns it: classic and
    /// sharded.
    pub fn listeners(&self, channel: &str) -> u64 {
        let mut conn = self.node_for(channel);
        let classic: (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query(&mut conn)
            .unwrap();
        // Sharded pub/sub arrived in Redis 7.0.
        if locksmith_testkit::server_id() == "redis6" {
            return classic.1;
        }
        let sharded: (String, u64) = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(channel)
            .query(&mut conn)
            .unwrap();
        classic.1 + sharded.1
    }

    /// Script calls served so far by the node that owns `key`.
    pub fn evalsha_calls(&self, key: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.node_for(key))
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }
}

/// Runs each named `async fn(Env)` on a single server, behind Sentinel and
/// on a cluster: one `#[tokio::test]` per function and topology, in modules
/// `single`, `sentinel` and `cluster`.
#[macro_export]
macro_rules! on_every_topology {
    ($($test:ident),* $(,)?) => {
        mod single {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test($crate::common::Env::new($crate::common::Topo::Single).await).await
                }
            )*
        }
        mod sentinel {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test($crate::common::Env::new($crate::common::Topo::Sentinel).await).await
                }
            )*
        }
        mod cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test($crate::common::Env::new($crate::common::Topo::Cluster).await).await
                }
            )*
        }
    };
}

/// A cluster whose node serving `key` is reached through a proxy: the node
/// announces the proxy's port, so clients that learn the slot map connect
/// through it.
pub struct Proxied {
    pub cluster: locksmith_testkit::RedisCluster,
    pub proxy: locksmith_testkit::FaultProxy,
    pub node: usize,
}

/// Redis 6.0 takes `cluster-announce-port` at startup only: callers skip
/// with [`lacks_7_0`] first.
pub fn proxied_cluster(key: &str) -> Proxied {
    let cluster = locksmith_testkit::RedisCluster::start().unwrap();
    let node = cluster.node_for_key(key).unwrap();
    let proxy = locksmith_testkit::FaultProxy::start(&cluster.nodes()[node].addr()).unwrap();
    let port = proxy.addr().rsplit_once(':').unwrap().1.to_owned();
    let mut conn = cluster.nodes()[node].connection().unwrap();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("cluster-announce-port")
        .arg(&port)
        .exec(&mut conn)
        .unwrap();
    // Wait until every node's slot map names the proxy.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    for other in cluster.nodes() {
        let mut c = other.connection().unwrap();
        loop {
            let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut c).unwrap();
            if nodes.contains(&format!(":{port}@")) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the cluster never announced the proxy"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Proxied {
        cluster,
        proxy,
        node,
    }
}

impl Proxied {
    /// A client that seeds from the nodes not behind the proxy.
    pub async fn client(&self) -> locksmith::Client {
        let seeds: Vec<String> = self
            .cluster
            .nodes()
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != self.node)
            .map(|(_, n)| n.addr())
            .collect();
        locksmith::Client::builder(format!("redis+cluster://{}", seeds.join(",")))
            .replica_acks(0, Duration::from_millis(100))
            .build()
            .await
            .unwrap()
    }

    /// `GET key` on the owner itself, past the proxy.
    pub fn get(&self, key: &str) -> Option<i64> {
        let mut conn = self.cluster.nodes()[self.node].connection().unwrap();
        redis::cmd("GET").arg(key).query(&mut conn).unwrap()
    }
}

/// Makes the server at the other end of `conn` log every command it runs
/// in its slow log (up to 100,000 of them, each with its first 32
/// arguments), from an empty log.
pub fn log_every_command(conn: &mut redis::Connection) {
    for (option, value) in [
        ("slowlog-log-slower-than", "0"),
        ("slowlog-max-len", "100000"),
    ] {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(option)
            .arg(value)
            .exec(conn)
            .unwrap();
    }
    redis::cmd("SLOWLOG").arg("RESET").exec(conn).unwrap();
}

/// The arguments (command name first) of every command the slow log holds,
/// newest first (see [`log_every_command`]).
pub fn logged_commands(conn: &mut redis::Connection) -> Vec<Vec<String>> {
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(100_000)
        .query(conn)
        .unwrap();
    entries
        .iter()
        .filter_map(|entry| {
            let redis::Value::Array(fields) = entry else {
                return None;
            };
            let Some(redis::Value::Array(args)) = fields.get(3) else {
                return None;
            };
            Some(
                args.iter()
                    .filter_map(|a| redis::from_redis_value_ref::<String>(a).ok())
                    .collect(),
            )
        })
        .collect()
}

/// The number of keys a logged command (see [`logged_commands`]) declares
/// if it is an `EVALSHA`; `None` for any other command.
pub fn evalsha_keys(args: &[String]) -> Option<usize> {
    if !args.first()?.eq_ignore_ascii_case("evalsha") {
        return None;
    }
    args.get(2)?.parse().ok()
}

/// What [`in_own_process`] sets in the child: the test it runs.
const OWN_PROCESS_ENV: &str = "LOCKSMITH_TEST_OWN_PROCESS";

/// Runs test `name` of module `module` (pass `module_path!()`) in a
/// process of its own: for a test that installs something process-wide (a
/// global metrics recorder or tracing subscriber) while the binary's other
/// tests run beside it. In the parent, re-runs this test binary filtered
/// to exactly that test, asserts it passed, and answers false: the caller
/// returns. In that child, answers true: the caller runs its body.
pub fn in_own_process(module: &str, name: &str) -> bool {
    // `module_path!()` starts with the binary's crate name.
    let path = match module.split_once("::") {
        Some((_, rest)) => format!("{rest}::{name}"),
        None => name.to_owned(),
    };
    if std::env::var(OWN_PROCESS_ENV).as_deref() == Ok(path.as_str()) {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args([path.as_str(), "--exact", "--test-threads=1", "--nocapture"])
        .env(OWN_PROCESS_ENV, &path)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("re-run this test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{path} failed in its own process:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("1 passed"),
        "{path} did not run in its own process:\n{stdout}\n{stderr}"
    );
    false
}
