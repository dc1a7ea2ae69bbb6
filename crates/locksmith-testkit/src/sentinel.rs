//! [`SentinelGroup`]: a primary, two replicas and three Sentinels watching
//! them, with a failover on demand.

use std::collections::HashMap;
use std::io;
use std::time::Duration;

use crate::admin::{self, wait_for};
use crate::server::RedisServer;

/// The name the Sentinels monitor the primary under.
const MASTER_NAME: &str = "locksmith";

/// Replicas started next to the primary.
const REPLICAS: usize = 2;

/// Sentinels started; a quorum of two of three decides a failover.
const SENTINELS: usize = 3;

/// `down-after-milliseconds`: small so a killed primary is noticed within
/// about a second.
const DOWN_AFTER_MS: u64 = 1000;

/// `failover-timeout`: small so a failed election is retried soon (Sentinel
/// waits twice this before trying again).
const FAILOVER_TIMEOUT_MS: u64 = 5000;

/// How long the group may take to come up: replicas syncing, Sentinels
/// finding the replicas (INFO) and each other (hello messages every 2 s).
const READY_TIMEOUT: Duration = Duration::from_secs(45);

/// A primary with two replicas (`--replicaof`) and three Sentinels that
/// monitor it as [`master_name`](Self::master_name) with quorum 2. Every
/// process is killed on drop.
///
/// Data nodes have fixed indices (`0..3`, node 0 starts as the primary);
/// which one is the primary changes with failovers.
///
/// ```no_run
/// use std::time::Duration;
/// let mut group = locksmith_testkit::SentinelGroup::start()?;
/// let old = group.primary_addr();
/// group.kill_primary();
/// let new = group.wait_for_failover(Duration::from_secs(30))?;
/// assert_ne!(old, new);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct SentinelGroup {
    /// Data nodes; node 0 starts as the primary, the others replicate it.
    servers: Vec<RedisServer>,
    /// The Sentinels, each with its own rewritable config file.
    sentinels: Vec<RedisServer>,
    /// Index of the node the Sentinels last named as primary, so a test can
    /// kill "the primary" and see the address change.
    primary: usize,
}

impl SentinelGroup {
    /// Starts the primary, the replicas and the Sentinels, and waits until
    /// both replicas are in sync (`master_link_status:up`) and every
    /// Sentinel sees the primary, both replicas and the other Sentinels.
    ///
    /// # Errors
    /// When a process fails to start or the group is not ready in time; the
    /// error says what was last seen.
    pub fn start() -> io::Result<SentinelGroup> {
        // On a loaded machine Sentinels occasionally fail to discover each
        // other in time (one keeps seeing a single peer); a fresh group
        // almost always comes up, so setup tries up to three times before
        // it reports the failure.
        let mut last = None;
        for _ in 0..3 {
            match Self::start_once(None) {
                Ok(group) => return Ok(group),
                Err(e) if e.kind() == io::ErrorKind::TimedOut => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("sentinel group did not start")))
    }

    /// One attempt of [`SentinelGroup::start`].
    fn start_once(tls: Option<&crate::TlsFiles>) -> io::Result<SentinelGroup> {
        // Every process also speaks TLS when asked, and replication, the
        // Sentinels' checks and their hellos then go over TLS ports.
        let builder = || {
            let b = RedisServer::builder();
            match tls {
                Some(files) => b.tls(files, false).config("tls-replication", "yes"),
                None => b,
            }
        };
        let primary = builder().start()?;
        let primary_port = primary.tls_port().unwrap_or(primary.port());
        let mut servers = vec![primary];
        for _ in 0..REPLICAS {
            let replica = builder()
                .arg("--replicaof")
                .arg("127.0.0.1")
                .arg(primary_port.to_string())
                .start()?;
            servers.push(replica);
        }
        wait_for("replicas in sync", READY_TIMEOUT, || {
            servers[1..]
                .iter()
                .try_for_each(|s| replica_in_sync(&s.addr()))
        })?;

        let conf = format!(
            "sentinel monitor {MASTER_NAME} 127.0.0.1 {port} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
             sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            port = primary_port
        );
        let sentinels = (0..SENTINELS)
            .map(|_| {
                builder()
                    .config_file(conf.clone())
                    .arg("--sentinel")
                    .start()
            })
            .collect::<io::Result<Vec<_>>>()?;
        let group = SentinelGroup {
            servers,
            sentinels,
            primary: 0,
        };
        wait_for("sentinels ready", READY_TIMEOUT, || {
            group
                .sentinels
                .iter()
                .try_for_each(|s| sentinel_ready(&s.addr()))
        })?;
        Ok(group)
    }

    /// As [`start`](Self::start), with every data node and Sentinel also
    /// listening for TLS ([`RedisServerBuilder::tls`](crate::RedisServerBuilder::tls))
    /// and replication and the Sentinels' own traffic over TLS: the
    /// Sentinels name the primary's TLS port. The plain ports stay for
    /// setup and assertions; a failover is not supported on such a group
    /// ([`wait_for_failover`](Self::wait_for_failover) speaks plain ports).
    ///
    /// # Errors
    /// As for [`start`](Self::start).
    pub fn start_tls(files: &crate::TlsFiles) -> io::Result<SentinelGroup> {
        let mut last = None;
        for _ in 0..3 {
            match Self::start_once(Some(files)) {
                Ok(group) => return Ok(group),
                Err(e) if e.kind() == io::ErrorKind::TimedOut => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("sentinel group did not start")))
    }

    /// `127.0.0.1:<TLS port>` of every Sentinel (a group from
    /// [`start_tls`](Self::start_tls); empty otherwise).
    pub fn tls_sentinel_addrs(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .filter_map(|s| s.tls_port().map(|p| format!("127.0.0.1:{p}")))
            .collect()
    }

    /// The name the Sentinels know the primary by, for
    /// `SENTINEL get-master-addr-by-name` and Sentinel-aware clients.
    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// `redis://127.0.0.1:<port>` of every Sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// `127.0.0.1:<port>` of every Sentinel.
    pub fn sentinel_addrs(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::addr).collect()
    }

    /// `redis://` URL of the current primary (as last confirmed by the
    /// Sentinels).
    pub fn primary_url(&self) -> String {
        self.servers[self.primary].url()
    }

    /// `127.0.0.1:<port>` of the current primary (as last confirmed by the
    /// Sentinels).
    pub fn primary_addr(&self) -> String {
        self.servers[self.primary].addr()
    }

    /// Index of the current primary among [`nodes`](Self::nodes).
    pub fn primary_index(&self) -> usize {
        self.primary
    }

    /// All data nodes (primary and replicas), by index.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.servers
    }

    /// Data node `i`, to pause, kill or restart it.
    ///
    /// # Panics
    /// When `i` is not a data node index.
    pub fn node(&mut self, i: usize) -> &mut RedisServer {
        &mut self.servers[i]
    }

    /// Sentinel `i`, to pause, kill or restart it.
    ///
    /// # Panics
    /// When `i` is not a Sentinel index.
    pub fn sentinel(&mut self, i: usize) -> &mut RedisServer {
        &mut self.sentinels[i]
    }

    /// Waits until every data node other than the current primary
    /// replicates from it with its link up (`master_link_status:up`). Use it
    /// after a failover and a restart of the killed node, before relying on
    /// replication again. (The Sentinels' own view of the replicas is
    /// refreshed every 10 s and is not waited for.)
    ///
    /// # Errors
    /// A timeout error describing what was last seen.
    pub fn wait_replicas_in_sync(&self, timeout: Duration) -> io::Result<()> {
        let port = self.servers[self.primary].port().to_string();
        wait_for("replicas in sync with the primary", timeout, || {
            for (i, server) in self.servers.iter().enumerate() {
                if i == self.primary {
                    continue;
                }
                let addr = server.addr();
                let info = admin::info(&addr, "replication")?;
                if info.get("master_port") != Some(&port) {
                    return Err(format!(
                        "{addr} (node {i}) has role {:?}, replicates from port {:?}; primary is node {} on port {port}",
                        info.get("role"),
                        info.get("master_port"),
                        self.primary
                    ));
                }
                replica_in_sync(&addr)?;
            }
            Ok(())
        })
    }

    /// Takes as the current primary the node every answering Sentinel (a
    /// majority at least) names, when it reports `role:master`: on a loaded
    /// machine the Sentinels may fail over once more on their own (a
    /// primary that answered too slowly), and a repair that made their
    /// choice a replica of the group's older idea would leave them naming
    /// a replica. Answers whether the primary changed; `Ok(false)` when
    /// the Sentinels do not agree or their choice is not a primary yet.
    ///
    /// # Errors
    /// When the Sentinels name a node that is not one of the group's.
    pub fn follow_sentinels(&mut self) -> io::Result<bool> {
        let sentinels = self.sentinel_addrs();
        let answers: Vec<String> = sentinels
            .iter()
            .filter_map(|s| master_addr_of(s).ok())
            .collect();
        let agreed = answers.windows(2).all(|w| w[0] == w[1]);
        let Some(named) = answers
            .first()
            .filter(|_| agreed && answers.len() * 2 > sentinels.len())
        else {
            return Ok(false);
        };
        let is_master = admin::info(named, "replication")
            .ok()
            .is_some_and(|info| info.get("role").map(String::as_str) == Some("master"));
        if !is_master {
            return Ok(false);
        }
        let index = self
            .servers
            .iter()
            .position(|s| s.addr() == *named)
            .ok_or_else(|| io::Error::other(format!("sentinels name unknown node {named}")))?;
        let changed = index != self.primary;
        self.primary = index;
        Ok(changed)
    }

    /// Makes every data node that does not replicate from the current
    /// primary a replica of it with `REPLICAOF` (plain ports), as an
    /// operator would when the Sentinels are slow to reconfigure the
    /// nodes after a failover. The Sentinels do it themselves, normally:
    /// the other replicas during the failover, and a node that comes back
    /// as a primary some 8 to 20 s after it answers again (it must report
    /// its role for 8 s first, and they ask replicas every 10 s). Answers
    /// the nodes it reconfigured.
    ///
    /// # Errors
    /// When a node does not answer or refuses the command.
    pub fn repair_replicas(&self) -> io::Result<Vec<usize>> {
        let primary = self.servers[self.primary].port().to_string();
        let mut repaired = Vec::new();
        for (i, server) in self.servers.iter().enumerate() {
            if i == self.primary {
                continue;
            }
            let info = admin::info(&server.addr(), "replication").map_err(io::Error::other)?;
            if info.get("master_port") != Some(&primary) {
                admin::query::<()>(
                    &server.addr(),
                    redis::cmd("REPLICAOF").arg("127.0.0.1").arg(&primary),
                )
                .map_err(io::Error::other)?;
                repaired.push(i);
            }
        }
        Ok(repaired)
    }

    /// Kills the current primary with SIGKILL. The Sentinels notice after
    /// `down-after-milliseconds` (1 s) and promote a replica; see
    /// [`wait_for_failover`](Self::wait_for_failover).
    pub fn kill_primary(&mut self) {
        self.servers[self.primary].kill();
    }

    /// Waits until every Sentinel that answers (at least a majority) names
    /// the same new primary address and that node reports `role:master`; returns its `127.0.0.1:<port>`
    /// and makes it the group's current primary.
    ///
    /// # Errors
    /// A timeout error describing the Sentinels' last answers.
    pub fn wait_for_failover(&mut self, timeout: Duration) -> io::Result<String> {
        let old = self.primary_addr();
        let sentinels = self.sentinel_addrs();
        let new = wait_for("sentinel failover", timeout, || {
            let answers: Vec<Result<String, String>> =
                sentinels.iter().map(|s| master_addr_of(s)).collect();
            // Every Sentinel that answers must agree, and a majority must
            // answer, so a client asking any of them finds the new primary.
            let named: Vec<&String> = answers.iter().flatten().collect();
            let agreed = named.windows(2).all(|w| w[0] == w[1]);
            let addr = match named.first() {
                Some(addr) if agreed && **addr != old && named.len() * 2 > sentinels.len() => {
                    addr.to_string()
                }
                _ => return Err(format!("sentinels answer {answers:?}")),
            };
            let role = admin::info(&addr, "replication")?;
            match role.get("role").map(String::as_str) {
                Some("master") => Ok(addr),
                other => Err(format!("sentinels name {addr}, which has role {other:?}")),
            }
        })?;
        self.primary = self
            .servers
            .iter()
            .position(|s| s.addr() == new)
            .ok_or_else(|| io::Error::other(format!("sentinels name unknown node {new}")))?;
        Ok(new)
    }
}

/// `Ok` once the replica at `addr` has its replication link up.
fn replica_in_sync(addr: &str) -> Result<(), String> {
    let info = admin::info(addr, "replication")?;
    match info.get("master_link_status").map(String::as_str) {
        Some("up") => Ok(()),
        other => Err(format!("replica {addr}: master_link_status {other:?}")),
    }
}

/// `Ok` once the Sentinel at `addr` sees a healthy primary with both
/// replicas in sync and knows the other Sentinels.
fn sentinel_ready(addr: &str) -> Result<(), String> {
    let master: Vec<String> =
        admin::query(addr, redis::cmd("SENTINEL").arg("MASTER").arg(MASTER_NAME))?;
    let master = pairs(master);
    let get = |k: &str| master.get(k).map(String::as_str).unwrap_or("?");
    let (flags, replicas, others) = (get("flags"), get("num-slaves"), get("num-other-sentinels"));
    if flags != "master"
        || replicas != REPLICAS.to_string()
        || others != (SENTINELS - 1).to_string()
    {
        return Err(format!(
            "sentinel {addr}: flags {flags}, num-slaves {replicas}, num-other-sentinels {others}"
        ));
    }
    let replicas: Vec<Vec<String>> = admin::query(
        addr,
        redis::cmd("SENTINEL").arg("REPLICAS").arg(MASTER_NAME),
    )?;
    for replica in replicas.into_iter().map(pairs) {
        let get = |k: &str| replica.get(k).map(String::as_str).unwrap_or("?");
        if get("flags") != "slave" || get("master-link-status") != "ok" {
            return Err(format!(
                "sentinel {addr}: replica {} flags {}, master-link-status {}",
                get("name"),
                get("flags"),
                get("master-link-status")
            ));
        }
    }
    Ok(())
}

/// `SENTINEL get-master-addr-by-name` of the Sentinel at `addr`, as
/// `host:port`.
fn master_addr_of(addr: &str) -> Result<String, String> {
    let reply: Option<(String, String)> = admin::query(
        addr,
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER_NAME),
    )?;
    reply
        .map(|(host, port)| format!("{host}:{port}"))
        .ok_or_else(|| format!("sentinel {addr} does not know {MASTER_NAME}"))
}

/// A flat `[key, value, key, value, ...]` reply as a map.
fn pairs(flat: Vec<String>) -> HashMap<String, String> {
    let mut map = HashMap::new();
    let mut it = flat.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        map.insert(k, v);
    }
    map
}

impl Drop for SentinelGroup {
    fn drop(&mut self) {
        // Sentinels first, so none of them starts a failover while the data
        // nodes go away one by one.
        for sentinel in &mut self.sentinels {
            sentinel.kill();
        }
        for server in &mut self.servers {
            server.kill();
        }
    }
}
