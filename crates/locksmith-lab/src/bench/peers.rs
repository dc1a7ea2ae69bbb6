//! `locksmith-lab bench --peers`: locksmith beside rslock (Rust) and the two
//! Python locks people use, redis-py's `Lock` and python-redis-lock, with
//! the same workloads on the same server in one run: every task its own
//! key (uncontended), and one key with a GET + SET counter that must come
//! out exact (contended).
//!
//! The Python libraries run in a python3 process with one thread per task
//! (how a Python service would use them); a missing library skips its rows
//! with a note.
//!
//! Redisson itself (the Java `org.redisson:redisson`, the version
//! `interop/redisson` builds) runs in its own JVM, the Redisson peer, with
//! its workloads written in Java (`Bench.java`) so that nothing but
//! Redisson is measured: every task an asynchronous loop on Redisson's
//! async API with a thread id of its own (no thread per task), a
//! connection pool of `--tasks` + 8 connections opened before the run, and
//! each workload run untimed first for [`JVM_WARMUP`] (or twice the phase's
//! duration when that is shorter, as in smoke runs) so the JIT has compiled
//! the hot paths. Its hand-off is measured inside the JVM the way ours is:
//! from the middle of the unlock call to the waiter's grant. No Java or
//! Maven skips these rows with a note.

use std::time::Duration;

use tokio::time::Instant;

use super::stats::Latencies;
use super::{progress, report, Bench, Phase};

/// How long each Redisson workload runs untimed before it is measured.
const JVM_WARMUP: Duration = Duration::from_secs(3);

/// The harness, written to a temporary file and run with python3.
const HARNESS: &str = include_str!("../../bench/peers.py");

impl Bench {
    /// Runs every contender in both workloads and prints the table.
    pub(super) async fn run_peers(&self) -> Result<(), String> {
        let mut phases = Vec::new();
        for contender in [
            self.locksmith().await?,
            self.rslock(),
            self.redisson_crate().await?,
        ] {
            let phase = self.uncontended(contender).await?;
            progress(&phase);
            phases.push(phase);
        }
        for contender in [
            self.locksmith().await?,
            self.rslock(),
            self.redisson_crate().await?,
        ] {
            let phase = self.contended(contender).await?;
            progress(&phase);
            phases.push(phase);
        }
        let mut skipped = Vec::new();
        let mut redisson_handoff = None;
        match self.redisson_java().await {
            Ok((rows, handoff)) => {
                for phase in rows {
                    progress(&phase);
                    phases.push(phase);
                }
                redisson_handoff = Some(handoff);
            }
            Err(e) => skipped.push(format!("Redisson (Java): {e}")),
        }
        let ours = self
            .handoff(self.locksmith().await?, self.locksmith().await?)
            .await?;
        let script =
            std::env::temp_dir().join(format!("locksmith-peers-{}.py", std::process::id()));
        std::fs::write(&script, HARNESS).map_err(|e| e.to_string())?;
        for lib in ["redis-py", "python-redis-lock"] {
            for mode in ["uncontended", "contended"] {
                match self.python(&script, lib, mode).await {
                    Ok(phase) => {
                        progress(&phase);
                        phases.push(phase);
                    }
                    Err(e) => {
                        skipped.push(format!("{lib} {mode}: {e}"));
                        break;
                    }
                }
            }
        }
        let _ = std::fs::remove_file(&script);
        println!();
        report(
            &self.args,
            "locksmith-lab bench --peers: lock+release pairs/s on one Redis",
            &phases.iter().collect::<Vec<_>>(),
        )?;
        for s in &skipped {
            println!("  skipped {s}");
        }
        println!();
        println!("Hand-off to a waiter in another client (release, taken as the middle of its call, to grant):");
        println!(
            "  locksmith       n={:<4} p50 {:>10.1?}  p99 {:>10.1?}",
            ours.handoffs.len(),
            ours.handoffs.p50(),
            ours.handoffs.p99()
        );
        if let Some(h) = &redisson_handoff {
            println!(
                "  Redisson (JVM)  n={:<4} p50 {:>10.1?}  p99 {:>10.1?}  (two thread ids of one client: Redisson has no local hand-off, so its waiter is woken by the release message as another client's is)",
                h.n, h.p50, h.p99
            );
        }
        let rate = |name: &str| {
            phases
                .iter()
                .find(|p| p.name.starts_with(name))
                .map_or(0.0, Phase::rate)
        };
        println!();
        for (label, prefix) in [
            ("rslock", "rslock uncontended"),
            ("the redisson crate", "redisson crate uncontended"),
            ("Redisson (Java)", "Redisson"),
            ("redis-py", "redis-py uncontended"),
            ("python-redis-lock", "python-redis-lock uncontended"),
        ] {
            let theirs = rate(prefix);
            if theirs > 0.0 {
                println!(
                    "  locksmith uncontended: {:.1}x {label}",
                    rate("locksmith uncontended") / theirs
                );
            }
        }
        Ok(())
    }

    /// Redisson's rows (uncontended, contended) and its hand-off, measured
    /// in the Redisson peer's JVM (see the module docs).
    async fn redisson_java(&self) -> Result<(Vec<Phase>, JvmHandoff), String> {
        let pool = (self.args.tasks + 8).to_string();
        let peer = locksmith_testkit::RedissonPeer::start_for_bench(&[
            "--url", &self.url, "--pool", &pool,
        ])
        .await
        .map_err(|e| e.to_string())?;
        let version = peer.version().to_owned();
        let duration = self.args.duration;
        let warmup = JVM_WARMUP.min(duration * 2);
        let (ms, warm) = (duration.as_millis(), warmup.as_millis());
        let limit = duration + warmup + Duration::from_secs(60);
        let tasks = self.args.tasks;
        let ask = |request: String| {
            let peer = &peer;
            async move {
                let rx = peer.send(&request).await.map_err(|e| e.to_string())?;
                let answer = locksmith_testkit::RedissonPeer::answer(rx, limit, &request)
                    .await
                    .map_err(|e| e.to_string())?;
                answer
                    .ok_value()
                    .map(str::to_owned)
                    .map_err(|e| e.to_string())
            }
        };
        let prefix = &self.prefix;
        let uncontended = ask(format!(
            "bench-uncontended {tasks} {ms} {warm} {prefix}:redisson-java:own"
        ))
        .await?;
        let fields: Vec<&str> = uncontended.split(' ').collect();
        let number = |s: Option<&&str>| s.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let mut rows = vec![Phase {
            name: format!("Redisson {version} uncontended (JVM, async)"),
            ops: number(fields.first()),
            elapsed: Duration::from_millis(number(fields.get(1))),
            check: "-".into(),
            ..Phase::default()
        }];
        let contended = ask(format!(
            "bench-contended {tasks} {ms} {warm} {prefix}:redisson-java:one {prefix}:redisson-java:counter"
        ))
        .await?;
        let fields: Vec<&str> = contended.split(' ').collect();
        let (all, counter) = (number(fields.get(2)), number(fields.get(3)));
        let waits = fields
            .get(4)
            .map(|list| {
                list.split(',')
                    .filter_map(|w| w.parse::<u64>().ok())
                    .map(Duration::from_micros)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        rows.push(Phase {
            name: format!("Redisson {version} contended (1 key, GET+SET)"),
            ops: number(fields.first()),
            elapsed: Duration::from_millis(number(fields.get(1))),
            waits: Some(Latencies::new(waits)),
            check: if all == counter {
                "counter exact".into()
            } else {
                format!("COUNTER {counter} != {all}")
            },
            ..Phase::default()
        });
        let handoffs = self.args.handoffs.max(5);
        let handoff = ask(format!(
            "bench-handoff {handoffs} {prefix}:redisson-java:handoff"
        ))
        .await?;
        let fields: Vec<&str> = handoff.split(' ').collect();
        let handoff = JvmHandoff {
            p50: Duration::from_micros(number(fields.first())),
            p99: Duration::from_micros(number(fields.get(1))),
            n: number(fields.get(2)),
        };
        peer.quit().await;
        Ok((rows, handoff))
    }

    /// A client of the `redisson` crate on the bench's server.
    async fn redisson_crate(&self) -> Result<super::contender::Contender, String> {
        // A pool slot per task (and spare): its default pool is smaller
        // than the bench's task count.
        let config = redisson::RedissonConfig::single_server(&self.url)
            .with_pool_size(self.args.tasks * 2 + 8);
        let client = redisson::AsyncRedissonClient::new(config)
            .await
            .map_err(|e| format!("redisson crate: {e}"))?;
        Ok(super::contender::Contender::RedissonCrate(
            std::sync::Arc::new(client),
        ))
    }

    /// One Python workload; its counter is checked for the contended one.
    async fn python(
        &self,
        script: &std::path::Path,
        lib: &str,
        mode: &str,
    ) -> Result<Phase, String> {
        let started = Instant::now();
        let run = tokio::process::Command::new("python3")
            .arg(script)
            .args(["--url", &self.url, "--lib", lib, "--mode", mode])
            .args(["--tasks", &self.args.tasks.to_string()])
            .args([
                "--duration",
                &format!("{}", self.args.duration.as_secs_f64()),
            ])
            .args(["--prefix", &self.prefix])
            .kill_on_drop(true)
            .output();
        let limit = self.args.duration + Duration::from_secs(60);
        let out = tokio::time::timeout(limit, run)
            .await
            .map_err(|_| format!("still running after {limit:?}"))?
            .map_err(|e| format!("cannot run python3: {e}"))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err.lines().last().unwrap_or("failed").to_owned();
            return Err(last);
        }
        let result: serde_json::Value =
            serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
        let ops = result["ops"].as_u64().unwrap_or(0);
        let total = result["total"].as_u64().unwrap_or(0);
        let elapsed = Duration::from_secs_f64(result["elapsed"].as_f64().unwrap_or(0.0));
        let _ = started;
        Ok(Phase {
            name: format!("{lib} {mode} (python3, threads)"),
            ops,
            elapsed,
            check: match mode {
                "contended" if total == ops => "counter exact".into(),
                "contended" => format!("COUNTER {total} != {ops}"),
                _ => "-".into(),
            },
            ..Phase::default()
        })
    }
}

/// Redisson's hand-off, as measured in its JVM.
struct JvmHandoff {
    p50: Duration,
    p99: Duration,
    n: u64,
}
