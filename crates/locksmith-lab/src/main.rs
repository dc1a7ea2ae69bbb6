//! `locksmith-lab`: the project's benchmarks and chaos suite. They start
//! their own servers (single, Sentinel, Cluster, Redlock) through the test
//! kit, so they are built from the repository, not published with the
//! `locksmith` command.
//!
//! Map of the binary:
//! - `main.rs`: the command line and dispatch.
//! - `exit.rs`: exit codes and the error type; `duration.rs`: `3s`, `6m`.
//! - `bench/`: `locksmith-lab bench`, locksmith against rslock, the raw
//!   scripts and other peers.
//! - `chaos/`: `locksmith-lab chaos`, worker processes under injected
//!   faults and the checker of their history.

mod bench;
mod chaos;
mod duration;
mod exit;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::exit::CliError;

/// locksmith's benchmarks and chaos suite, on servers they start
/// themselves.
#[derive(Debug, Parser)]
#[command(name = "locksmith-lab", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Benchmark locksmith against rslock and the raw scripts on one Redis.
    ///
    /// Without --redis it starts its own redis-server on a free port.
    Bench {
        /// Measure on this Redis (plain connection, default user) instead
        /// of one the bench starts.
        #[arg(long, value_name = "URL")]
        redis: Option<String>,
        #[command(flatten)]
        args: bench::BenchArgs,
    },
    /// Chaos test: worker processes loop acquire, fenced writes and release
    /// on shared locks while faults are injected (SIGKILL and SIGSTOP of
    /// holders, a lock-server restart without persistence, a black hole and
    /// latency on one client's network, a Sentinel failover); then a checker
    /// verifies the history: token order, no accepted stale write, no
    /// overlap of confirmed holds, every loss signalled, recovery within
    /// lease + 1 s. Starts its own servers. Exit 0: no violations; 1: some.
    ///
    /// Examples:
    ///   locksmith-lab chaos --duration 60s
    ///   locksmith-lab chaos --duration 10m --json chaos.json
    ///   locksmith-lab chaos --topology sentinel --duration 2m
    ///   locksmith-lab chaos --topology cluster --duration 2m
    ///   locksmith-lab chaos --broken-release --faults pause   (shows the checker catching a broken lock)
    #[command(verbatim_doc_comment)]
    Chaos(chaos::ChaosArgs),
    /// One chaos worker process (started by `locksmith-lab chaos`).
    #[command(hide = true)]
    ChaosWorker(chaos::worker::WorkerArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { exit::USAGE } else { 0 });
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("locksmith-lab: cannot start the async runtime: {e}");
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Bench { redis, args } => bench::run(redis, args).await,
            Command::Chaos(args) => chaos::run(args).await,
            Command::ChaosWorker(args) => chaos::worker::run(args)
                .await
                .map(|()| 0)
                .map_err(CliError::Other),
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("locksmith-lab: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
