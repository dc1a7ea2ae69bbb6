//! `seckill`: run the flash-sale service (`serve`) or the experiment (`demo`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use seckill::config::{Config, PipelineConfig, Strategy};
use seckill::demo::{self, DemoOptions};
use seckill::server::{shutdown_signal, Server};

#[derive(Debug, Parser)]
#[command(
    name = "seckill",
    version,
    about = "Flash-sale service on locksmith, and the oversell experiment"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run one service instance until Ctrl-C or SIGTERM.
    Serve(ServeArgs),
    /// Run every strategy on two instances with thousands of buyers and
    /// print (and save) the results.
    Demo(DemoArgs),
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Address to listen on (port 0 picks a free one).
    #[arg(long, env = "SECKILL_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Print `SECKILL_LISTENING <addr>` on stdout once listening.
    #[arg(long)]
    announce: bool,
    /// Redis URL.
    #[arg(
        long = "redis",
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    redis_url: String,
    /// Database URL: sqlite://FILE?mode=rwc or postgres://...
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "sqlite://seckill.db?mode=rwc"
    )]
    database_url: String,
    /// Purchase strategy: unsafe, local-mutex, lock, segmented or lua.
    #[arg(long, env = "SECKILL_STRATEGY", default_value = "lua")]
    strategy: Strategy,
    /// Bearer token of the admin endpoints (POST /vouchers, ...).
    #[arg(long, env = "SECKILL_ADMIN_TOKEN")]
    admin_token: Option<String>,
    /// Consumer name in the order group; keep it stable across restarts
    /// so a restarted instance drains what it left pending.
    #[arg(long, env = "SECKILL_CONSUMER")]
    consumer_name: Option<String>,
    /// Stock segments of new vouchers (segmented strategy).
    #[arg(long, default_value_t = 8)]
    segments: i64,
    /// How long a purchase waits for a lock before answering 503.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    lock_wait: Duration,
    /// Requests running longer are answered 503.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    request_timeout: Duration,
    /// Pending stream entries idle this long are claimed from their consumer.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    claim_min_idle: Duration,
    /// Deliveries after which an order entry goes to the dead-letter stream.
    #[arg(long, default_value_t = 5)]
    max_deliveries: u64,
}

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
        value_delimiter = ',',
        default_value = "unsafe,local-mutex,optimistic,lock,segmented,lua"
    )]
    strategies: Vec<Strategy>,
    /// Distinct buyers per strategy.
    #[arg(long, default_value_t = 2000)]
    buyers: usize,
    /// Items on sale per strategy.
    #[arg(long, default_value_t = 500)]
    stock: i64,
    /// Requests in flight at most.
    #[arg(long, default_value_t = 400)]
    concurrency: usize,
    /// Bound on each strategy's load phase.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    time_limit: Duration,
    /// Where results/ files go.
    #[arg(long, default_value = "results")]
    results_dir: PathBuf,
    /// No progress bars.
    #[arg(long)]
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
            Cmd::Demo(args) => run_demo(args).await,
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
    let mut config = Config::new(&args.redis_url, &args.database_url, args.strategy);
    config.admin_token = admin_token;
    if let Some(name) = args.consumer_name {
        config.consumer_name = name;
    }
    config.segments = args.segments;
    config.lock_wait = args.lock_wait;
    config.request_timeout = args.request_timeout;
    config.pipeline = PipelineConfig {
        claim_min_idle: args.claim_min_idle,
        max_deliveries: args.max_deliveries.max(1),
        ..PipelineConfig::default()
    };
    let server = Server::bind(config, args.listen).await?;
    if args.announce {
        println!("SECKILL_LISTENING {}", server.addr());
    }
    server.run_until(shutdown_signal()).await;
    Ok(())
}

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
        progress: !args.quiet,
        ..DemoOptions::default()
    };
    let (report, json, svg) = demo::run(options).await?;
    println!();
    print!("{}", demo::report::table(&report));
    println!("results: {} and {}", json.display(), svg.display());
    Ok(())
}
