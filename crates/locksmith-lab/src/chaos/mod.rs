//! `locksmith-lab chaos`: several worker processes loop acquire -> fenced
//! writes -> release on a few shared names while a nemesis injects
//! faults, then a checker verifies the recorded history (see
//! [`checker`] for the rules) and the run's figures are printed and
//! written as JSON.
//!
//! The names are locks, fair locks, read-write locks (reads, writes and
//! downgrades), counting semaphores, permit semaphores, MultiLocks over
//! two locks or count-down latches, one kind for all or each name its own
//! (`--kind mixed`), or Redlock on five servers (`--topology redlock`);
//! see [`worker::Kind`]. `--broken` runs each kind deliberately broken, to
//! show the checker catches it.
//!
//! Faults (each at least once, in turn, then at random):
//! - `kill`: SIGKILL of a worker holding a lock (a fresh worker takes its
//!   place);
//! - `pause`: SIGSTOP of a holder for longer than its lease, then SIGCONT;
//! - `restart`: the lock server restarted without persistence (its data is
//!   gone);
//! - `black-hole`: one worker's connection forwards nothing for a while;
//! - `latency`: one worker's connection delays every packet;
//! - `cut`: the reply to one worker's next script call is cut: the server
//!   ran it, the connection is reset before the answer arrives (what makes
//!   a client that resends the call apply it twice);
//! - `failover` (with `--topology sentinel` or `cluster`): a primary is
//!   killed and Sentinel (or the cluster) promotes its replica; the killed
//!   node comes back as a replica;
//! - `node-pause-minority`, `node-pause-majority`, `node-kill-minority`,
//!   `node-kill-majority` (with `--topology redlock`): 2 or 3 of the 5
//!   servers paused, or killed and restarted empty after 1.5 leases.
//!
//! The fenced stores live on a separate server (the protected resource),
//! which no fault touches. Everything is bounded: the run stops by itself
//! after `--duration`, and every wait has a limit.

pub(crate) mod checker;
pub(crate) mod history;
pub(crate) mod worker;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use locksmith_testkit::{FaultMode, FaultProxy, RedisCluster, RedisServer, SentinelGroup};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rand::seq::{IndexedRandom, SliceRandom};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::exit::{self, CliError};
use history::{now, Event};

/// Where the lock server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Topology {
    /// One server (faults: kill, pause, restart, black-hole, latency).
    Single,
    /// A Sentinel group: primary, 2 replicas, 3 Sentinels (faults: kill,
    /// pause, failover).
    Sentinel,
    /// A 3-primary cluster, a replica each (faults: kill, pause, failover:
    /// a primary killed, its replica promoted by the cluster).
    Cluster,
    /// Five independent servers for Redlock (`--kind redlock`; faults:
    /// kill, pause, and pauses and kills of a minority or a majority of
    /// the servers, a killed server restarted empty after 1.5 leases).
    Redlock,
}

/// Arguments of `locksmith-lab chaos`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ChaosArgs {
    /// How long the workers run.
    #[arg(long, value_name = "DUR", value_parser = crate::duration::parse_nonzero, default_value = "60s")]
    duration: Duration,
    /// Worker processes.
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(2..=32))]
    workers: u32,
    /// Lock names the workers share.
    #[arg(long, value_name = "N", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    names: u32,
    /// Lock lease (watchdog-renewed).
    #[arg(long, value_name = "DUR", value_parser = crate::duration::parse_nonzero, default_value = "1s")]
    lease: Duration,
    /// Where the lock server runs.
    #[arg(long, value_enum, default_value_t = Topology::Single)]
    topology: Topology,
    /// Only these faults (comma-separated); default: all of the topology's.
    #[arg(long, value_delimiter = ',', value_name = "KIND,...")]
    faults: Vec<String>,
    /// At most this many faults.
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_faults: u32,
    /// Write the figures and violations here as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the merged history here (JSON lines).
    #[arg(long, value_name = "FILE")]
    history: Option<PathBuf>,
    /// Run a deliberately broken lock (releases delete the lock whoever
    /// holds it: no owner check) to show the checker catches it.
    #[arg(long)]
    broken_release: bool,
    /// Run a deliberately broken primitive of each kind (locks, MultiLocks
    /// and Redlock give the lock back at the grant and go on as holders;
    /// the fair lock's names are taken without its queue; read-write
    /// writers take read holds; semaphores give permits back twice; a latch
    /// count-down lands twice) to show the checker catches it.
    #[arg(long)]
    broken: bool,
    /// Which primitive the workers take (`mixed`: each name one of lock,
    /// fair, read-write, semaphore, permit, multi, latch, by position;
    /// `redlock` needs `--topology redlock`).
    #[arg(long, value_enum, default_value_t = worker::Kind::Lock)]
    kind: worker::Kind,
    /// Permits of each semaphore name.
    #[arg(long, value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u64).range(1..=16))]
    permits: u64,
}

const SINGLE_FAULTS: &[&str] = &["kill", "pause", "restart", "black-hole", "latency", "cut"];
/// Behind Sentinel the workers reach the primary directly (it moves on a
/// failover), so the proxies' network faults do not apply.
const SENTINEL_FAULTS: &[&str] = &["kill", "pause", "failover"];
/// On a cluster the workers reach every primary directly, likewise.
const CLUSTER_FAULTS: &[&str] = &["kill", "pause", "failover"];
/// Redlock's own faults hit its servers; a killed one comes back empty
/// after 1.5 leases (the delayed restart the algorithm needs).
const REDLOCK_FAULTS: &[&str] = &[
    "kill",
    "pause",
    "node-pause-minority",
    "node-pause-majority",
    "node-kill-minority",
    "node-kill-majority",
];
/// Servers of the Redlock topology.
const REDLOCK_NODES: usize = 5;

/// The lock deployment under test.
enum Deployment {
    Single(RedisServer),
    Sentinel(Box<SentinelGroup>),
    Cluster(Box<RedisCluster>),
    Redlock(Vec<RedisServer>),
}

impl Deployment {
    /// The address workers' proxies forward to, and the URL form workers
    /// use (with the proxy address substituted).
    fn target(&self) -> String {
        match self {
            Deployment::Single(s) => s.addr(),
            Deployment::Sentinel(g) => g.sentinel_addrs()[0].clone(),
            Deployment::Cluster(c) => c.addrs()[0].clone(),
            Deployment::Redlock(nodes) => nodes[0].addr(),
        }
    }

    /// The URL the nemesis itself uses (no proxy).
    fn direct_url(&self) -> String {
        match self {
            Deployment::Single(s) => s.url(),
            Deployment::Sentinel(g) => format!(
                "redis+sentinel://{}/{}",
                g.sentinel_addrs().join(","),
                g.master_name()
            ),
            Deployment::Cluster(c) => format!("redis+cluster://{}", c.addrs().join(",")),
            Deployment::Redlock(nodes) => nodes[0].url(),
        }
    }

    /// The Redlock nodes' URLs (none for the other topologies).
    fn redlock_urls(&self) -> Vec<String> {
        match self {
            Deployment::Redlock(nodes) => nodes.iter().map(RedisServer::url).collect(),
            _ => Vec::new(),
        }
    }

    fn url_via(&self, proxy: &str) -> String {
        match self {
            Deployment::Single(_) => format!("redis://{proxy}"),
            // The proxy stands in front of one Sentinel; the primary is
            // reached directly.
            Deployment::Sentinel(g) => format!(
                "redis+sentinel://{proxy},{}/{}",
                g.sentinel_addrs()[1..].join(","),
                g.master_name()
            ),
            // Every node is a seed; the proxy is not used (nodes are
            // reached at the addresses the cluster announces).
            Deployment::Cluster(c) => format!("redis+cluster://{}", c.addrs().join(",")),
            // Redlock workers reach the nodes directly; their lock client
            // (unused for locks) goes to the first node.
            Deployment::Redlock(nodes) => nodes[0].url(),
        }
    }
}

/// One worker slot: its proxy and its current process.
struct Slot {
    index: u32,
    generation: u32,
    proxy: FaultProxy,
    child: Option<Child>,
    name: String,
}

/// Runs the chaos test; exit 0 with no violations, 1 with some.
///
/// # Errors
/// Bad options, or servers and workers that cannot be started.
pub(crate) async fn run(args: ChaosArgs) -> Result<u8, CliError> {
    let available = match args.topology {
        Topology::Single => SINGLE_FAULTS,
        Topology::Sentinel => SENTINEL_FAULTS,
        Topology::Cluster => CLUSTER_FAULTS,
        Topology::Redlock => REDLOCK_FAULTS,
    };
    if (args.topology == Topology::Redlock) != (args.kind == worker::Kind::Redlock) {
        return Err(CliError::Usage(
            "--kind redlock and --topology redlock go together".into(),
        ));
    }
    let faults: Vec<&str> = if args.faults.is_empty() {
        available.to_vec()
    } else {
        let mut chosen = Vec::new();
        for f in &args.faults {
            match available.iter().find(|a| **a == f.trim()) {
                Some(a) => chosen.push(*a),
                None => {
                    return Err(CliError::Usage(format!(
                        "unknown fault {f:?} for {:?}; choose from {}",
                        args.topology,
                        available.join(", ")
                    )))
                }
            }
        }
        chosen
    };
    let dir = tempfile_dir()?;
    eprintln!("chaos: starting the servers...");
    let topology = args.topology;
    let (mut deployment, resource) = tokio::task::spawn_blocking(move || {
        let deployment = match topology {
            Topology::Single => Deployment::Single(RedisServer::start()?),
            Topology::Sentinel => Deployment::Sentinel(Box::new(SentinelGroup::start()?)),
            Topology::Cluster => Deployment::Cluster(Box::new(RedisCluster::start()?)),
            Topology::Redlock => Deployment::Redlock(
                (0..REDLOCK_NODES)
                    .map(|_| RedisServer::start())
                    .collect::<std::io::Result<_>>()?,
            ),
        };
        Ok::<_, std::io::Error>((deployment, RedisServer::start()?))
    })
    .await
    .map_err(|e| CliError::Other(e.to_string()))?
    .map_err(|e| CliError::Other(format!("cannot start the servers: {e}")))?;
    let names: Vec<String> = (0..args.names).map(|i| format!("chaos:{i}")).collect();
    let exe = std::env::current_exe().map_err(|e| CliError::Other(e.to_string()))?;
    // The nemesis's own client: gives back a killed holder's semaphore
    // permits, and reads every semaphore's permits after the run.
    let nemesis = locksmith::Client::builder(deployment.direct_url())
        .command_timeout(Duration::from_secs(2))
        .build()
        .await
        .map_err(|e| CliError::Other(format!("cannot reach the lock server: {e}")))?;
    let kinds: Vec<worker::Kind> = (0..names.len()).map(|i| args.kind.of_name(i)).collect();

    let mut slots = Vec::new();
    for index in 0..args.workers {
        let proxy = FaultProxy::start(&deployment.target())
            .map_err(|e| CliError::Other(format!("cannot start a fault proxy: {e}")))?;
        slots.push(Slot {
            index,
            generation: 0,
            proxy,
            child: None,
            name: String::new(),
        });
    }
    let started = Instant::now();
    let end = started + args.duration;
    let spawn = |slot: &mut Slot, deployment: &Deployment| -> Result<(), CliError> {
        slot.name = format!("w{}.{}", slot.index, slot.generation);
        let left = end.saturating_duration_since(Instant::now());
        let child = Command::new(&exe)
            .arg("chaos-worker")
            .arg("--redis")
            .arg(deployment.url_via(&slot.proxy.addr()))
            .arg("--resource")
            .arg(resource.url())
            .arg("--names")
            .arg(names.join(","))
            .arg("--lease")
            .arg(format!("{}ms", args.lease.as_millis()))
            .arg("--duration")
            .arg(format!("{}ms", left.as_millis().max(1)))
            .arg("--name")
            .arg(&slot.name)
            .arg("--out")
            .arg(dir.join(format!("{}.jsonl", slot.name)))
            .args(args.broken_release.then_some("--broken-release"))
            .args(args.broken.then_some("--broken"))
            .arg("--permits")
            .arg(args.permits.to_string())
            .args(
                Some(deployment.redlock_urls())
                    .filter(|urls| !urls.is_empty())
                    .map(|urls| format!("--redlock={}", urls.join(","))),
            )
            .arg("--kind")
            .arg(
                clap::ValueEnum::to_possible_value(&args.kind)
                    .map(|v| v.get_name().to_owned())
                    .unwrap_or_else(|| "lock".into()),
            )
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| CliError::Other(format!("cannot start a worker: {e}")))?;
        slot.child = Some(child);
        Ok(())
    };
    let mut events: Vec<Event> = Vec::new();
    for (name, kind) in names.iter().zip(&kinds) {
        let (kind, capacity) = kind.resource(args.permits);
        events.push(Event::Resource {
            t: now(),
            lock: name.clone(),
            kind: kind.into(),
            capacity,
        });
    }
    seed(&nemesis, &names, &kinds, args.permits, &mut events).await;
    for slot in &mut slots {
        spawn(slot, &deployment)?;
        events.push(Event::Spawned {
            t: now(),
            p: slot.name.clone(),
        });
    }
    let mut round = 0usize;
    // When the last restart or failover began: permits granted before it
    // belong to a count that may be gone.
    let mut last_wipe = 0u64;
    // Let the workers get going before the first fault.
    tokio::time::sleep(Duration::from_secs(2).min(args.duration / 4)).await;
    // A fault and its recovery window must fit before the end.
    let quiet = args.lease + Duration::from_millis(1500);
    loop {
        let kind = if round < faults.len() {
            faults[round]
        } else {
            faults.choose(&mut rand::rng()).copied().unwrap_or("kill")
        };
        // Room for the fault itself and the recovery window after it.
        let needs = if kind == "failover" {
            Duration::from_secs(45)
        } else {
            args.lease * 2 + Duration::from_secs(1)
        };
        if Instant::now() + needs + quiet > end {
            break;
        }
        round += 1;
        if matches!(kind, "restart" | "failover") {
            last_wipe = now();
        }
        let fault = inject(
            kind,
            &mut slots,
            &mut deployment,
            &names,
            &dir,
            args.lease,
            &mut events,
        )
        .await;
        if matches!(kind, "restart" | "failover") {
            // As an operator would after data loss: the semaphores get
            // their permits again (only where the count is gone).
            seed(&nemesis, &names, &kinds, args.permits, &mut events).await;
        }
        match fault {
            Ok(Some(respawn)) => {
                // A killed worker's slot gets a fresh process.
                let slot = &mut slots[respawn];
                let killed = slot.name.clone();
                let held = (&names[..], &kinds[..], last_wipe);
                reclaim(&nemesis, &killed, held, &dir, &mut events).await;
                slot.generation += 1;
                spawn(slot, &deployment)?;
                events.push(Event::Spawned {
                    t: now(),
                    p: slot.name.clone(),
                });
                events.push(Event::FaultHeal {
                    t: now(),
                    kind: kind.into(),
                    target: killed,
                });
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("chaos: {kind} fault failed: {e}");
                events.push(Event::FaultFailed {
                    t: now(),
                    kind: kind.into(),
                    error: e,
                });
            }
        }
        if round >= args.max_faults as usize {
            break;
        }
        let pause = quiet + Duration::from_millis(rand::random_range(0..1000));
        if Instant::now() + pause >= end {
            break;
        }
        tokio::time::sleep(pause).await;
    }
    // The workers stop by themselves at the end; bound the wait (all of
    // them together).
    let limit = end.max(Instant::now()) + Duration::from_secs(15);
    for slot in &mut slots {
        if let Some(child) = slot.child.as_mut() {
            let status = match tokio::time::timeout_at(limit, child.wait()).await {
                Ok(Ok(status)) if status.success() => None,
                Ok(Ok(status)) => Some(status.to_string()),
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => {
                    let _ = child.kill().await;
                    Some("still running 15 s after the end; killed".into())
                }
            };
            if let Some(status) = status {
                events.push(Event::WorkerFailed {
                    t: now(),
                    p: slot.name.clone(),
                    status,
                });
            }
        }
    }
    // Every semaphore's permits, once every lease is over.
    if kinds
        .iter()
        .any(|k| matches!(k, worker::Kind::Semaphore | worker::Kind::Permit))
    {
        tokio::time::sleep(args.lease + Duration::from_millis(500)).await;
        for (name, kind) in names.iter().zip(&kinds) {
            let available = match kind {
                worker::Kind::Semaphore => {
                    retried(|| async { nemesis.semaphore(name)?.available().await }).await
                }
                worker::Kind::Permit => {
                    retried(|| async { nemesis.expirable_semaphore(name)?.available().await }).await
                }
                _ => continue,
            };
            match available {
                Ok(available) => events.push(Event::Permits {
                    t: now(),
                    lock: name.clone(),
                    available,
                }),
                Err(e) => events.push(Event::FaultFailed {
                    t: now(),
                    kind: "permits".into(),
                    error: format!("cannot read the permits of {name}: {e}"),
                }),
            }
        }
    }
    // Merge every worker's history with the nemesis's.
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| CliError::Other(e.to_string()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    for file in files {
        events.extend(history::read(&file).map_err(|e| CliError::Other(e.to_string()))?);
    }
    events.sort_by_key(Event::t);
    if let Some(path) = &args.history {
        let mut text = String::new();
        for e in &events {
            text.push_str(&serde_json::to_string(e).unwrap_or_default());
            text.push('\n');
        }
        std::fs::write(path, text).map_err(|e| CliError::Other(e.to_string()))?;
    }
    let report = checker::check(&events, args.lease);
    print_report(&report, &args, started.elapsed());
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "duration_s": started.elapsed().as_secs_f64(),
            "workers": args.workers,
            "names": args.names,
            "lease_ms": args.lease.as_millis() as u64,
            "topology": format!("{:?}", args.topology).to_lowercase(),
            "broken_release": args.broken_release,
            "broken": args.broken,
            "permits": args.permits,
            "kind": args.kind,
            "report": report,
        });
        std::fs::write(
            path,
            serde_json::to_string_pretty(&json).unwrap_or_default(),
        )
        .map_err(|e| CliError::Other(e.to_string()))?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = nemesis.close_within(Duration::from_secs(2)).await;
    drop((deployment, resource));
    Ok(if report.violations.is_empty() {
        0
    } else {
        exit::CHECK_FAILED
    })
}

/// A private directory for the workers' history files.
fn tempfile_dir() -> Result<PathBuf, CliError> {
    let dir =
        std::env::temp_dir().join(format!("locksmith-chaos-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).map_err(|e| CliError::Other(e.to_string()))?;
    Ok(dir)
}

/// The worker slots whose current process holds a lock now (by the owner
/// fields on the lock server, matched to each worker's client id); with
/// `leased_only`, only holds the server keeps an owner for (locks, fair
/// and read-write locks: a pause past their lease must end in a loss the
/// holder notices), not a counting semaphore's permits, which have no
/// lease to lose.
async fn holders(
    slots: &[Slot],
    deployment: &Deployment,
    names: &[String],
    dir: &std::path::Path,
    leased_only: bool,
) -> Vec<usize> {
    let mut owners = Vec::new();
    for name in names {
        let url = match deployment {
            Deployment::Single(s) => s.url(),
            Deployment::Sentinel(g) => g.primary_url(),
            Deployment::Cluster(c) => match c.node_for_key(name) {
                Ok(i) => c.nodes()[i].url(),
                Err(_) => continue,
            },
            // Redlock's owners are not the client's: the history tells.
            Deployment::Redlock(_) => continue,
        };
        let Ok(client) = redis::Client::open(url) else {
            continue;
        };
        let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
            continue;
        };
        let fields: Vec<String> = redis::cmd("HKEYS")
            .arg(name)
            .query_async(&mut conn)
            .await
            .unwrap_or_default();
        owners.extend(fields);
    }
    let mut found = Vec::new();
    for (i, slot) in slots.iter().enumerate() {
        let events = history::read(&dir.join(format!("{}.jsonl", slot.name))).unwrap_or_default();
        let client = events.iter().find_map(|e| match e {
            Event::Start { client, .. } => Some(client.clone()),
            _ => None,
        });
        let on_server = client.is_some_and(|c| owners.iter().any(|o| o.starts_with(&c)));
        // Semaphores keep no owner on the server: the worker's own record
        // (granted, release not sent) tells.
        if on_server || (!leased_only && holds_by_history(&events)) {
            found.push(i);
        }
    }
    found
}

/// Whether a worker's history ends inside a hold: a grant after which no
/// release was sent.
fn holds_by_history(events: &[Event]) -> bool {
    let mut open = 0i64;
    for event in events {
        match event {
            Event::AcquireOk { .. } => open += 1,
            Event::ReleaseInvoke { .. } => open -= 1,
            _ => {}
        }
    }
    open > 0
}

/// Runs `call` up to three times, 200 ms apart, while it fails with a
/// connection error (the nemesis's connection breaks with every restart
/// and failover). Only for calls that may be repeated.
async fn retried<T, F, Fut>(call: F) -> locksmith::Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = locksmith::Result<T>>,
{
    let mut tries = 0;
    loop {
        tries += 1;
        match call().await {
            Err(e) if tries < 3 && e.kind() == locksmith::ErrorKind::Connection => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            result => return result,
        }
    }
}

/// Sets every semaphore name's permits where the count is gone (after a
/// restart or failover that may have lost it).
async fn seed(
    nemesis: &locksmith::Client,
    names: &[String],
    kinds: &[worker::Kind],
    permits: u64,
    events: &mut Vec<Event>,
) {
    for (name, kind) in names.iter().zip(kinds) {
        let set = match kind {
            worker::Kind::Semaphore => {
                retried(|| async { nemesis.semaphore(name)?.try_set_permits(permits).await }).await
            }
            worker::Kind::Permit => {
                retried(|| async {
                    nemesis
                        .expirable_semaphore(name)?
                        .try_set_permits(permits)
                        .await
                })
                .await
            }
            _ => continue,
        };
        if let Err(e) = set {
            events.push(Event::FaultFailed {
                t: now(),
                kind: "seed".into(),
                error: format!("cannot set the permits of {name}: {e}"),
            });
        }
    }
}

/// Gives back the counting-semaphore permits the killed process `p` held
/// (granted, no release sent: a counting semaphore has no lease to end
/// them), as an operator would, and records it. A hold whose grant or
/// release was in flight at the kill is left alone (its outcome is
/// unknown), and so is one granted before the last restart or failover
/// began (`since`).
async fn reclaim(
    nemesis: &locksmith::Client,
    p: &str,
    (names, kinds, since): (&[String], &[worker::Kind], u64),
    dir: &std::path::Path,
    events: &mut Vec<Event>,
) {
    let history = history::read(&dir.join(format!("{p}.jsonl"))).unwrap_or_default();
    // (lock, token) -> permits, for holds granted and not released.
    let mut open: Vec<(String, u64, u64)> = Vec::new();
    for event in &history {
        match event {
            // A grant before the last restart or failover may be gone with
            // the count: giving it back would add permits.
            Event::AcquireOk {
                t,
                lock,
                token,
                permits,
                ..
            } if *t >= since => open.push((lock.clone(), *token, *permits)),
            Event::ReleaseInvoke { lock, token, .. } => {
                open.retain(|(l, t, _)| !(l == lock && t == token));
            }
            _ => {}
        }
    }
    for (lock, _, permits) in open {
        let semaphore = names
            .iter()
            .position(|n| *n == lock)
            .is_some_and(|i| kinds[i] == worker::Kind::Semaphore);
        if !semaphore {
            continue;
        }
        // Not resent: giving permits back twice would add permits.
        let given = match nemesis.semaphore(&lock) {
            Ok(s) => s.release(permits).await,
            Err(e) => Err(e),
        };
        match given {
            Ok(()) => events.push(Event::Reclaimed {
                t: now(),
                lock,
                permits,
            }),
            Err(e) => events.push(Event::FaultFailed {
                t: now(),
                kind: "reclaim".into(),
                error: format!("cannot give back {permits} permit(s) of {lock}: {e}"),
            }),
        }
    }
}

/// Injects one fault of `kind` and waits until it healed. Answers the slot
/// to respawn for a kill (its heal is recorded by the caller, after the
/// respawn).
async fn inject(
    kind: &str,
    slots: &mut [Slot],
    deployment: &mut Deployment,
    names: &[String],
    dir: &std::path::Path,
    lease: Duration,
    events: &mut Vec<Event>,
) -> Result<Option<usize>, String> {
    match kind {
        "kill" | "pause" => {
            // Freeze a worker, then look whether it holds a lock (frozen,
            // it cannot release meanwhile); try others a few times.
            let mut chosen = None;
            for _ in 0..20 {
                let i = rand::random_range(0..slots.len());
                let Some(pid) = slots[i].child.as_ref().and_then(Child::id) else {
                    continue;
                };
                let pid = Pid::from_raw(i32::try_from(pid).map_err(|e| e.to_string())?);
                let frozen = now();
                kill(pid, Signal::SIGSTOP).map_err(|e| e.to_string())?;
                // A pause is meant to outlast a lease: only a leased hold
                // counts as caught (the run checks its holder noticed).
                let held = holders(slots, deployment, names, dir, kind == "pause")
                    .await
                    .contains(&i);
                if held {
                    chosen = Some((i, pid, true));
                    break;
                }
                kill(pid, Signal::SIGCONT).map_err(|e| e.to_string())?;
                events.push(Event::Probe {
                    t: frozen,
                    p: slots[i].name.clone(),
                    until: now(),
                });
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // Nobody caught holding: hit one anyway (recorded as such).
            let (i, pid, holder) = match chosen {
                Some(c) => c,
                None => {
                    let i = rand::random_range(0..slots.len());
                    let pid = slots[i]
                        .child
                        .as_ref()
                        .and_then(Child::id)
                        .ok_or("worker has no process")?;
                    let pid = Pid::from_raw(i32::try_from(pid).map_err(|e| e.to_string())?);
                    kill(pid, Signal::SIGSTOP).map_err(|e| e.to_string())?;
                    (i, pid, false)
                }
            };
            let slot = &mut slots[i];
            events.push(Event::FaultStart {
                t: now(),
                kind: kind.into(),
                target: slot.name.clone(),
                holder,
            });
            if kind == "kill" {
                kill(pid, Signal::SIGKILL).map_err(|e| e.to_string())?;
                events.push(Event::Killed {
                    t: now(),
                    p: slot.name.clone(),
                });
                if let Some(mut child) = slot.child.take() {
                    let _ = child.wait().await;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                return Ok(Some(i));
            }
            tokio::time::sleep(lease + lease / 2).await;
            kill(pid, Signal::SIGCONT).map_err(|e| e.to_string())?;
            events.push(Event::FaultHeal {
                t: now(),
                kind: kind.into(),
                target: slot.name.clone(),
            });
        }
        "black-hole" | "latency" => {
            let i = rand::random_range(0..slots.len());
            let slot = &slots[i];
            events.push(Event::FaultStart {
                t: now(),
                kind: kind.into(),
                target: slot.name.clone(),
                holder: false,
            });
            slot.proxy.set_mode(if kind == "black-hole" {
                FaultMode::BlackHole
            } else {
                FaultMode::Latency(Duration::from_millis(100))
            });
            tokio::time::sleep(lease + lease / 2).await;
            slot.proxy.set_mode(FaultMode::Pass);
            events.push(Event::FaultHeal {
                t: now(),
                kind: kind.into(),
                target: slot.name.clone(),
            });
        }
        "node-pause-minority"
        | "node-pause-majority"
        | "node-kill-minority"
        | "node-kill-majority" => {
            let Deployment::Redlock(nodes) = deployment else {
                return Err(format!("{kind} needs the redlock topology"));
            };
            let count = if kind.ends_with("majority") {
                REDLOCK_NODES / 2 + 1
            } else {
                REDLOCK_NODES / 2
            };
            let mut hit: Vec<usize> = (0..REDLOCK_NODES).collect();
            hit.shuffle(&mut rand::rng());
            hit.truncate(count);
            let target = format!("nodes {hit:?}");
            events.push(Event::FaultStart {
                t: now(),
                kind: kind.into(),
                target: target.clone(),
                holder: false,
            });
            let kills = kind.starts_with("node-kill");
            let majority = kind.ends_with("majority");
            for &i in &hit {
                if kills {
                    nodes[i].kill();
                } else {
                    nodes[i].pause().map_err(|e| e.to_string())?;
                }
            }
            if majority {
                events.push(Event::Quorum {
                    t: now(),
                    lost: true,
                });
            }
            tokio::time::sleep(lease + lease / 2).await;
            if majority {
                events.push(Event::Quorum {
                    t: now(),
                    lost: false,
                });
            }
            // Every server back, whatever fails: a run with a server left
            // down proves nothing more, and its windows must stay closed.
            let mut failed = Vec::new();
            for &i in &hit {
                let back = if kills {
                    tokio::task::block_in_place(|| nodes[i].restart())
                } else {
                    nodes[i].resume()
                };
                if let Err(e) = back {
                    failed.push(format!("node {i}: {e}"));
                }
            }
            events.push(Event::FaultHeal {
                t: now(),
                kind: kind.into(),
                target,
            });
            if !failed.is_empty() {
                return Err(failed.join("; "));
            }
        }
        "cut" => {
            // A worker that sends no script call meanwhile (waiting) gets
            // no cut: up to three workers are tried.
            let mut cut = false;
            for _ in 0..3 {
                let i = rand::random_range(0..slots.len());
                let slot = &slots[i];
                events.push(Event::FaultStart {
                    t: now(),
                    kind: kind.into(),
                    target: slot.name.clone(),
                    holder: false,
                });
                let before = slot.proxy.cuts();
                slot.proxy.cut_reply_after(b"EVALSHA");
                let until = Instant::now() + lease / 2;
                while slot.proxy.cuts() == before && Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                slot.proxy.disarm_cut();
                cut = slot.proxy.cuts() > before;
                events.push(Event::FaultHeal {
                    t: now(),
                    kind: kind.into(),
                    target: slot.name.clone(),
                });
                if cut {
                    break;
                }
            }
            if !cut {
                return Err("no worker sent a script call to cut".into());
            }
        }
        "restart" => {
            let Deployment::Single(server) = deployment else {
                return Err("restart needs the single topology".into());
            };
            events.push(Event::FaultStart {
                t: now(),
                kind: kind.into(),
                target: "lock server".into(),
                holder: false,
            });
            tokio::task::block_in_place(|| server.restart()).map_err(|e| e.to_string())?;
            events.push(Event::FaultHeal {
                t: now(),
                kind: kind.into(),
                target: "lock server".into(),
            });
        }
        "failover" if matches!(deployment, Deployment::Cluster(_)) => {
            let Deployment::Cluster(cluster) = deployment else {
                return Err("unreachable".into());
            };
            let primaries = cluster.primaries().map_err(|e| e.to_string())?;
            let primary = primaries
                .choose(&mut rand::rng())
                .copied()
                .ok_or("no primary")?;
            events.push(Event::FaultStart {
                t: now(),
                kind: kind.into(),
                target: format!("primary {primary}"),
                holder: false,
            });
            tokio::task::block_in_place(|| {
                cluster.kill_primary(primary)?;
                // The killed node comes back as the new primary's replica;
                // healed once the cluster is ok with every replica linked
                // (grants wait for a replica's acknowledgement).
                cluster.node(primary).restart()?;
                cluster.wait_ok(Duration::from_secs(60))
            })
            .map_err(|e| e.to_string())?;
            events.push(Event::FaultHeal {
                t: now(),
                kind: kind.into(),
                target: format!("primary {primary}"),
            });
        }
        "failover" => {
            let Deployment::Sentinel(group) = deployment else {
                return Err("failover needs the sentinel or cluster topology".into());
            };
            events.push(Event::FaultStart {
                t: now(),
                kind: kind.into(),
                target: "primary".into(),
                holder: false,
            });
            tokio::task::block_in_place(|| {
                let old = group.primary_index();
                group.kill_primary();
                group.wait_for_failover(Duration::from_secs(30))?;
                // The old primary comes back empty; the Sentinels make it a
                // replica of the new one, so the next failover has one.
                group.node(old).restart()?;
                // Healed once the replicas are in sync again: until then a
                // grant cannot reach the replica acknowledgement the
                // clients ask for (WAIT), and is refused as NotReplicated.
                // The Sentinels reconfigure the replicas during the
                // failover and the restarted node some 8-20 s after it is
                // back; on a loaded machine they have left a node a
                // primary, or a replica of an old primary, for over 60 s.
                // After 30 s the nemesis does it as an operator would.
                // Their choice wins: on a loaded machine they may have
                // failed over once more meanwhile, and a repair towards an
                // older primary would leave them naming a replica.
                if let Err(e) = group.wait_replicas_in_sync(Duration::from_secs(30)) {
                    if group.follow_sentinels()? {
                        eprintln!(
                            "chaos: the Sentinels moved the primary to node {} meanwhile",
                            group.primary_index()
                        );
                    }
                    let repaired = group.repair_replicas()?;
                    eprintln!("chaos: {e}; made nodes {repaired:?} replicas of the primary with REPLICAOF");
                    group.wait_replicas_in_sync(Duration::from_secs(30))?;
                }
                Ok::<_, std::io::Error>(())
            })
            .map_err(|e| e.to_string())?;
            events.push(Event::FaultHeal {
                t: now(),
                kind: kind.into(),
                target: "primary".into(),
            });
        }
        other => return Err(format!("unknown fault {other}")),
    }
    Ok(None)
}

fn print_report(report: &checker::Report, args: &ChaosArgs, elapsed: Duration) {
    println!(
        "locksmith-lab chaos: {:?} topology, {:?} locks, {} workers, {} names, lease {:?}, {:.0} s{}",
        args.topology,
        args.kind,
        args.workers,
        args.names,
        args.lease,
        elapsed.as_secs_f64(),
        if args.broken_release {
            ", BROKEN release (no owner check)"
        } else if args.broken {
            ", BROKEN primitives"
        } else {
            ""
        }
    );
    println!(
        "  events {}  acquires {}  grants {}  indeterminate acquires {}",
        report.events, report.acquires, report.grants, report.indeterminate_acquires
    );
    println!(
        "  fenced writes: accepted {}  refused stale {}  indeterminate {}",
        report.writes_accepted, report.writes_stale, report.writes_indeterminate
    );
    println!(
        "  losses noticed {} (by the lost signal {})  releases answered not-held {}",
        report.losses_noticed, report.losses_signalled, report.releases_not_held
    );
    let faults: Vec<String> = report
        .faults
        .iter()
        .map(|(k, n)| match report.longest_fault_ms.get(k) {
            Some(ms) => format!("{k} {n} (longest {ms} ms)"),
            None => format!("{k} {n}"),
        })
        .collect();
    println!(
        "  faults: {}",
        if faults.is_empty() {
            "none".into()
        } else {
            faults.join(", ")
        }
    );
    println!(
        "  kills and pauses that caught a holder: {}",
        report.holder_faults
    );
    println!(
        "  longest recovery after a fault: {} ms (limit: lease + 1 s; {} recoveries checked, {} skipped: another fault or the end inside the window)",
        report.longest_recovery_ms, report.recoveries_checked, report.recoveries_skipped
    );
    for (kind, f) in &report.per_kind {
        println!(
            "  {kind}: acquires {}  grants {}  violations {}",
            f.acquires, f.grants, f.violations
        );
    }
    for line in &report.permits {
        println!(
            "  permits of {} ({}): {} of {} available after the run, {}",
            line.lock,
            line.kind,
            line.available,
            line.capacity,
            match line.expected {
                Some((low, high)) if low == high => format!("history allows exactly {low}"),
                Some((low, high)) => format!("history allows {low} to {high}"),
                None => "not checked (a restart or failover may have wiped the count)".into(),
            }
        );
    }
    println!("  violations: {}", report.violations.len());
    for v in report.violations.iter().take(20) {
        println!("    [{}] {}", v.rule, v.detail);
    }
    if report.violations.len() > 20 {
        println!("    ... {} more", report.violations.len() - 20);
    }
}
