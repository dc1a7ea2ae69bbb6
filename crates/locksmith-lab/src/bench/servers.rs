//! `bench --servers`: the lock phases on every server version the test kit
//! knows, one after another in one run, and one table comparing them.
//!
//! The test kit picks its server once per process (`LOCKSMITH_TEST_SERVER`),
//! so each server's phases run in a child `locksmith-lab bench` with that
//! setting and a JSON file of its figures; this run reads the files back
//! and prints, per server, the rates, each one's ratio to Redis 7.0's
//! (the system's server, the reference) and locksmith's uncontended rate
//! against the same server's own ceilings: redis-benchmark firing the
//! acquire script, and the raw scripts with 8 requests per call.

use std::process::Stdio;

use super::BenchArgs;

/// One server's figures, read from its child's JSON.
struct Figures {
    id: &'static str,
    server: String,
    /// Phase name to operations per second.
    rates: Vec<(String, f64)>,
    /// Hand-off name to its median in microseconds.
    handoffs: Vec<(String, u64)>,
}

impl Figures {
    fn rate(&self, phase: &str) -> f64 {
        self.rates
            .iter()
            .find(|(name, _)| name == phase)
            .map_or(0.0, |(_, r)| *r)
    }

    fn handoff(&self, name: &str) -> u64 {
        self.handoffs
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, p50)| *p50)
    }
}

const CEILING: &str = "redis-benchmark, acquire script calls";
const RAW1: &str = "raw scripts, 1 req/call";
/// The raw driver with several requests per call (8, or --tasks when
/// fewer), whatever its row says.
const RAW8: &str = "raw scripts, batched";
const UNCONTENDED: &str = "locksmith uncontended (own keys)";
const CONTENDED: &str = "locksmith contended (1 key, GET+SET)";

pub(super) async fn run(args: BenchArgs) -> Result<(), String> {
    // One binary for every child would measure one server four times.
    if std::env::var_os(locksmith_testkit::REDIS_SERVER_ENV).is_some() {
        return Err(format!(
            "--servers picks each server itself; unset {}",
            locksmith_testkit::REDIS_SERVER_ENV
        ));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = std::env::temp_dir().join(format!(
        "locksmith-bench-servers-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut all = Vec::new();
    let mut failed = Vec::new();
    for id in locksmith_testkit::SERVERS {
        eprintln!("== bench --servers: {id}");
        let json = dir.join(format!("{id}.json"));
        let status = tokio::process::Command::new(&exe)
            .arg("bench")
            .args(["--duration", &format!("{}ms", args.duration.as_millis())])
            .args(["--tasks", &args.tasks.to_string()])
            .args(["--handoffs", &args.handoffs.to_string()])
            .arg("--json")
            .arg(&json)
            .env(locksmith_testkit::TEST_SERVER_ENV, id)
            .stdin(Stdio::null())
            // Its own table goes to our stderr; ours is the one on stdout.
            .stdout(Stdio::from(std::io::stderr()))
            .kill_on_drop(true)
            .status()
            .await
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        // A server that fails is reported; the others still run.
        let figures = if status.success() {
            read(id, &json)
        } else {
            Err(format!("the bench on {id} failed ({status})"))
        };
        match figures.and_then(|f| {
            match [CEILING, RAW1, RAW8, UNCONTENDED, CONTENDED]
                .into_iter()
                .find(|phase| !f.rates.iter().any(|(name, _)| name == phase))
            {
                Some(phase) => Err(format!("the bench on {id} reported no phase {phase:?}")),
                None => Ok(f),
            }
        }) {
            Ok(f) => all.push(f),
            Err(e) => {
                eprintln!("locksmith-lab: {e}");
                failed.push(e);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    print(&all, &args);
    if let Some(path) = &args.json {
        write_json(&all, &args, path)?;
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

fn read(id: &'static str, path: &std::path::Path) -> Result<Figures, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let rows = |field: &str| json[field].as_array().cloned().unwrap_or_default();
    Ok(Figures {
        id,
        server: json["server"].as_str().unwrap_or("?").to_owned(),
        rates: {
            // The raw driver's phases come one request per call first,
            // then batched (named for its batch, which is 1 too under
            // --tasks 1).
            let mut raw_seen = 0;
            rows("phases")
                .iter()
                .map(|p| {
                    let mut name = p["phase"].as_str().unwrap_or_default();
                    if name.starts_with("raw scripts, ") {
                        raw_seen += 1;
                        name = if raw_seen == 1 { RAW1 } else { RAW8 };
                    }
                    (name.to_owned(), p["ops_per_s"].as_f64().unwrap_or(0.0))
                })
                .collect()
        },
        handoffs: rows("handoffs")
            .iter()
            .map(|h| {
                (
                    h["name"].as_str().unwrap_or_default().to_owned(),
                    h["p50_us"].as_u64().unwrap_or(0),
                )
            })
            .collect(),
    })
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

fn print(all: &[Figures], args: &BenchArgs) {
    let Some(reference) = all.iter().find(|f| f.id == "redis7") else {
        return;
    };
    println!(
        "locksmith-lab bench --servers: {} tasks, {:?} per phase, {} CPUs shared by server and client\n",
        args.tasks,
        args.duration,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    println!(
        "{:<16} {:>12} {:>10} {:>10} {:>12} {:>11} {:>11} {:>11} {:>9} {:>9}",
        "server",
        "rb acquire/s",
        "raw 1/s",
        "raw batch/s",
        "uncontended",
        "/ raw batch",
        "/ rb pairs",
        "contended",
        "h-o local",
        "h-o cross",
    );
    for f in all {
        let u = f.rate(UNCONTENDED);
        println!(
            "{:<16} {:>12.0} {:>10.0} {:>10.0} {:>12.0} {:>10.2}x {:>10.2}x {:>11.0} {:>7}µs {:>7}µs",
            f.server,
            f.rate(CEILING),
            f.rate(RAW1),
            f.rate(RAW8),
            u,
            ratio(u, f.rate(RAW8)),
            // redis-benchmark counts script calls; a pair is two.
            ratio(u, f.rate(CEILING) / 2.0),
            f.rate(CONTENDED),
            f.handoff("locksmith local"),
            f.handoff("locksmith cross-client"),
        );
    }
    println!("\nEach against {} (1.00 = the same):", reference.server);
    println!(
        "{:<16} {:>12} {:>10} {:>12} {:>11} {:>9} {:>9}",
        "server", "rb acquire", "raw batch", "uncontended", "contended", "h-o local", "h-o cross"
    );
    for f in all {
        let h = |name: &str| ratio(f.handoff(name) as f64, reference.handoff(name) as f64);
        println!(
            "{:<16} {:>11.2}x {:>9.2}x {:>11.2}x {:>10.2}x {:>8.2}x {:>8.2}x",
            f.server,
            ratio(f.rate(CEILING), reference.rate(CEILING)),
            ratio(f.rate(RAW8), reference.rate(RAW8)),
            ratio(f.rate(UNCONTENDED), reference.rate(UNCONTENDED)),
            ratio(f.rate(CONTENDED), reference.rate(CONTENDED)),
            h("locksmith local"),
            h("locksmith cross-client"),
        );
    }
    println!(
        "\nrb: redis-benchmark of the server's own version firing the acquire script (one request per call); \
         raw: the bench's driver firing the acquire and release scripts (batch: 8 requests per call, or --tasks when fewer); h-o: median hand-off (lower is better)"
    );
}

fn write_json(all: &[Figures], args: &BenchArgs, path: &std::path::Path) -> Result<(), String> {
    let servers: Vec<serde_json::Value> = all
        .iter()
        .map(|f| {
            serde_json::json!({
                "id": f.id,
                "server": f.server,
                "ops_per_s": f.rates.iter().map(|(n, v)| (n.clone(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
                "handoff_p50_us": f.handoffs.iter().map(|(n, v)| (n.clone(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
            })
        })
        .collect();
    let json = serde_json::json!({
        "title": "locksmith-lab bench --servers",
        "tasks": args.tasks,
        "duration_s": args.duration.as_secs_f64(),
        "servers": servers,
    });
    std::fs::write(
        path,
        serde_json::to_string_pretty(&json).unwrap_or_default(),
    )
    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}
