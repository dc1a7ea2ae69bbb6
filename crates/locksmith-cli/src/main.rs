//! `locksmith`: a distributed `flock(1)` on Redis, and lock inspection.
//!
//! Map of the binary:
//! - `main.rs`: the command line (clap derive) and dispatch.
//! - `exit.rs`: the exit codes and the one error type that maps onto them.
//! - `duration.rs`: the `500ms` / `2s` / `1m` duration syntax.
//! - `run.rs`: `locksmith run`, holding a lock while a command runs.
//! - `admin.rs`: `locksmith status` and `locksmith unlock --force`.
//! - `latch.rs`: `locksmith latch`, a count-down latch from the shell.
//! - `ids.rs`: `locksmith id`, unique time-ordered ids.
//!
//! The benchmarks and the chaos suite start their own servers through the
//! test kit, so they live in the unpublished `locksmith-lab` binary.

mod admin;
mod conn;
mod duration;
mod exit;
mod ids;
mod latch;
mod list;
mod run;
mod watch;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use crate::exit::CliError;

use crate::conn::ConnArgs;

/// Exit codes, shown at the end of `--help`.
const EXIT_CODES_HELP: &str = "\
Exit codes:
  0..255  run: the command's own status (128+N when it died of signal N)
  64      bad usage or input (unknown flag, bad duration, empty lock name)
  69      Redis unreachable or not answering, or the TLS handshake failed
          (the message names the address)
  70      run: the lock was lost while the command ran (see --on-lost);
          other internal errors
  75      run: lock not acquired within --wait (change with --conflict-exit-code);
          latch wait: still closed after --timeout
  77      Redis refused the credentials (--user/--pass or the URL's), or the
          ACL user lacks a right the command needs
  1       latch set: the latch already had a count (unchanged)
  126/127 run: the command could not be executed / was not found";

/// Distributed locks on Redis from the shell.
#[derive(Debug, Parser)]
#[command(name = "locksmith", version, after_help = EXIT_CODES_HELP)]
struct Cli {
    #[command(flatten)]
    conn: ConnArgs,

    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Run CMD while holding a distributed lock (like flock(1)) or a
    /// semaphore permit.
    ///
    /// The lock is released when CMD exits, and locksmith exits with CMD's
    /// status. CMD sees LOCKSMITH_LOCK_NAME and LOCKSMITH_FENCING_TOKEN in
    /// its environment. SIGINT and SIGTERM sent to locksmith are forwarded
    /// to CMD.
    ///
    /// Examples:
    ///   locksmith run --lock nightly-report -- ./report.sh
    ///   locksmith run --lock deploy --wait 0 -- ./deploy.sh
    ///   locksmith run --lock account:17 --lock account:42 -- ./transfer.sh
    ///   locksmith run --lock billing --redlock redis://a:6379,redis://b:6379,redis://c:6379 -- ./bill.sh
    ///   locksmith run --fair-lock payouts -- ./pay.sh
    ///   locksmith run --read-lock catalog -- ./export.sh
    ///   locksmith run --semaphore encoders --permits 4 -- ffmpeg ...
    #[command(verbatim_doc_comment, after_help = EXIT_CODES_HELP)]
    Run(Box<RunArgs>),
    /// Show the state of a lock (holders, lease, fencing counter, fair
    /// queue), a read-write lock (mode, readers, writer), a semaphore
    /// (available and held permits) or a latch (count).
    ///
    /// Examples:
    ///   locksmith status nightly-report
    ///   locksmith status db-pool --kind semaphore --json
    #[command(verbatim_doc_comment)]
    Status(StatusArgs),
    /// Delete a lock whoever holds it and wake its waiters (admin).
    Unlock(UnlockArgs),
    /// List the locksmith and Redisson objects on the server (on a
    /// cluster, every primary), found with SCAN, never KEYS: kind,
    /// holders, lease left, waiters. A fair lock without waiters shows as
    /// a lock, and a semaphore or latch nobody waits on as a counter: the
    /// layouts are the same.
    ///
    /// Examples:
    ///   locksmith list
    ///   locksmith list --pattern 'orders:*' --json
    #[command(verbatim_doc_comment)]
    List(list::ListArgs),
    /// A live view of one object, redrawn until Ctrl-C: holders, the fair
    /// queue or readers, the lease counting down, grants per second.
    ///
    /// Examples:
    ///   locksmith watch nightly-report
    ///   locksmith watch db-pool --kind semaphore --interval 1s
    #[command(verbatim_doc_comment)]
    Watch(watch::WatchArgs),
    /// Set, count down, wait on or read a count-down latch.
    ///
    /// Examples:
    ///   locksmith latch shards-loaded set 3
    ///   locksmith latch shards-loaded count-down      (in each loader)
    ///   locksmith latch shards-loaded wait --timeout 10m
    #[command(verbatim_doc_comment, after_help = EXIT_CODES_HELP)]
    Latch(LatchArgs),
    /// Print a shell completion script to standard output.
    ///
    /// Examples:
    ///   locksmith completions bash > /etc/bash_completion.d/locksmith
    ///   locksmith completions zsh > ~/.zfunc/_locksmith
    ///   locksmith completions fish > ~/.config/fish/completions/locksmith.fish
    #[command(verbatim_doc_comment)]
    Completions {
        /// The shell to write the script for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) to standard output.
    ///
    /// Example:
    ///   locksmith man > /usr/local/share/man/man1/locksmith.1
    #[command(verbatim_doc_comment)]
    Man,
    /// Print unique, time-ordered 64-bit ids (31 bits of seconds since
    /// 2024-01-01 UTC, 32 bits of a per-day sequence shared by every
    /// client of the prefix).
    ///
    /// Examples:
    ///   locksmith id orders
    ///   locksmith id orders --count 1000 --block 1000 > ids.txt
    ///   locksmith id orders --json
    #[command(verbatim_doc_comment)]
    Id(ids::IdArgs),
}

/// Arguments of `locksmith run`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("object").required(true)
    .args(["lock", "fair_lock", "read_lock", "write_lock", "semaphore"])))]
struct RunArgs {
    /// Name of the lock (its Redis key). Given more than once, all the
    /// locks are taken together or none (a MultiLock, acquired in name
    /// order so two such commands never deadlock); CMD then sees the names
    /// and tokens comma-separated, in that order.
    #[arg(long = "lock", value_name = "NAME", value_parser = non_empty)]
    lock: Vec<String>,

    /// Take the --lock with Redlock over these independent primaries
    /// (comma-separated URLs, an odd number of at least 3) instead of
    /// --redis: held while a majority grants it. Read the Redlock section
    /// of docs/safety.md first.
    #[arg(long, value_name = "URL,URL,URL", value_delimiter = ',', num_args = 1..,
          requires = "lock",
          conflicts_with_all = ["fair_lock", "read_lock", "write_lock", "semaphore"])]
    redlock: Vec<String>,

    /// With --redlock: how long each node may take to answer before it
    /// counts as down for that call [default: 50ms, the library's]. A
    /// busy machine may need more; the time is taken from the lease's
    /// validity either way.
    #[arg(long, value_name = "DUR", value_parser = duration::parse_nonzero, requires = "redlock")]
    node_timeout: Option<Duration>,

    /// Instead, a fair lock: waiters from every host are served in arrival
    /// order (Redisson's RFairLock layout).
    #[arg(long, value_name = "NAME", value_parser = non_empty)]
    fair_lock: Option<String>,

    /// Instead, a read hold of a read-write lock: shared with other
    /// readers, excluded by a writer (Redisson's RReadWriteLock layout).
    #[arg(long, value_name = "NAME", value_parser = non_empty)]
    read_lock: Option<String>,

    /// Instead, the write hold of a read-write lock: alone.
    #[arg(long, value_name = "NAME", value_parser = non_empty)]
    write_lock: Option<String>,

    /// Instead of a lock, hold one permit of this semaphore (permits with
    /// leases, Redisson's RPermitExpirableSemaphore layout: a crashed
    /// command's permit comes back when its lease runs out). CMD sees
    /// LOCKSMITH_SEMAPHORE_NAME and LOCKSMITH_PERMIT_ID.
    #[arg(long, value_name = "NAME", value_parser = non_empty, requires = "permits")]
    semaphore: Option<String>,

    /// With --semaphore: the number of permits, set if the semaphore does
    /// not exist yet (an existing semaphore keeps its count).
    #[arg(long, value_name = "N", requires = "semaphore",
          conflicts_with_all = ["lock", "fair_lock", "read_lock", "write_lock"],
          value_parser = clap::value_parser!(u64).range(1..=(1 << 53)))]
    permits: Option<u64>,

    /// How long to wait for the lock: 0 tries once; absent waits forever.
    #[arg(long, value_name = "DUR", value_parser = duration::parse)]
    wait: Option<Duration>,

    /// Lease of the lock. With renewal (the default) the watchdog renews it
    /// every third of its length [default: 30s]; with --no-renew it is the
    /// fixed time the lock is held at most.
    #[arg(long, value_name = "DUR", value_parser = duration::parse_nonzero)]
    lease: Option<Duration>,

    /// Do not renew the lease: the lock expires after --lease even if CMD
    /// is still running (which then counts as losing the lock).
    #[arg(long, requires = "lease")]
    no_renew: bool,

    /// What to do to CMD when the lock is lost while it runs. Whatever is
    /// chosen, locksmith exits with 70 afterwards.
    #[arg(long, value_enum, default_value_t = OnLost::Term)]
    on_lost: OnLost,

    /// With --on-lost term: how long CMD gets between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DUR", value_parser = duration::parse, default_value = "10s")]
    kill_after: Duration,

    /// Exit code when the lock is not acquired within --wait.
    #[arg(long, value_name = "N", default_value_t = exit::CONFLICT)]
    conflict_exit_code: u8,

    /// The command to run, and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// What `locksmith run` does to the command when the lock is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OnLost {
    /// SIGTERM, then SIGKILL after --kill-after.
    Term,
    /// SIGKILL at once.
    Kill,
    /// Let the command finish (locksmith still exits with 70).
    Ignore,
}

/// Arguments of `locksmith status`.
#[derive(Debug, clap::Args)]
struct StatusArgs {
    /// Name of the object (its Redis key).
    #[arg(value_parser = non_empty)]
    name: String,
    /// What kind of object it is.
    #[arg(long, value_enum, default_value_t = admin::Kind::Auto)]
    kind: admin::Kind,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of `locksmith latch`.
#[derive(Debug, clap::Args)]
struct LatchArgs {
    /// Name of the latch (its Redis key).
    #[arg(value_parser = non_empty)]
    name: String,
    /// What to do.
    #[command(subcommand)]
    op: latch::LatchOp,
}

/// Arguments of `locksmith unlock`.
#[derive(Debug, clap::Args)]
struct UnlockArgs {
    /// Required: confirms deleting a lock that someone else may hold.
    #[arg(long)]
    force: bool,
    /// Name of the lock.
    #[arg(value_parser = non_empty)]
    name: String,
}

/// Rejects empty names at parse time, with clap's usual error format.
pub(crate) fn non_empty(s: &str) -> Result<String, String> {
    if s.is_empty() {
        Err("must not be empty".into())
    } else {
        Ok(s.to_owned())
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap's own exit code for usage errors is 2, which scripts
            // cannot tell apart from a command's 2; use EX_USAGE instead.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { exit::USAGE } else { 0 });
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("locksmith: cannot start the async runtime: {e}");
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    let result = runtime.block_on(dispatch(cli));
    // Background tasks (a guard released on drop, the watchdog) must not
    // keep the process alive once the answer is known.
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("locksmith: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Runs the chosen subcommand; `Ok` carries the exit code.
async fn dispatch(cli: Cli) -> Result<u8, CliError> {
    match cli.command {
        Command::Run(args) => run::run(&cli.conn, *args).await,
        Command::Status(args) => admin::status(&cli.conn, &args.name, args.kind, args.json).await,
        Command::Unlock(args) => admin::unlock(&cli.conn, &args.name, args.force).await,
        Command::List(args) => list::list(&cli.conn, args).await,
        Command::Watch(args) => watch::watch(&cli.conn, args).await,
        Command::Latch(args) => latch::latch(&cli.conn, &args.name, args.op).await,
        Command::Id(args) => ids::ids(&cli.conn, args).await,
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut command = Cli::command();
            clap_complete::generate(shell, &mut command, "locksmith", &mut std::io::stdout());
            Ok(0)
        }
        Command::Man => {
            use clap::CommandFactory;
            clap_mangen::Man::new(Cli::command())
                .render(&mut std::io::stdout())
                .map_err(|e| CliError::Other(format!("cannot write the manual page: {e}")))?;
            Ok(0)
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

    #[test]
    fn run_parses_flags_and_command() {
        let cli = Cli::try_parse_from([
            "locksmith",
            "run",
            "--lock",
            "a",
            "--wait",
            "0",
            "--",
            "echo",
            "hi",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run")
        };
        assert_eq!(args.wait, Some(Duration::ZERO));
        assert_eq!(args.command, ["echo", "hi"]);
        assert_eq!(args.on_lost, OnLost::Term);
        assert_eq!(args.conflict_exit_code, 75);
    }

    #[test]
    fn run_rejects_bad_input() {
        let bad: [&[&str]; 5] = [
            &["locksmith", "run", "--lock", "", "--", "true"],
            &[
                "locksmith",
                "run",
                "--lock",
                "a",
                "--lease",
                "0",
                "--",
                "true",
            ],
            &[
                "locksmith",
                "run",
                "--lock",
                "a",
                "--wait",
                "-1s",
                "--",
                "true",
            ],
            &[
                "locksmith",
                "run",
                "--lock",
                "a",
                "--no-renew",
                "--",
                "true",
            ],
            &["locksmith", "run", "--lock", "a"],
        ];
        for args in bad {
            assert!(Cli::try_parse_from(args).is_err(), "{args:?} accepted");
        }
    }
}
