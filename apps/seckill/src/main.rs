//! `seckill`: run the flash-sale service (`serve`) or, built with the
//! `demo` feature (`make demo`), the experiment (`demo`).

use std::net::SocketAddr;
#[cfg(feature = "demo")]
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use seckill::config::{Config, PipelineConfig, Strategy};
use seckill::db::DbOptions;
#[cfg(feature = "demo")]
use seckill::demo::{self, DemoOptions};
use seckill::server::{shutdown_signal, Server};

#[derive(Debug, Parser)]
#[command(
    name = "seckill",
    version,
    about = "Flash-sale service on locksmith, and the oversell experiment",
    after_help = "The oversell experiment (`seckill demo`) is in builds with the `demo` feature: \
                  `make demo`, or `cargo run --release -p seckill --features demo -- demo`."
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

// Parsed once at start-up: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run one service instance until Ctrl-C or SIGTERM.
    Serve(ServeArgs),
    /// Run every strategy on two instances with thousands of buyers and
    /// print (and save) the results.
    #[cfg(feature = "demo")]
    Demo(DemoArgs),
    /// Put a voucher's dead-lettered orders back into the sale (each one
    /// whose item and buyer are still free); prints what it did as JSON.
    ReplayDeadLetters(RepairArgs),
    /// Compare a voucher's Redis stock with the database (stock in Redis
    /// should be the database's minus the orders not yet written); with
    /// --fix, set it. Prints JSON.
    Reconcile {
        #[command(flatten)]
        target: RepairArgs,
        /// Set the Redis counter to the reconciled value (pause the sale
        /// first: a running purchase shows as a difference of one).
        #[arg(long, env = "SECKILL_RECONCILE_FIX")]
        fix: bool,
    },
    /// Re-create a voucher's Redis state from the database after Redis lost
    /// its data (the sale answers 503 until then). Prints JSON.
    Reseed {
        #[command(flatten)]
        target: RepairArgs,
        /// Overwrite state that still exists.
        #[arg(long, env = "SECKILL_RESEED_FORCE")]
        force: bool,
    },
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Address to listen on (port 0 picks a free one).
    #[arg(long, env = "SECKILL_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Print `SECKILL_LISTENING <addr>` on stdout once listening.
    #[arg(long, env = "SECKILL_ANNOUNCE")]
    announce: bool,
    #[command(flatten)]
    conn: ConnArgs,
    /// Purchase strategy: unsafe, local-mutex, optimistic, lock, segmented
    /// or lua.
    #[arg(long, env = "SECKILL_STRATEGY", default_value = "lua")]
    strategy: Strategy,
    /// Bearer token of the admin endpoints (POST /vouchers, ...); without
    /// it, a random one is printed at start.
    #[arg(long, env = "SECKILL_ADMIN_TOKEN")]
    admin_token: Option<String>,
    /// Consumer name in the order group; keep it stable across restarts
    /// so a restarted instance drains what it left pending. Default: host
    /// name, PID and a random suffix (unique even for two containers that
    /// both run as PID 1).
    #[arg(long, env = "SECKILL_CONSUMER")]
    consumer_name: Option<String>,
    /// Stock segments of new vouchers (segmented strategy).
    #[arg(long, env = "SECKILL_SEGMENTS", default_value_t = 8)]
    segments: i64,
    /// How long a purchase waits for each lock (the per-user lock, then the
    /// stock lock or all segment locks together) before answering 503.
    #[arg(long, env = "SECKILL_LOCK_WAIT", default_value = "5s", value_parser = humantime::parse_duration)]
    lock_wait: Duration,
    /// Order ids reserved per Redis round trip (1 to 1048576); ids an
    /// instance reserved but did not use when it stops are skipped.
    #[arg(long, env = "SECKILL_ORDER_ID_BLOCK", default_value_t = seckill::config::DEFAULT_ORDER_ID_BLOCK)]
    order_id_block: u32,
    /// Lease of the purchase locks (per-user and stock).
    #[arg(long, env = "SECKILL_LOCK_LEASE", default_value = "15s", value_parser = humantime::parse_duration)]
    lock_lease: Duration,
    /// A purchase still running after this long is answered 202 "outcome
    /// unknown" and completes in the background; other requests get 503.
    /// Must cover 2 x lock wait + pool wait + statement timeout + 5 s.
    #[arg(long, env = "SECKILL_REQUEST_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    request_timeout: Duration,
    /// Longest wait for a database connection from the pool.
    #[arg(long, env = "SECKILL_DB_POOL_WAIT", default_value = "3s", value_parser = humantime::parse_duration)]
    db_pool_wait: Duration,
    /// Longest run of one database statement (PostgreSQL statement_timeout,
    /// SQLite busy timeout).
    #[arg(long, env = "SECKILL_STATEMENT_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    statement_timeout: Duration,
    /// Pending stream entries idle this long are claimed from their consumer.
    #[arg(long, env = "SECKILL_CLAIM_MIN_IDLE", default_value = "10s", value_parser = humantime::parse_duration)]
    claim_min_idle: Duration,
    /// Deliveries after which an order the database keeps refusing (not
    /// an outage) goes to the dead-letter stream.
    #[arg(long, env = "SECKILL_MAX_DELIVERIES", default_value_t = 5)]
    max_deliveries: u64,
    /// Bound on one pipeline write; longer counts as an outage.
    #[arg(long, env = "SECKILL_WRITE_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    write_timeout: Duration,
    /// How long an order is retried through a database outage before it is
    /// dead-lettered; default: until the database returns.
    #[arg(long, env = "SECKILL_OUTAGE_LIMIT", value_parser = humantime::parse_duration)]
    outage_limit: Option<Duration>,
    /// A finished sale's Redis keys expire this long after its last order
    /// is written.
    #[arg(long, env = "SECKILL_FINISHED_TTL", default_value = "1day", value_parser = humantime::parse_duration)]
    finished_ttl: Duration,
    /// /healthz reports degraded when the oldest unwritten order waited
    /// longer than this.
    #[arg(long, env = "SECKILL_MAX_PIPELINE_LAG", default_value = "30s", value_parser = humantime::parse_duration)]
    max_pipeline_lag: Duration,
}

/// Where the service's state lives.
#[derive(Debug, clap::Args)]
struct ConnArgs {
    /// Redis URL.
    #[arg(
        long = "redis",
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    redis_url: String,
    /// Speak TLS to Redis even for a redis:// URL (rediss:// needs nothing).
    #[arg(long, env = "SECKILL_REDIS_TLS", value_parser = clap::builder::BoolishValueParser::new())]
    redis_tls: bool,
    /// PEM file of the CAs that sign Redis's certificate (default: the
    /// system's roots).
    #[arg(long, env = "SECKILL_REDIS_CACERT", value_name = "FILE")]
    redis_cacert: Option<std::path::PathBuf>,
    /// Client certificate for mutual TLS with Redis (PEM); needs
    /// --redis-key.
    #[arg(
        long,
        env = "SECKILL_REDIS_CERT",
        value_name = "FILE",
        requires = "redis_key"
    )]
    redis_cert: Option<std::path::PathBuf>,
    /// Private key of --redis-cert (PEM).
    #[arg(
        long,
        env = "SECKILL_REDIS_KEY",
        value_name = "FILE",
        requires = "redis_cert"
    )]
    redis_key: Option<std::path::PathBuf>,
    /// Do not check Redis's certificate (tests only).
    #[arg(long, env = "SECKILL_REDIS_INSECURE", value_parser = clap::builder::BoolishValueParser::new())]
    redis_insecure: bool,
    /// Database URL: sqlite://FILE?mode=rwc or postgres://...
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "sqlite://seckill.db?mode=rwc"
    )]
    database_url: String,
}

impl ConnArgs {
    /// The Redis TLS options.
    fn security(&self) -> seckill::config::RedisSecurity {
        seckill::config::RedisSecurity {
            tls: self.redis_tls,
            ca_file: self.redis_cacert.clone(),
            client_cert: self.redis_cert.clone().zip(self.redis_key.clone()),
            insecure: self.redis_insecure,
        }
    }
}

/// The voucher a repair command works on, and where its state lives.
#[derive(Debug, clap::Args)]
struct RepairArgs {
    /// The voucher id.
    #[arg(long, env = "SECKILL_VOUCHER")]
    voucher: i64,
    #[command(flatten)]
    conn: ConnArgs,
}

#[cfg(feature = "demo")]
#[derive(Debug, clap::Args)]
struct DemoArgs {
    /// Redis URL; without it (and without REDIS_URL) a private redis-server
    /// is started.
    #[arg(long = "redis", env = "REDIS_URL")]
    redis_url: Option<String>,
    /// Database URL; without it a SQLite file in a temporary directory.
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// Strategies to run, comma-separated.
    #[arg(
        long,
        env = "SECKILL_DEMO_STRATEGIES",
        value_delimiter = ',',
        default_value = "unsafe,local-mutex,optimistic,lock,segmented,lua"
    )]
    strategies: Vec<Strategy>,
    /// Distinct buyers per strategy.
    #[arg(long, env = "SECKILL_DEMO_BUYERS", default_value_t = 2000)]
    buyers: usize,
    /// Items on sale per strategy.
    #[arg(long, env = "SECKILL_DEMO_STOCK", default_value_t = 500)]
    stock: i64,
    /// Requests in flight at most.
    #[arg(long, env = "SECKILL_DEMO_CONCURRENCY", default_value_t = 400)]
    concurrency: usize,
    /// Bound on each strategy's load phase.
    #[arg(long, env = "SECKILL_DEMO_TIME_LIMIT", default_value = "20s", value_parser = humantime::parse_duration)]
    time_limit: Duration,
    /// Where results/ files go.
    #[arg(long, env = "SECKILL_DEMO_RESULTS", default_value = "results")]
    results_dir: PathBuf,
    /// Skip the extra experiments (one user sending many requests at once,
    /// a consumer killed mid-sale).
    #[arg(long, env = "SECKILL_DEMO_NO_EXPERIMENTS")]
    no_experiments: bool,
    /// No progress bars.
    #[arg(long, env = "SECKILL_DEMO_QUIET")]
    quiet: bool,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("seckill: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Cmd::Serve(args) => serve(args).await,
            #[cfg(feature = "demo")]
            Cmd::Demo(args) => run_demo(args).await,
            Cmd::ReplayDeadLetters(target) => {
                let state = repair_state(&target).await?;
                print_json(&seckill::repair::replay_dead_letters(&state, target.voucher).await?)
            }
            Cmd::Reconcile { target, fix } => {
                let state = repair_state(&target).await?;
                print_json(&seckill::repair::reconcile(&state, target.voucher, fix).await?)
            }
            Cmd::Reseed { target, force } => {
                let state = repair_state(&target).await?;
                print_json(&seckill::repair::reseed(&state, target.voucher, force).await?)
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("seckill: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: ServeArgs) -> Result<(), seckill::state::BoxError> {
    let admin_token = match args.admin_token {
        Some(token) => token,
        None => {
            let token = uuid::Uuid::new_v4().simple().to_string();
            eprintln!("seckill: no --admin-token given; this run's admin token is {token}");
            token
        }
    };
    let mut config = Config::new(&args.conn.redis_url, &args.conn.database_url, args.strategy);
    config.redis_security = args.conn.security();
    config.admin_token = admin_token;
    if let Some(name) = args.consumer_name {
        config.consumer_name = name;
    }
    config.segments = args.segments;
    config.lock_wait = args.lock_wait;
    config.lock_lease = args.lock_lease;
    config.order_id_block = args.order_id_block;
    config.request_timeout = args.request_timeout;
    config.db = DbOptions {
        acquire_timeout: args.db_pool_wait,
        statement_timeout: args.statement_timeout,
    };
    config.finished_ttl = args.finished_ttl;
    config.max_pipeline_lag = args.max_pipeline_lag;
    if args.max_deliveries == 0 {
        return Err("--max-deliveries must be at least 1".into());
    }
    config.pipeline = PipelineConfig {
        claim_min_idle: args.claim_min_idle,
        max_deliveries: args.max_deliveries,
        write_timeout: args.write_timeout,
        outage_limit: args.outage_limit,
        ..PipelineConfig::default()
    };
    let server = Server::bind(config, args.listen).await?;
    if args.announce {
        println!("SECKILL_LISTENING {}", server.addr());
    }
    server.run_until(shutdown_signal()).await;
    Ok(())
}

/// An instance's state for a repair command: connects (and migrates) but
/// serves nothing and runs no consumer.
async fn repair_state(target: &RepairArgs) -> Result<seckill::AppState, seckill::state::BoxError> {
    let mut config = Config::new(
        &target.conn.redis_url,
        &target.conn.database_url,
        Strategy::Lua,
    );
    config.redis_security = target.conn.security();
    seckill::AppState::connect(config).await
}

fn print_json(report: &impl serde::Serialize) -> Result<(), seckill::state::BoxError> {
    println!("{}", serde_json::to_string_pretty(report)?);
    Ok(())
}

#[cfg(feature = "demo")]
async fn run_demo(args: DemoArgs) -> Result<(), seckill::state::BoxError> {
    let options = DemoOptions {
        redis_url: args.redis_url,
        database_url: args.database_url,
        strategies: args.strategies,
        buyers: args.buyers,
        stock: args.stock,
        concurrency: args.concurrency,
        time_limit: args.time_limit,
        results_dir: args.results_dir,
        experiments: !args.no_experiments,
        progress: !args.quiet,
        ..DemoOptions::default()
    };
    let (report, json, svg) = demo::run(options).await?;
    println!();
    print!("{}", demo::report::table(&report));
    println!("results: {} and {}", json.display(), svg.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// Containers are configured through the environment: every flag of
    /// every subcommand has a variable.
    #[test]
    fn every_flag_has_an_environment_variable() {
        let cli = Cli::command();
        let mut missing = Vec::new();
        for sub in cli.get_subcommands() {
            for arg in sub.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if arg.get_env().is_none() {
                    missing.push(format!("{} --{id}", sub.get_name()));
                }
            }
        }
        assert!(missing.is_empty(), "flags without env: {missing:?}");
    }
}
