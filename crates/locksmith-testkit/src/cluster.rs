//! [`RedisCluster`]: a six-node Redis Cluster (three primaries, one replica
//! each) that can fail over on demand, or three primaries alone.

use std::fs::File;
use std::io;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::admin::{self, wait_for};
use crate::process::{free_port, spawn_guarded};
use crate::server::RedisServer;

/// Primaries in the cluster (each with one replica, unless started
/// without).
const PRIMARIES: usize = 3;

/// Slots in a Redis Cluster.
const SLOTS: usize = 16384;

/// `cluster-node-timeout` in milliseconds: small so a killed primary is
/// failed over in seconds, large enough that a busy 2-core machine does not
/// mark healthy nodes as failing.
const NODE_TIMEOUT_MS: u64 = 2000;

/// How long one `redis-cli --cluster create` may take (it sleeps while
/// the nodes meet). A healthy create takes a few seconds even on a busy
/// machine; one still "waiting for the cluster to join" after this is
/// stuck (seen under the full suite's load with the bus over TLS), and a
/// fresh set of nodes does better than more waiting.
const CREATE_TIMEOUT: Duration = Duration::from_secs(45);

/// How many fresh sets of nodes a start tries when a create is stuck.
const CREATE_ATTEMPTS: usize = 3;

/// How long the cluster may take to become consistent and `ok`.
const READY_TIMEOUT: Duration = Duration::from_secs(45);

/// How long one manual failover may take before it is asked for again; a
/// manual failover aborts on its own after 5 s in Redis.
const MANUAL_FAILOVER_ATTEMPT: Duration = Duration::from_secs(10);

/// How many times a manual failover is asked for.
const MANUAL_FAILOVER_ATTEMPTS: usize = 3;

/// How long an automatic failover after a kill may take: node timeout, the
/// replica's election delay (up to a couple of seconds) and slack.
const AUTO_FAILOVER_TIMEOUT: Duration = Duration::from_secs(45);

/// A running six-node Redis Cluster on loopback: three primaries with one
/// replica each (or, from [`RedisCluster::start_without_replicas`], the
/// three primaries alone), created with `redis-cli --cluster create`.
/// Every node is killed on drop.
///
/// Node indices (`0..6`) are fixed for the cluster's life; which of them are
/// primaries changes with failovers, so ask [`primaries`](Self::primaries).
///
/// ```no_run
/// let mut cluster = locksmith_testkit::RedisCluster::start()?;
/// let client = redis::cluster::ClusterClient::new(cluster.initial_nodes()).unwrap();
/// let old = cluster.primaries()?[0];
/// let promoted = cluster.failover(old)?;
/// assert!(cluster.primaries()?.contains(&promoted));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    /// The servers; their directories hold each node's `nodes.conf`, so
    /// a restarted node rejoins with its old identity.
    nodes: Vec<RedisServer>,
    /// Cluster node id of each server, by index: `CLUSTER NODES` speaks in
    /// ids, tests speak in indices.
    ids: Vec<String>,
}

/// Who serves which slots: `(node id, slot ranges)`, sorted by id.
type Primaries = Vec<(String, Vec<(usize, usize)>)>;

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct NodeLine {
    /// Cluster node id.
    id: String,
    /// Flags such as `myself`, `master`, `slave`, `fail?`, `fail`.
    flags: Vec<String>,
    /// The primary's id, for a replica.
    master: Option<String>,
    /// Served slot ranges, inclusive.
    slots: Vec<(usize, usize)>,
}

impl NodeLine {
    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    fn is_failing(&self) -> bool {
        self.has_flag("fail") || self.has_flag("fail?")
    }

    fn serves_slots(&self) -> bool {
        self.has_flag("master") && !self.slots.is_empty()
    }
}

fn parse_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let slots = fields[8..]
                .iter()
                // Migration markers look like `[slot->-id]`; skip them.
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|n| (n, n)),
                })
                .collect();
            Some(NodeLine {
                id: fields[0].to_owned(),
                flags: fields[2].split(',').map(str::to_owned).collect(),
                master: (fields[3] != "-").then(|| fields[3].to_owned()),
                slots,
            })
        })
        .collect()
}

impl RedisCluster {
    /// Starts six cluster-enabled servers, joins them with
    /// `redis-cli --cluster create --cluster-replicas 1`, and waits until
    /// every node reports `cluster_state:ok` with all slots served, all
    /// nodes agree on the primaries, and every replica is in sync.
    ///
    /// # Errors
    /// When a server or `redis-cli` fails, or the cluster does not become
    /// ready in time; the error says what was last seen.
    pub fn start() -> io::Result<RedisCluster> {
        Self::start_with(None, 1)
    }

    /// Three cluster-enabled primaries and no replicas (`redis-cli
    /// --cluster create --cluster-replicas 0`): the same slots as
    /// [`start`](Self::start), without the replication that shares the
    /// machine with everything else. Failover helpers have no replica to
    /// promote here.
    ///
    /// # Errors
    /// As for [`start`](Self::start).
    pub fn start_without_replicas() -> io::Result<RedisCluster> {
        Self::start_with(None, 0)
    }

    /// As [`start`](Self::start), with every node also listening for TLS
    /// ([`RedisServerBuilder::tls`](crate::RedisServerBuilder::tls)) and
    /// the cluster bus and replication over TLS (`tls-cluster yes`,
    /// `tls-replication yes`): a client connected over TLS hears the
    /// nodes' TLS ports in `CLUSTER SLOTS` and redirects. The plain ports
    /// stay for setup and assertions.
    ///
    /// # Errors
    /// As for [`start`](Self::start).
    pub fn start_tls(files: &crate::TlsFiles) -> io::Result<RedisCluster> {
        Self::start_with(Some(files), 1)
    }

    /// Three primaries, each with `replicas` replicas.
    fn start_with(tls: Option<&crate::TlsFiles>, replicas: usize) -> io::Result<RedisCluster> {
        // Only holds redis-cli's output, for the error of a failed create.
        let dir = tempfile::Builder::new()
            .prefix("locksmith-cluster-")
            .tempdir()?;
        let mut attempt = 1;
        let nodes = loop {
            let nodes = (0..PRIMARIES * (1 + replicas))
                .map(|_| start_node(tls))
                .collect::<io::Result<Vec<_>>>()?;
            match create(&nodes, replicas, dir.path(), tls) {
                Ok(()) => break nodes,
                // Stuck joining: these nodes are killed on drop, and a
                // fresh set is tried. Any other failure is final.
                Err(e) if e.kind() == io::ErrorKind::TimedOut && attempt < CREATE_ATTEMPTS => {
                    eprintln!("testkit: cluster create attempt {attempt} stuck, retrying with fresh nodes: {e}");
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        };
        let ids = nodes
            .iter()
            .map(|n| admin::query::<String>(&n.addr(), redis::cmd("CLUSTER").arg("MYID")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(io::Error::other)?;
        let cluster = RedisCluster { nodes, ids };
        cluster.wait_ok(READY_TIMEOUT)?;
        Ok(cluster)
    }

    /// `redis://127.0.0.1:<port>` of every node, in index order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `127.0.0.1:<port>` of every node, in index order.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::addr).collect()
    }

    /// `127.0.0.1:<TLS port>` of every node, in index order (a cluster
    /// from [`start_tls`](Self::start_tls); empty otherwise).
    pub fn tls_addrs(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter_map(|n| n.tls_port().map(|p| format!("127.0.0.1:{p}")))
            .collect()
    }

    /// Seed URLs for `redis::cluster::ClusterClient::new`: every node, so a
    /// client can start even while some of them are down.
    pub fn initial_nodes(&self) -> Vec<String> {
        self.urls()
    }

    /// Number of nodes (six; three without replicas).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a cluster has nodes. Present because `len` is.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i`, to pause, kill or restart it. A restarted node rejoins the
    /// cluster with its old id; call [`wait_ok`](Self::wait_ok) after.
    ///
    /// # Panics
    /// When `i >= len()`.
    pub fn node(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// All nodes, in index order.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The cluster node id of node `i`.
    ///
    /// # Panics
    /// When `i >= len()`.
    pub fn node_id(&self, i: usize) -> &str {
        &self.ids[i]
    }

    /// Indices of the nodes that currently serve slots (the primaries),
    /// ordered by their lowest slot, as seen by the first running node.
    ///
    /// # Errors
    /// When no running node answers `CLUSTER NODES`.
    pub fn primaries(&self) -> io::Result<Vec<usize>> {
        let view = self.view().map_err(io::Error::other)?;
        let mut primaries: Vec<(usize, usize)> = view
            .iter()
            .filter(|n| n.serves_slots() && !n.is_failing())
            .filter_map(|n| Some((n.slots.iter().map(|s| s.0).min()?, self.index_of(&n.id)?)))
            .collect();
        primaries.sort();
        Ok(primaries.into_iter().map(|(_, i)| i).collect())
    }

    /// Index of a running replica of the primary at index `primary`.
    ///
    /// # Errors
    /// When no running node answers, or the primary has no running replica.
    pub fn replica_of(&self, primary: usize) -> io::Result<usize> {
        self.view()
            .and_then(|view| self.replica_in(&view, primary))
            .map_err(io::Error::other)
    }

    /// Index of the primary that serves `key`'s hash slot.
    ///
    /// # Errors
    /// When no running node answers, or no primary serves the slot.
    pub fn node_for_key(&self, key: &str) -> io::Result<usize> {
        let addr = self.live_addr().map_err(io::Error::other)?;
        let slot: usize = admin::query(&addr, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
            .map_err(io::Error::other)?;
        let view = self.view().map_err(io::Error::other)?;
        view.iter()
            .filter(|n| n.serves_slots())
            .find(|n| n.slots.iter().any(|&(a, b)| (a..=b).contains(&slot)))
            .and_then(|n| self.index_of(&n.id))
            .ok_or_else(|| io::Error::other(format!("no primary serves slot {slot} of {key:?}")))
    }

    /// Promotes the replica of primary `primary` with `CLUSTER FAILOVER` (a
    /// coordinated, lossless manual failover), waits until the two have
    /// swapped roles and the cluster is `ok` again, and returns the index of
    /// the new primary. The old primary stays up as its replica.
    ///
    /// # Errors
    /// When `primary` is not a primary with a replica, or the switch does not
    /// complete in time.
    pub fn failover(&mut self, primary: usize) -> io::Result<usize> {
        let replica = self.replica_of(primary)?;
        let replica_addr = self.nodes[replica].addr();
        let mut last_err = None;
        for _ in 0..MANUAL_FAILOVER_ATTEMPTS {
            let _: String = admin::query(&replica_addr, redis::cmd("CLUSTER").arg("FAILOVER"))
                .map_err(io::Error::other)?;
            let switched = wait_for("manual cluster failover", MANUAL_FAILOVER_ATTEMPT, || {
                self.roles_swapped(primary, replica)
            });
            match switched {
                Ok(()) => {
                    self.wait_ok(READY_TIMEOUT)?;
                    return Ok(replica);
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("manual failover was never tried")))
    }

    /// Kills primary `primary` (SIGKILL), waits until the cluster has
    /// promoted its replica on its own and is `ok` again, and returns the
    /// index of the new primary. The killed node stays down until
    /// `node(primary).restart()`.
    ///
    /// # Errors
    /// When `primary` has no replica, or the failover does not complete in
    /// time.
    pub fn kill_primary(&mut self, primary: usize) -> io::Result<usize> {
        let replica = self.replica_of(primary)?;
        self.nodes[primary].kill();
        let replica_addr = self.nodes[replica].addr();
        let replica_id = self.ids[replica].clone();
        wait_for("automatic cluster failover", AUTO_FAILOVER_TIMEOUT, || {
            let view = nodes_of(&replica_addr)?;
            match view.iter().find(|n| n.id == replica_id) {
                Some(me) if me.serves_slots() => Ok(()),
                Some(me) => Err(format!("replica {replica} flags {:?}", me.flags)),
                None => Err(format!("replica {replica} does not list itself")),
            }
        })?;
        self.wait_ok(READY_TIMEOUT)?;
        Ok(replica)
    }

    /// Waits until every running node reports `cluster_state:ok` with all
    /// slots served, all running nodes agree which nodes are primaries (and
    /// those are running), and every running replica of a running primary
    /// has its replication link up.
    ///
    /// # Errors
    /// A timeout error describing the state last seen.
    pub fn wait_ok(&self, timeout: Duration) -> io::Result<()> {
        wait_for("cluster ready", timeout, || self.check_ok())
    }

    fn check_ok(&self) -> Result<(), String> {
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].pid().is_some())
            .collect();
        let mut agreed: Option<Primaries> = None;
        for &i in &live {
            let addr = self.nodes[i].addr();
            let info = admin::parse_info(&admin::query::<String>(
                &addr,
                redis::cmd("CLUSTER").arg("INFO"),
            )?);
            let state = info.get("cluster_state").map(String::as_str);
            let slots_ok = info.get("cluster_slots_ok").map(String::as_str);
            if state != Some("ok") || slots_ok != Some(&SLOTS.to_string()) {
                return Err(format!(
                    "node {i} ({addr}): cluster_state {state:?}, cluster_slots_ok {slots_ok:?}"
                ));
            }
            let view = nodes_of(&addr)?;
            let mut primaries: Primaries = view
                .iter()
                .filter(|n| n.serves_slots())
                .map(|n| (n.id.clone(), n.slots.clone()))
                .collect();
            primaries.sort();
            for (id, _) in &primaries {
                match self.index_of(id) {
                    Some(p) if live.contains(&p) => {}
                    _ => return Err(format!("node {i} sees {id} as a primary, but it is down")),
                }
            }
            match &agreed {
                None => agreed = Some(primaries),
                Some(first) if *first != primaries => {
                    return Err(format!(
                        "node {i} disagrees on the primaries: {primaries:?} vs {first:?}"
                    ))
                }
                Some(_) => {}
            }
            let me = view
                .iter()
                .find(|n| n.has_flag("myself"))
                .ok_or_else(|| format!("node {i} does not list itself"))?;
            let master_is_live = me
                .master
                .as_deref()
                .and_then(|m| self.index_of(m))
                .is_some_and(|m| live.contains(&m));
            if me.has_flag("slave") && master_is_live {
                let repl = admin::info(&addr, "replication")?;
                let link = repl.get("master_link_status").map(String::as_str);
                if link != Some("up") {
                    return Err(format!("replica {i} ({addr}): master_link_status {link:?}"));
                }
            }
        }
        Ok(())
    }

    /// True (`Ok`) once `replica` serves slots and `primary` replicates it,
    /// both in their own views.
    fn roles_swapped(&self, primary: usize, replica: usize) -> Result<(), String> {
        let replica_view = nodes_of(&self.nodes[replica].addr())?;
        let promoted = replica_view
            .iter()
            .any(|n| n.id == self.ids[replica] && n.serves_slots());
        let primary_view = nodes_of(&self.nodes[primary].addr())?;
        let demoted = primary_view
            .iter()
            .any(|n| n.id == self.ids[primary] && n.master.as_deref() == Some(&self.ids[replica]));
        if promoted && demoted {
            Ok(())
        } else {
            Err(format!(
                "replica {replica} promoted: {promoted}, primary {primary} demoted: {demoted}"
            ))
        }
    }

    fn replica_in(&self, view: &[NodeLine], primary: usize) -> Result<usize, String> {
        let primary_id = &self.ids[primary];
        view.iter()
            .filter(|n| n.master.as_deref() == Some(primary_id.as_str()) && !n.is_failing())
            .filter_map(|n| self.index_of(&n.id))
            .find(|&i| self.nodes[i].pid().is_some())
            .ok_or_else(|| format!("node {primary} has no running replica"))
    }

    /// Moves the hash slot of `key` to the primary at index `to`, as
    /// `redis-cli --cluster reshard` does, while clients keep using it:
    /// `CLUSTER SETSLOT <slot> IMPORTING` on the target, `MIGRATING` on the
    /// source, then the slot's keys in batches of `batch` with `MIGRATE`
    /// (pausing `pause` between batches, so clients meet the slot half
    /// moved and get `ASK` and `TRYAGAIN`), and finally `SETSLOT NODE` on
    /// every primary (clients then get `MOVED`). Answers how many keys
    /// moved. A no-op answering 0 when `to` already serves the slot.
    ///
    /// # Errors
    /// When `to` is not a primary, or a node refuses a step; the error
    /// names the step and the node.
    pub fn migrate_slot(
        &self,
        key: &str,
        to: usize,
        batch: usize,
        pause: Duration,
    ) -> io::Result<usize> {
        let from = self.node_for_key(key)?;
        if from == to {
            return Ok(0);
        }
        let primaries = self.primaries()?;
        if !primaries.contains(&to) {
            return Err(io::Error::other(format!("node {to} is not a primary")));
        }
        let source = self.nodes[from].addr();
        let target = self.nodes[to].addr();
        let slot: u16 = admin::query(&source, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
            .map_err(io::Error::other)?;
        let setslot = |addr: &str, state: &str, id: &str| -> io::Result<()> {
            admin::query::<String>(
                addr,
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg(state)
                    .arg(id),
            )
            .map(drop)
            .map_err(|e| io::Error::other(format!("SETSLOT {slot} {state}: {e}")))
        };
        setslot(&target, "IMPORTING", &self.ids[from])?;
        setslot(&source, "MIGRATING", &self.ids[to])?;
        let (host, port) = target
            .rsplit_once(':')
            .ok_or_else(|| io::Error::other(format!("bad address {target}")))?;
        let mut moved = 0;
        loop {
            let keys: Vec<Vec<u8>> = admin::query(
                &source,
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(batch.max(1)),
            )
            .map_err(io::Error::other)?;
            if keys.is_empty() {
                break;
            }
            let mut migrate = redis::cmd("MIGRATE");
            migrate
                .arg(host)
                .arg(port)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("REPLACE")
                .arg("KEYS")
                .arg(&keys);
            admin::query::<String>(&source, &migrate)
                .map_err(|e| io::Error::other(format!("MIGRATE of slot {slot}: {e}")))?;
            moved += keys.len();
            std::thread::sleep(pause);
        }
        // The target first, then the source, then everyone else (as
        // redis-cli does), so no node ever points the slot nowhere.
        setslot(&target, "NODE", &self.ids[to])?;
        setslot(&source, "NODE", &self.ids[to])?;
        for &p in primaries.iter().filter(|&&p| p != from && p != to) {
            setslot(&self.nodes[p].addr(), "NODE", &self.ids[to])?;
        }
        Ok(moved)
    }

    fn index_of(&self, id: &str) -> Option<usize> {
        self.ids.iter().position(|x| x == id)
    }

    fn live_addr(&self) -> Result<String, String> {
        self.nodes
            .iter()
            .find(|n| n.pid().is_some())
            .map(RedisServer::addr)
            .ok_or_else(|| "no cluster node is running".to_owned())
    }

    /// `CLUSTER NODES` as seen by the first running node.
    fn view(&self) -> Result<Vec<NodeLine>, String> {
        nodes_of(&self.live_addr()?)
    }
}

fn nodes_of(addr: &str) -> Result<Vec<NodeLine>, String> {
    let text: String = admin::query(addr, redis::cmd("CLUSTER").arg("NODES"))?;
    Ok(parse_nodes(&text))
}

/// Starts one cluster-enabled server. The bus port is chosen explicitly
/// (`cluster-port`) because the default, port + 10000, can exceed 65535 for
/// a port from the ephemeral range.
fn start_node(tls: Option<&crate::TlsFiles>) -> io::Result<RedisServer> {
    let mut last_err = None;
    // Redis 6.0 knows neither `cluster-port` (its bus is always the
    // cluster's port plus 10000: the TLS port under `tls-cluster`) nor
    // `cluster-allow-replica-migration` (6.2).
    let redis6 = crate::versions::server_id() == "redis6";
    for _ in 0..20 {
        let (port, tls_port) = (free_port()?, free_port()?);
        let bus = if redis6 {
            let base = if tls.is_some() { tls_port } else { port };
            match base.checked_add(10000) {
                Some(bus) if std::net::TcpListener::bind(("127.0.0.1", bus)).is_ok() => bus,
                _ => continue,
            }
        } else {
            free_port()?
        };
        if bus == port || bus == tls_port || port == tls_port {
            continue;
        }
        let mut builder = RedisServer::builder();
        if let Some(files) = tls {
            builder = builder
                .tls(files, false)
                .tls_port(tls_port)
                .config("tls-cluster", "yes")
                .config("tls-replication", "yes");
        }
        builder = builder
            .port(port)
            .config("cluster-enabled", "yes")
            .config("cluster-config-file", "nodes.conf")
            .config("cluster-node-timeout", NODE_TIMEOUT_MS.to_string())
            // Always allow a replica to take over, however long it was cut off.
            .config("cluster-replica-validity-factor", "0");
        if !redis6 {
            builder = builder
                .config("cluster-port", bus.to_string())
                // Keep the topology where the tests put it.
                .config("cluster-allow-replica-migration", "no");
        }
        let started = builder.start();
        match started {
            Ok(server) => return Ok(server),
            Err(e) => last_err = Some(e),
        }
    }
    Err(last_err.unwrap_or_else(|| io::Error::other("no free port pair for a cluster node")))
}

/// Runs `redis-cli --cluster create` over `nodes` with `replicas` per
/// primary, bounded in time.
/// Redis 6.0's `CLUSTER MEET` reaches a node's bus at the port it names
/// plus 10000, so a TLS cluster (`tls-cluster`, bus at the TLS port plus
/// 10000) is created through the TLS ports there.
fn create(
    nodes: &[RedisServer],
    replicas: usize,
    dir: &std::path::Path,
    tls: Option<&crate::TlsFiles>,
) -> io::Result<()> {
    let log_path = dir.join("create.log");
    let log = File::create(&log_path)?;
    let mut args = vec!["--cluster".to_owned(), "create".to_owned()];
    match tls {
        Some(files) if crate::versions::server_id() == "redis6" => {
            args.extend(
                nodes
                    .iter()
                    .filter_map(|n| n.tls_port().map(|p| format!("127.0.0.1:{p}"))),
            );
            args.extend([
                "--tls".to_owned(),
                "--cacert".to_owned(),
                files.ca_cert().display().to_string(),
            ]);
        }
        _ => args.extend(nodes.iter().map(RedisServer::addr)),
    }
    args.extend([
        "--cluster-replicas".to_owned(),
        replicas.to_string(),
        "--cluster-yes".to_owned(),
    ]);
    let mut child = spawn_guarded(&crate::versions::binary("redis-cli")?, &args, |cmd| {
        cmd.stdin(Stdio::null())
            .stdout(
                log.try_clone()
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::null()),
            )
            .stderr(Stdio::from(log));
    })
    .map_err(|e| io::Error::new(e.kind(), format!("cannot run redis-cli: {e}")))?;
    let output = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let deadline = Instant::now() + CREATE_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait()? {
            if status.success() {
                return Ok(());
            }
            return Err(io::Error::other(format!(
                "redis-cli --cluster create failed with {status}:\n{}",
                output()
            )));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "redis-cli --cluster create did not finish in {CREATE_TIMEOUT:?}:\n{}",
                    output()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        // Kill all nodes at once rather than one by one as fields drop, so no
        // survivor spends its last moments trying to fail over.
        for node in &mut self.nodes {
            node.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cluster_nodes() {
        let text = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 [5461->-b2]
b2 127.0.0.1:7001@17001 slave a1 0 1 1 connected
c3 127.0.0.1:7002@17002 master,fail - 0 1 2 disconnected 5461 5462-10922
";
        let nodes = parse_nodes(text);
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].slots, vec![(0, 5460)]);
        assert!(nodes[0].has_flag("myself") && nodes[0].serves_slots());
        assert_eq!(nodes[1].master.as_deref(), Some("a1"));
        assert!(!nodes[1].serves_slots());
        assert!(nodes[2].is_failing());
        assert_eq!(nodes[2].slots, vec![(5461, 5461), (5462, 10922)]);
    }
}
