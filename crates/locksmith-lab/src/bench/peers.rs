//! `locksmith-lab bench --peers`: locksmith beside rslock (Rust) and the two
//! Python locks people use, redis-py's `Lock` and python-redis-lock, with
//! the same workloads on the same server in one run: every task its own
//! key (uncontended), and one key with a GET + SET counter that must come
//! out exact (contended).
//!
//! The Python libraries run in a python3 process with one thread per task
//! (how a Python service would use them); a missing library skips its rows
//! with a note. Redisson itself needs a JVM, which this harness does not
//! start.

use std::time::Duration;

use tokio::time::Instant;

use super::{progress, report, Bench, Phase};

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
        let script =
            std::env::temp_dir().join(format!("locksmith-peers-{}.py", std::process::id()));
        std::fs::write(&script, HARNESS).map_err(|e| e.to_string())?;
        let mut skipped = Vec::new();
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
