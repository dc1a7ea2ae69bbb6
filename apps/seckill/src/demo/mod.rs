//! `seckill demo`: the oversell experiment with numbers.
//!
//! For each strategy: start two service instances as separate processes
//! (this binary, re-run with `serve`) behind a round-robin nginx, create a
//! voucher, send N distinct buyers through the balancer at once, wait for
//! the order pipeline to drain, and count what the database holds. Then
//! print the table and write JSON and SVG.

pub mod balancer;
pub mod load;
pub mod report;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::config::Strategy;
use crate::state::BoxError;
use load::{LoadPlan, LoadRun, Outcome, Route};
use report::Ceiling;
use report::{DuplicateResult, KilledResult, Report, StrategyResult};

/// What `seckill demo` runs.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Redis to use; `None` starts a private redis-server.
    pub redis_url: Option<String>,
    /// Database to use; `None` makes a SQLite file in a temporary directory.
    pub database_url: Option<String>,
    /// Strategies, in order.
    pub strategies: Vec<Strategy>,
    /// Distinct buyers per strategy.
    pub buyers: usize,
    /// Items per voucher.
    pub stock: i64,
    /// Requests in flight at most.
    pub concurrency: usize,
    /// Bound on one strategy's load phase.
    pub time_limit: Duration,
    /// Bound on waiting for the pipeline to write accepted orders.
    pub drain_timeout: Duration,
    /// Where JSON, SVG and instance logs go.
    pub results_dir: PathBuf,
    /// Also run the one-user-many-requests and killed-consumer experiments.
    pub experiments: bool,
    /// Show progress bars.
    pub progress: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            redis_url: None,
            database_url: None,
            strategies: Strategy::ALL.to_vec(),
            buyers: 2000,
            stock: 500,
            concurrency: 400,
            time_limit: Duration::from_secs(20),
            drain_timeout: Duration::from_secs(20),
            results_dir: PathBuf::from("results"),
            experiments: true,
            progress: true,
        }
    }
}

/// Service instances per strategy.
const INSTANCES: usize = 2;

/// A `seckill serve` child process.
struct Instance {
    /// The process; killed on drop if still running.
    child: Child,
    /// `http://127.0.0.1:<port>`.
    url: String,
}

impl Instance {
    async fn spawn(
        strategy: Strategy,
        index: usize,
        redis_url: &str,
        database_url: &str,
        admin_token: &str,
        log: &std::path::Path,
        extra: &[&str],
    ) -> Result<Instance, BoxError> {
        let exe = std::env::current_exe()?;
        let log_file = std::fs::File::create(log)?;
        let mut child = Command::new(exe)
            .arg("serve")
            .args(["--listen", "127.0.0.1:0", "--announce"])
            .args(["--redis", redis_url])
            .args(["--database-url", database_url])
            .args(["--strategy", strategy.as_str()])
            .args(["--admin-token", admin_token])
            .args(["--consumer-name", &format!("demo-{strategy}-{index}")])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        // The child binds port 0 and announces the port it got: no race for
        // a "free" port between probing and binding.
        let addr = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(addr) = line.strip_prefix("SECKILL_LISTENING ") {
                    return Ok::<_, std::io::Error>(Some(addr.trim().to_owned()));
                }
            }
            Ok(None)
        })
        .await
        .map_err(|_| {
            format!(
                "instance {index} did not start within 60 s; see {}",
                log.display()
            )
        })??
        .ok_or_else(|| {
            format!(
                "instance {index} exited before listening; {} ends with:\n{}",
                log.display(),
                log_tail(log)
            )
        })?;
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Instance {
            child,
            url: format!("http://{addr}"),
        })
    }

    /// SIGTERM, then wait (bounded) for the graceful shutdown.
    async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        if tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// The last lines of an instance's log, for an error that says why it
/// stopped (the log's folder may be gone by the time someone looks).
fn log_tail(log: &std::path::Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Runs the demo; returns the report after writing it to `results_dir`.
///
/// # Errors
/// When Redis, the database or the instances cannot be started.
pub async fn run(options: DemoOptions) -> Result<(Report, PathBuf, PathBuf), BoxError> {
    let _redis_server;
    let redis_url = match &options.redis_url {
        Some(url) => url.clone(),
        None => {
            let server = locksmith_testkit::RedisServer::start()?;
            let url = server.url();
            eprintln!("started a private redis-server at {url}");
            _redis_server = server;
            url
        }
    };
    let _db_dir;
    let database_url = match &options.database_url {
        Some(url) => url.clone(),
        None => {
            let dir = tempfile::Builder::new().prefix("seckill-demo-").tempdir()?;
            let url = format!(
                "sqlite://{}?mode=rwc",
                dir.path().join("seckill.db").display()
            );
            _db_dir = dir;
            url
        }
    };
    let logs = options.results_dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let admin_token = format!("demo-{}", std::process::id());
    let http = reqwest::Client::new();
    let mut results = Vec::new();
    let mut duplicates = Vec::new();
    let mut balancer_used = String::new();
    for (index, &strategy) in options.strategies.iter().enumerate() {
        let mut instances = Vec::new();
        for i in 0..INSTANCES {
            let log = logs.join(format!("{strategy}-{i}.log"));
            instances.push(
                Instance::spawn(
                    strategy,
                    i,
                    &redis_url,
                    &database_url,
                    &admin_token,
                    &log,
                    &[],
                )
                .await?,
            );
        }
        let urls: Vec<String> = instances.iter().map(|i| i.url.clone()).collect();
        let lb = balancer::Balancer::start(&urls, &logs).await?;
        if index == 0 {
            if let balancer::Balancer::Client { reason } = &lb {
                eprintln!(
                    "warning: no load balancer: {reason}; buyers are spread over the instances by the client instead"
                );
            }
        }
        balancer_used = lb.describe();
        let targets = lb.targets(&urls);
        let round = Round {
            options: &options,
            strategy,
            index,
            urls: &urls,
            targets: &targets,
            admin_token: &admin_token,
            http: &http,
        };
        let result = run_strategy(&round).await;
        let duplicate = match (&result, options.experiments) {
            (Ok(_), true) => Some(run_duplicates(&round).await),
            _ => None,
        };
        lb.stop().await;
        for instance in instances {
            instance.stop().await;
        }
        results.push(result?);
        if let Some(d) = duplicate {
            duplicates.push(d?);
        }
    }
    let killed = if options.experiments && options.strategies.contains(&Strategy::Lua) {
        Some(
            run_killed_consumer(
                &options,
                &redis_url,
                &database_url,
                &admin_token,
                &http,
                &logs,
            )
            .await?,
        )
    } else {
        None
    };
    let ceiling = report::median_ceiling(&results);
    let report = Report {
        balancer: balancer_used,
        instances: INSTANCES,
        buyers: options.buyers,
        stock: options.stock,
        concurrency: options.concurrency,
        ceiling,
        results,
        duplicates,
        killed,
    };
    let (json_path, svg_path) = report::write(&report, &options.results_dir)?;
    Ok((report, json_path, svg_path))
}

/// Every written order of a voucher as (order id, user id), paging through
/// the admin list, and the number of accepted orders not yet written.
async fn written_orders(
    http: &reqwest::Client,
    url: &str,
    voucher_id: i64,
    admin_token: &str,
) -> Result<(Vec<(i64, i64)>, i64), BoxError> {
    let mut rows = Vec::new();
    let mut after = String::new();
    let mut unwritten = 0;
    loop {
        let page: Value = http
            .get(format!("{url}/vouchers/{voucher_id}/orders"))
            .query(&[("after", after.as_str()), ("limit", "1000")])
            .bearer_auth(admin_token)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        for o in page["orders"].as_array().into_iter().flatten() {
            let id = o["order_id"].as_str().and_then(|s| s.parse::<i64>().ok());
            if let (Some(id), Some(user)) = (id, o["user_id"].as_i64()) {
                rows.push((id, user));
            }
        }
        // The first page's reading, taken before any row was read: zero
        // means every row is in the pages that follow.
        if after.is_empty() {
            unwritten = page["stream_unwritten"].as_i64().unwrap_or(-1);
        }
        match page["next_after"].as_str() {
            Some(next) => after = next.to_owned(),
            None => break,
        }
    }
    Ok((rows, unwritten))
}

/// One strategy's instances, as its experiments see them.
#[derive(Clone, Copy)]
struct Round<'a> {
    /// The demo's settings.
    options: &'a DemoOptions,
    /// What both instances run.
    strategy: Strategy,
    /// Position in the run (keeps user ids apart between strategies).
    index: usize,
    /// The instances, directly (admin calls).
    urls: &'a [String],
    /// Where buyers go (the balancer, or the instances).
    targets: &'a [String],
    /// The instances' admin token.
    admin_token: &'a str,
    /// The demo's HTTP client.
    http: &'a reqwest::Client,
}

/// Creates a voucher on sale from a second ago for an hour; its id.
async fn create_voucher(
    http: &reqwest::Client,
    url: &str,
    admin_token: &str,
    title: &str,
    stock: i64,
) -> Result<i64, BoxError> {
    let now = std::time::SystemTime::now();
    let voucher: Value = http
        .post(format!("{url}/vouchers"))
        .bearer_auth(admin_token)
        .json(&json!({
            "title": title,
            "stock": stock,
            "begin": humantime::format_rfc3339_millis(now - Duration::from_secs(1)).to_string(),
            "end": humantime::format_rfc3339_millis(now + Duration::from_secs(3600)).to_string(),
        }))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(voucher["id"].as_i64().ok_or("voucher without id")?)
}

/// Waits until every accepted order is written, or nothing is left in the
/// stream and `settle` has passed (then what is missing is lost), at most
/// `within`; returns the written orders as (order id, user id).
async fn drain(
    http: &reqwest::Client,
    url: &str,
    voucher_id: i64,
    admin_token: &str,
    accepted: &HashSet<i64>,
    settle: Duration,
    within: Duration,
) -> Result<Vec<(i64, i64)>, BoxError> {
    let started = Instant::now();
    loop {
        let (rows, unwritten) = written_orders(http, url, voucher_id, admin_token).await?;
        let written: HashSet<i64> = rows.iter().map(|(id, _)| *id).collect();
        let all_there = accepted.iter().all(|id| written.contains(id));
        let quiet = unwritten == 0 && started.elapsed() >= settle;
        if all_there || quiet || started.elapsed() > within {
            return Ok(rows);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The 201 order ids of a run.
fn accepted_ids(run: &load::LoadRun) -> HashSet<i64> {
    run.samples
        .iter()
        .filter_map(|s| match s.outcome {
            Outcome::Accepted(id) => Some(id),
            _ => None,
        })
        .collect()
}

/// Buyers for the one-order-per-user race, and requests each sends.
const DUP_BUYERS: usize = 50;
/// See [`DUP_BUYERS`].
const DUP_REQUESTS_EACH: usize = 10;

/// The one-order-per-user race on the running instances: each of
/// [`DUP_BUYERS`] buyers sends [`DUP_REQUESTS_EACH`] purchases at once,
/// with stock for all of them.
async fn run_duplicates(round: &Round<'_>) -> Result<DuplicateResult, BoxError> {
    let Round {
        options,
        strategy,
        index,
        urls,
        targets,
        admin_token,
        http,
    } = *round;
    let title = format!("demo voucher ({strategy}, one user many requests)");
    let voucher_id =
        create_voucher(http, &urls[0], admin_token, &title, 2 * DUP_BUYERS as i64).await?;
    let plan = LoadPlan {
        instances: targets.to_vec(),
        voucher_id,
        first_user: (index as i64 + 1) * 1_000_000 + 500_000,
        buyers: DUP_BUYERS,
        requests_per_buyer: DUP_REQUESTS_EACH,
        concurrency: options.concurrency,
        time_limit: options.time_limit,
        route: Route::Purchase,
    };
    let run = load::run(&plan, &ProgressBar::hidden()).await;
    let accepted = accepted_ids(&run);
    let rows = drain(
        http,
        &urls[0],
        voucher_id,
        admin_token,
        &accepted,
        Duration::from_secs(1),
        options.drain_timeout,
    )
    .await?;
    let mut per_user: HashMap<i64, usize> = HashMap::new();
    for (_, user) in &rows {
        *per_user.entry(*user).or_default() += 1;
    }
    let written: HashSet<i64> = rows.iter().map(|(id, _)| *id).collect();
    let dup = per_user.values().filter(|&&n| n > 1).count();
    let lost = accepted.iter().filter(|id| !written.contains(id)).count();
    // Buyers without an order, and what their requests were told.
    let mut unserved_answers: BTreeMap<String, usize> = BTreeMap::new();
    let mut unserved: HashSet<i64> = HashSet::new();
    let mut wrongly_refused: HashSet<i64> = HashSet::new();
    for sample in run
        .samples
        .iter()
        .filter(|s| !per_user.contains_key(&s.user_id))
    {
        unserved.insert(sample.user_id);
        let answer = match &sample.outcome {
            Outcome::Rejected(status, code) => {
                if code == "already_bought" {
                    wrongly_refused.insert(sample.user_id);
                }
                format!("{status} {code}")
            }
            Outcome::Unknown => "202 outcome_unknown".to_owned(),
            Outcome::Transport => "no answer".to_owned(),
            Outcome::TimedOut => "timed out".to_owned(),
            Outcome::Accepted(_) => "201 (order not found)".to_owned(),
            Outcome::Served => "200".to_owned(),
        };
        *unserved_answers.entry(answer).or_default() += 1;
    }
    Ok(DuplicateResult {
        strategy,
        buyers: DUP_BUYERS,
        requests: run.samples.len(),
        accepted: accepted.len(),
        orders_in_db: rows.len(),
        dup,
        lost,
        unserved: unserved.len(),
        unserved_answers,
        wrongly_refused: wrongly_refused.len(),
        pass: dup == 0 && lost == 0 && wrongly_refused.is_empty(),
    })
}

/// A `lua` sale on two fresh instances, one of which is SIGKILLed (with
/// its stream consumer) after 10% of the answers; the survivor claims
/// what the dead consumer held (claim after 2 s idle).
async fn run_killed_consumer(
    options: &DemoOptions,
    redis_url: &str,
    database_url: &str,
    admin_token: &str,
    http: &reqwest::Client,
    logs: &std::path::Path,
) -> Result<KilledResult, BoxError> {
    let strategy = Strategy::Lua;
    let mut instances = Vec::new();
    for i in 0..INSTANCES {
        let log = logs.join(format!("{strategy}-killed-{i}.log"));
        instances.push(
            Instance::spawn(
                strategy,
                10 + i,
                redis_url,
                database_url,
                admin_token,
                &log,
                &["--claim-min-idle", "2s"],
            )
            .await?,
        );
    }
    let urls: Vec<String> = instances.iter().map(|i| i.url.clone()).collect();
    let lb = balancer::Balancer::start(&urls, logs).await?;
    let targets = lb.targets(&urls);
    let outcome = async {
        let voucher_id = create_voucher(
            http,
            &urls[0],
            admin_token,
            "demo voucher (lua, consumer killed)",
            options.stock,
        )
        .await?;
        let plan = LoadPlan {
            instances: targets.clone(),
            voucher_id,
            first_user: 90_000_000,
            buyers: options.buyers,
            requests_per_buyer: 1,
            concurrency: options.concurrency,
            time_limit: options.time_limit,
            route: Route::Purchase,
        };
        // Both consumers run before the first buyer (a new voucher is
        // discovered within a second), so the victim's one is mid-work when
        // it dies.
        let mut redis = redis::Client::open(redis_url)?
            .get_multiplexed_async_connection()
            .await?;
        let victim_consumer = format!("demo-{strategy}-11");
        let waiting = Instant::now();
        while waiting.elapsed() < Duration::from_secs(10) {
            let consumers: redis::RedisResult<Vec<HashMap<String, redis::Value>>> =
                redis::cmd("XINFO")
                    .arg("CONSUMERS")
                    .arg(crate::keys::orders_stream(voucher_id))
                    .arg(crate::keys::ORDER_GROUP)
                    .query_async(&mut redis)
                    .await;
            let names: Vec<String> = consumers
                .unwrap_or_default()
                .iter()
                .filter_map(|c| redis::from_redis_value_ref(c.get("name")?).ok())
                .collect();
            if names.len() >= INSTANCES {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let progress = ProgressBar::hidden();
        progress.set_length(options.buyers as u64);
        let load = {
            let progress = progress.clone();
            tokio::spawn(async move { load::run(&plan, &progress).await })
        };
        // Early, while accepted orders are still flowing through the
        // consumers (the sale sells out within the first third or so), and
        // at a moment the victim's consumer holds entries it has read but
        // not acknowledged: the case the claim exists for.
        let kill_at = (options.buyers as u64 / 10).max(1);
        let started = Instant::now();
        while progress.position() < kill_at && started.elapsed() < options.time_limit {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let watching = Instant::now();
        while watching.elapsed() < Duration::from_secs(3) {
            let held: redis::RedisResult<Vec<redis::Value>> = redis::cmd("XPENDING")
                .arg(crate::keys::orders_stream(voucher_id))
                .arg(crate::keys::ORDER_GROUP)
                .arg("-")
                .arg("+")
                .arg(1)
                .arg(&victim_consumer)
                .query_async(&mut redis)
                .await;
            if held.map(|h| !h.is_empty()).unwrap_or(false) {
                break;
            }
        }
        let killed_after = progress.position();
        let victim = &mut instances[1];
        let _ = victim.child.start_kill();
        let _ = victim.child.wait().await;
        let run = load.await?;
        let accepted = accepted_ids(&run);
        // The claim needs the dead consumer's entries idle for 2 s.
        let rows = drain(
            http,
            &urls[0],
            voucher_id,
            admin_token,
            &accepted,
            Duration::from_secs(4),
            options.drain_timeout + Duration::from_secs(10),
        )
        .await?;
        let written: HashSet<i64> = rows.iter().map(|(id, _)| *id).collect();
        let lost = accepted.iter().filter(|id| !written.contains(id)).count();
        let metrics = http
            .get(format!("{}/metrics", urls[0]))
            .send()
            .await?
            .text()
            .await?;
        let claimed = metrics
            .lines()
            .find_map(|l| l.strip_prefix("seckill_pipeline_claimed_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0) as u64;
        let errors = run
            .samples
            .iter()
            .filter(|s| !matches!(s.outcome, Outcome::Accepted(_) | Outcome::Rejected(409, _)))
            .count();
        Ok::<_, BoxError>(KilledResult {
            strategy,
            buyers: options.buyers,
            killed_after,
            accepted: accepted.len(),
            orders_in_db: rows.len(),
            lost,
            claimed,
            errors,
            pass: lost == 0 && rows.len() as i64 <= options.stock,
        })
    }
    .await;
    lb.stop().await;
    for instance in instances {
        instance.stop().await;
    }
    outcome
}

async fn run_strategy(round: &Round<'_>) -> Result<StrategyResult, BoxError> {
    let Round {
        options,
        strategy,
        index,
        urls,
        targets,
        admin_token,
        http,
    } = *round;
    let voucher_id = create_voucher(
        http,
        &urls[0],
        admin_token,
        &format!("demo voucher ({strategy})"),
        options.stock,
    )
    .await?;

    let progress = if options.progress {
        let bar = ProgressBar::new(options.buyers as u64);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>12} [{bar:40}] {pos}/{len} buyers {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        bar.set_prefix(strategy.as_str().to_owned());
        bar
    } else {
        ProgressBar::hidden()
    };
    let ceiling = measure_ceiling(round).await;
    let plan = LoadPlan {
        instances: targets.to_vec(),
        voucher_id,
        first_user: (index as i64 + 1) * 1_000_000,
        buyers: options.buyers,
        requests_per_buyer: 1,
        concurrency: options.concurrency,
        time_limit: options.time_limit,
        route: Route::Purchase,
    };
    let run = load::run(&plan, &progress).await;
    progress.set_message("draining");

    let accepted = accepted_ids(&run);
    let count = |f: &dyn Fn(&Outcome) -> bool| run.samples.iter().filter(|s| f(&s.outcome)).count();
    let refused_by_db = count(&|o| matches!(o, Outcome::Rejected(409, code) if code == "oversold"));
    let sold_out = count(&|o| matches!(o, Outcome::Rejected(409, code) if code != "oversold"));
    let unavailable = count(&|o| matches!(o, Outcome::Rejected(503, _)));
    let errors = run.samples.len() - accepted.len() - refused_by_db - sold_out - unavailable
        + (options.buyers - run.samples.len());

    let rows = drain(
        http,
        &urls[0],
        voucher_id,
        admin_token,
        &accepted,
        Duration::ZERO,
        options.drain_timeout,
    )
    .await?;
    progress.finish_with_message("done");

    let mut per_user: HashMap<i64, usize> = HashMap::new();
    let mut written = HashSet::new();
    for (id, user) in &rows {
        *per_user.entry(*user).or_default() += 1;
        written.insert(*id);
    }
    let duplicate_pairs = per_user.values().filter(|&&n| n > 1).count();
    let lost = accepted.iter().filter(|id| !written.contains(id)).count();
    // Sold beyond the stock: written (or promised with a 201) past the
    // last item. The racy strategies write unguarded, so theirs shows in
    // the database as orders beyond the stock and a negative stock.
    let oversold = (accepted.len().max(rows.len()) as i64 - options.stock).max(0) as usize;
    let voucher_now: Value = http
        .get(format!("{}/vouchers/{voucher_id}", urls[0]))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let db_stock = voucher_now["db_stock"]
        .as_i64()
        .ok_or("voucher without db_stock")?;
    let secs = run.elapsed.as_secs_f64().max(1e-9);
    Ok(StrategyResult {
        strategy,
        requests: options.buyers,
        accepted: accepted.len(),
        orders_in_db: rows.len(),
        db_stock,
        oversold,
        refused_by_db_guard: refused_by_db,
        duplicate_pairs,
        lost,
        sold_out,
        unavailable,
        errors,
        requests_per_sec: run.samples.len() as f64 / secs,
        p50_ms: load::latency_quantile(&run.samples, 0.5).as_secs_f64() * 1e3,
        p99_ms: load::latency_quantile(&run.samples, 0.99).as_secs_f64() * 1e3,
        stock: options.stock,
        ceiling,
    })
}

/// The empty route (`GET /livez`) through this round's balancer and
/// instances, with the sale's request count and concurrency: the best of
/// [`report::CEILING_RUNS`] runs. Counts answered requests only, as the
/// strategies' rate does.
async fn measure_ceiling(round: &Round<'_>) -> Ceiling {
    let options = round.options;
    let plan = LoadPlan {
        instances: round.targets.to_vec(),
        voucher_id: 0,
        first_user: 1,
        buyers: options.buyers,
        requests_per_buyer: 1,
        concurrency: options.concurrency,
        time_limit: options.time_limit,
        route: Route::Empty,
    };
    let mut best: Option<Ceiling> = None;
    for _ in 0..report::CEILING_RUNS {
        let run = load::run(&plan, &ProgressBar::hidden()).await;
        let c = ceiling_of(&run);
        if best.is_none_or(|b| c.requests_per_sec > b.requests_per_sec) {
            best = Some(c);
        }
    }
    best.unwrap_or(Ceiling {
        requests_per_sec: 0.0,
        p50_ms: 0.0,
        p99_ms: 0.0,
    })
}

/// An empty-route run's rate and latencies.
fn ceiling_of(run: &LoadRun) -> Ceiling {
    let served = run
        .samples
        .iter()
        .filter(|s| s.outcome == Outcome::Served)
        .count();
    Ceiling {
        requests_per_sec: served as f64 / run.elapsed.as_secs_f64().max(1e-9),
        p50_ms: load::latency_quantile(&run.samples, 0.5).as_secs_f64() * 1e3,
        p99_ms: load::latency_quantile(&run.samples, 0.99).as_secs_f64() * 1e3,
    }
}
