//! `locksmith-lab bench --redlock` and `--multi`: the scale-out lock shapes
//! beside the plain lock, on servers started here, side by side in one run.
//!
//! - `--redlock`: 5 independent servers. locksmith's lock on one of them,
//!   locksmith's Redlock on all five and rslock's Redlock on all five:
//!   uncontended pairs/s (each task its own key) and hand-off (release to
//!   the grant of a waiter in another client).
//! - `--multi`: a single server and a 3-primary cluster. A plain lock and a
//!   MultiLock of 4 locks per acquisition, with the 4 names in one slot (one
//!   script call) and, on the cluster, spread over slots (acquired in
//!   canonical order, one call per lock).

use locksmith_testkit::{RedisCluster, RedisNodes, RedisServer};

/// The Redlock node timeout of the bench's runs (see its use).
const BENCH_NODE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

use super::contender::{Contender, MULTI_MEMBERS};
use super::topologies::bench_on;
use super::{progress, ratio, report, BenchArgs, Handoffs, Phase};

/// Redlock nodes.
const NODES: usize = 5;

pub(super) async fn run_redlock(args: BenchArgs) -> Result<(), String> {
    eprintln!("starting {NODES} independent redis-servers...");
    let servers = tokio::task::spawn_blocking(|| RedisNodes::start(NODES))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot start the servers: {e}"))?;
    let urls = servers.urls();
    println!(
        "locksmith-lab bench --redlock: {NODES} servers, {} tasks, {:?} per phase, {} CPUs",
        args.tasks,
        args.duration,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let bench = bench_on(&urls[0], &urls, None, None, &args).await?;
    // The five servers, the bench and its tasks share the machine's
    // cores: a node held up past the default 50 ms would count as down
    // and end a phase with `NoQuorum`. Nodes here are never down, so a
    // wait that long is load, which the phase measures.
    let redlock = || async {
        locksmith::RedlockNodes::connect(urls.clone())
            .await
            .and_then(|nodes| nodes.with_node_timeout(BENCH_NODE_TIMEOUT))
            .map(Contender::Redlock)
            .map_err(|e| e.to_string())
    };
    let rslock = || Contender::RslockRedlock(rslock::LockManager::new(urls.clone()));

    let mut single = bench.uncontended(bench.locksmith().await?).await?;
    single.name = "locksmith lock, 1 server".into();
    progress(&single);
    let mut ours = bench.uncontended(redlock().await?).await?;
    ours.name = format!("locksmith Redlock, {NODES} servers");
    progress(&ours);
    let mut theirs = bench.uncontended(rslock()).await?;
    theirs.name = format!("rslock Redlock, {NODES} servers");
    progress(&theirs);

    let single_h = bench
        .handoff(bench.locksmith().await?, bench.locksmith().await?)
        .await?;
    let ours_h = bench.handoff(redlock().await?, redlock().await?).await?;
    let theirs_h = bench.handoff(rslock(), rslock()).await?;
    eprintln!("  done: hand-offs");

    println!();
    println!("Uncontended (every task its own key), commands summed over all servers:");
    report(
        &args,
        "locksmith-lab bench --redlock: uncontended pairs/s",
        &[&single, &ours, &theirs],
    )?;
    println!();
    println!("Hand-off to a waiter in another client (release to grant):");
    print_handoffs(&[
        ("locksmith lock", &single_h),
        ("locksmith Redlock", &ours_h),
        ("rslock Redlock", &theirs_h),
    ]);
    println!();
    println!(
        "  locksmith Redlock uncontended: {:.2}x the 1-server lock, {:.2}x rslock's Redlock",
        ours.rate() / single.rate().max(1e-9),
        ours.rate() / theirs.rate().max(1e-9)
    );
    println!(
        "  locksmith Redlock hand-off p50: {:.2} PING RTTs (rslock: {:.2})",
        ratio(ours_h.handoffs.p50(), ours_h.pings.p50()),
        ratio(theirs_h.handoffs.p50(), theirs_h.pings.p50()),
    );
    drop(servers);
    Ok(())
}

pub(super) async fn run_multi(args: BenchArgs) -> Result<(), String> {
    eprintln!("starting a single server and a 6-node cluster...");
    let (single, cluster) = tokio::task::spawn_blocking(|| {
        Ok::<_, std::io::Error>((RedisServer::start()?, RedisCluster::start()?))
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("cannot start the deployments: {e}"))?;
    println!(
        "locksmith-lab bench --multi: MultiLock of {MULTI_MEMBERS} locks, {} tasks, {:?} per phase, {} CPUs",
        args.tasks,
        args.duration,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let cluster_url = format!("redis+cluster://{}", cluster.addrs().join(","));
    let primaries: Vec<String> = cluster
        .primaries()
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|i| cluster.nodes()[i].url())
        .collect();
    let mut phases: Vec<Phase> = Vec::new();
    for (label, url, stats) in [
        ("single", single.url(), vec![single.url()]),
        ("cluster", cluster_url, primaries),
    ] {
        let bench = bench_on(&url, &stats, Some(0), None, &args).await?;
        let client = || async {
            locksmith::Client::builder(url.clone())
                .replica_acks(0, std::time::Duration::from_millis(500))
                .build()
                .await
                .map_err(|e| e.to_string())
        };
        let mut plain = bench.uncontended(bench.locksmith().await?).await?;
        plain.name = format!("{label}: 1 lock");
        progress(&plain);
        phases.push(plain);
        let mut same = bench
            .uncontended(Contender::Multi(client().await?, true))
            .await?;
        same.name = format!("{label}: {MULTI_MEMBERS} locks, one slot");
        progress(&same);
        phases.push(same);
        if label == "cluster" {
            let mut spread = bench
                .uncontended(Contender::Multi(client().await?, false))
                .await?;
            spread.name = format!("{label}: {MULTI_MEMBERS} locks, spread");
            progress(&spread);
            phases.push(spread);
        }
    }
    println!();
    println!("Uncontended acquire+release pairs/s (every task its own locks), commands summed over primaries:");
    report(
        &args,
        "locksmith-lab bench --multi: uncontended pairs/s",
        &phases.iter().collect::<Vec<_>>(),
    )?;
    println!();
    let rate = |i: usize| phases[i].rate();
    println!(
        "  single: {MULTI_MEMBERS} locks in one slot run at {:.2}x the 1-lock rate ({:.2} lock commands per pair)",
        rate(1) / rate(0).max(1e-9),
        phases[1].lock_cmds
    );
    println!(
        "  cluster: one slot {:.2}x, spread {:.2}x the 1-lock rate; one slot is {:.2}x spread ({:.2} vs {:.2} lock commands per pair)",
        rate(3) / rate(2).max(1e-9),
        rate(4) / rate(2).max(1e-9),
        rate(3) / rate(4).max(1e-9),
        phases[3].lock_cmds,
        phases[4].lock_cmds
    );
    drop((single, cluster));
    Ok(())
}

fn print_handoffs(rows: &[(&str, &Handoffs)]) {
    for (name, h) in rows {
        println!(
            "  {name:<18} n={:<4} p50 {:>10.1?}  p99 {:>10.1?}  = {:.2} PING RTTs",
            h.handoffs.len(),
            h.handoffs.p50(),
            h.handoffs.p99(),
            ratio(h.handoffs.p50(), h.pings.p50()),
        );
    }
}
