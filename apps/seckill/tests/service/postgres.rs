//! The PostgreSQL path: a throwaway cluster of our own (initdb into a
//! temporary directory, `postgres` on a free port, killed at the end), so
//! nothing depends on a system service. Run as root, the server runs as the
//! `postgres` user (PostgreSQL refuses to run as root).
//!
//! Skipped, loudly, only when no PostgreSQL server binaries are installed
//! (`scripts/setup` installs them).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{accepted_ids, assert_exact, Harness};
use seckill::config::Strategy;

/// Where `initdb` and `postgres` live: $PG_BIN, `pg_config --bindir`, or
/// the newest /usr/lib/postgresql/*/bin.
fn bin_dir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("postgres").exists() && p.join("initdb").exists())
        .collect();
    candidates.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    candidates.pop()
}

/// A PostgreSQL server of our own.
struct Postgres {
    child: Child,
    port: u16,
    bin: PathBuf,
    dir: tempfile::TempDir,
}

/// `program`, run as the `postgres` user when we are root (PostgreSQL
/// refuses to run as root).
fn run_as(program: PathBuf) -> Command {
    if nix::unistd::Uid::effective().is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--clear-groups",
            "--",
        ])
        .arg(program);
        c
    } else {
        Command::new(program)
    }
}

impl Postgres {
    fn start(bin: &Path) -> Postgres {
        let dir = tempfile::Builder::new()
            .prefix("seckill-pg-")
            .tempdir()
            .unwrap();
        let data = dir.path().join("data");
        if nix::unistd::Uid::effective().is_root() {
            let user = nix::unistd::User::from_name("postgres").unwrap().expect(
                "running as root needs a `postgres` user (the postgresql package creates it)",
            );
            nix::unistd::chown(dir.path(), Some(user.uid), Some(user.gid)).unwrap();
        }
        let status = run_as(bin.join("initdb"))
            .args(["-D"])
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("initdb runs");
        assert!(status.success(), "initdb failed");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Self::spawn(bin, dir.path(), port);
        Postgres {
            child,
            port,
            bin: bin.to_owned(),
            dir,
        }
    }

    /// Starts `postgres` on the cluster in `dir` and waits until it listens.
    fn spawn(bin: &Path, dir: &Path, port: u16) -> Child {
        let data = dir.join("data");
        let child = run_as(bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(dir)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
            ])
            .args(["-c", "full_page_writes=off", "-c", "max_connections=100"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("postgres starts");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "postgres did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        child
    }

    /// Shuts the server down (fast shutdown: open connections are cut).
    fn stop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the stopped server again, same data, same port.
    fn start_again(&mut self) {
        self.child = Self::spawn(&self.bin, self.dir.path(), self.port);
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sales_on_postgres_are_exact() {
    let Some(bin) = bin_dir() else {
        eprintln!(
            "\n*** SKIPPED: no PostgreSQL server binaries (initdb, postgres) found; \
             run scripts/setup or set PG_BIN ***\n"
        );
        return;
    };
    let pg = Postgres::start(&bin);
    for strategy in [Strategy::Lua, Strategy::Lock] {
        // Each round has a fresh Redis, whose order-id sequence restarts:
        // start in a later second than the last round's ids (see order_id).
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let h = Harness::start_with_db(strategy, 2, Some(pg.url())).await;
        let voucher = h.create_voucher(50).await;
        let run = h.sale(voucher, 1, 150, 50).await;
        let orders = h
            .wait_written(voucher, &accepted_ids(&run), Duration::from_secs(20))
            .await;
        assert_exact(&run, &orders, 50);
        let db = h.servers[0].state().db();
        assert_eq!(db.engine(), seckill::db::Engine::Postgres);
        assert_eq!(db.voucher(voucher).await.unwrap().unwrap().stock, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_accepted_while_postgres_is_down_are_all_written_when_it_returns() {
    let Some(bin) = bin_dir() else {
        eprintln!("\n*** SKIPPED: no PostgreSQL server binaries; run scripts/setup ***\n");
        return;
    };
    let mut pg = Postgres::start(&bin);
    let mut h = Harness::start_with_db(Strategy::Lua, 0, Some(pg.url())).await;
    // Writes fail fast while the server is down (as with a short pool
    // wait in production), so the old dead-letter window passes many
    // times over during the outage.
    let mut cfg = common::config(&h.redis.url(), &pg.url(), Strategy::Lua, "pg-0");
    cfg.db.acquire_timeout = Duration::from_millis(200);
    h.add_instance_with(cfg).await;
    let voucher = h.create_voucher(100).await;
    let db = h.servers[0].state().db().clone();
    // The voucher's consumer runs (its group exists) before the outage.
    let mut conn = h.redis.connection().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(seckill::keys::orders_stream(voucher))
        .query::<Vec<redis::Value>>(&mut conn)
        .map(|g| g.is_empty())
        .unwrap_or(true)
    {
        assert!(Instant::now() < deadline, "no consumer started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::task::block_in_place(|| pg.stop());
    // Accepted by the gate while the database is down.
    let run = h.sale(voucher, 1, 10, 10).await;
    let accepted = accepted_ids(&run);
    assert_eq!(accepted.len(), 10);
    // Several times the old dead-letter window (3 deliveries x 300 ms
    // idle, plus a pass over the entries at 200 ms per failing write).
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        redis::Commands::xlen::<_, i64>(&mut conn, seckill::keys::dead_letter_stream(voucher))
            .unwrap(),
        0,
        "the outage dead-lettered orders"
    );
    tokio::task::block_in_place(|| pg.start_again());
    let orders = h
        .wait_written(voucher, &accepted, Duration::from_secs(60))
        .await;
    assert_eq!(orders.len(), 10, "every 201 is written");
    assert_eq!(db.failed_count(voucher).await.unwrap(), 0, "none failed");
    assert_eq!(db.voucher(voucher).await.unwrap().unwrap().stock, 90);
}

/// One `lock` instance whose database connections go through a FaultProxy,
/// with tight bounds (a 9 s request timeout), and a voucher of 10 items.
async fn behind_proxy(pg: &Postgres) -> (Harness, locksmith_testkit::FaultProxy, i64) {
    let proxy = locksmith_testkit::FaultProxy::start(&format!("127.0.0.1:{}", pg.port)).unwrap();
    let url = format!("postgres://postgres@{}/postgres", proxy.addr());
    let mut h = Harness::start_with_db(Strategy::Lock, 0, Some(url.clone())).await;
    let mut cfg = common::config(&h.redis.url(), &url, Strategy::Lock, "proxied");
    cfg.lock_wait = Duration::from_secs(1);
    cfg.lock_lease = Duration::from_secs(4);
    cfg.db.acquire_timeout = Duration::from_secs(1);
    cfg.db.statement_timeout = Duration::from_secs(1);
    cfg.request_timeout = Duration::from_secs(9);
    // No background queries (voucher discovery) to take the pooled
    // connection the purchase must find idle when the proxy goes silent.
    cfg.pipeline.discover_interval = Duration::from_secs(3600);
    h.add_instance_with(cfg).await;
    let voucher = h.create_voucher(10).await;
    // Open a few pooled connections while the proxy still passes: a test
    // silences the proxy and expects the purchase to find an idle one (and
    // hang mid-query), not to open a new one through the silent proxy and
    // give up after the 1 s pool wait (503), which is what happened when
    // the pool's only connection was busy at that moment.
    let db = h.servers[0].state().db().clone();
    let (a, b, c, d) = tokio::join!(db.ping(), db.ping(), db.ping(), db.ping());
    for r in [a, b, c, d] {
        r.expect("the database answers through the proxy");
    }
    // A connection goes back to the pool only after the pool has pinged it
    // on release, in a task of its own. Silencing the proxy before those
    // pings are answered strands the connections in them, and the
    // purchase then finds none idle (503 after the pool wait): seen on a
    // loaded machine. Wait until every open one is back (the four pings
    // may have shared connections: a ping that finished first hands its
    // connection to the next, so three may be all there are).
    let back = tokio::time::Instant::now() + Duration::from_secs(10);
    while db.open_connections() == 0 || db.idle_connections() < db.open_connections() {
        assert!(
            tokio::time::Instant::now() < back,
            "the pooled connections never came back idle ({} idle of {})",
            db.idle_connections(),
            db.open_connections()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (h, proxy, voucher)
}

/// A purchase that outlives the request timeout (the database stops
/// answering mid-write) is answered 202 "outcome unknown" with where to
/// look, not 503 "nothing accepted", and completes in the background once
/// the database answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purchase_past_its_deadline_answers_unknown_and_completes() {
    let Some(bin) = bin_dir() else {
        eprintln!("\n*** SKIPPED: no PostgreSQL server binaries; run scripts/setup ***\n");
        return;
    };
    let pg = Postgres::start(&bin);
    let (h, proxy, voucher) = behind_proxy(&pg).await;

    // The database's connection goes silent mid-purchase.
    proxy.set_mode(locksmith_testkit::FaultMode::BlackHole);
    let started = Instant::now();
    let (status, body) = h.buy(0, voucher, 42).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["error"], "outcome_unknown", "{body}");
    assert_eq!(
        body["check"],
        format!("/vouchers/{voucher}/orders/mine"),
        "{body}"
    );
    assert!(started.elapsed() < Duration::from_secs(12), "answered late");

    proxy.set_mode(locksmith_testkit::FaultMode::Pass);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mine = h.mine(voucher, 42).await;
        if mine["orders"][0]["status"] == "created" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the purchase never completed: {mine}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let db = h.servers[0].state().db().clone();
    assert_eq!(db.voucher(voucher).await.unwrap().unwrap().stock, 9);
    let mut conn = h.redis.connection().unwrap();
    let stock: i64 = redis::Commands::get(&mut conn, seckill::keys::stock(voucher)).unwrap();
    assert_eq!(stock, 9, "the item was taken once");
    // Buying again is refused: the buyer has the order.
    let (status, body) = h.buy(0, voucher, 42).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("already_bought"))
    );
}

/// Abandoning an order and writing it race under PostgreSQL's READ
/// COMMITTED: whichever takes the voucher row lock first wins, and the
/// other sees it. Both are queued behind an outside lock on the row (the
/// write's INSERT already done), then released together; in either order,
/// exactly one of them wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_and_abandoning_an_order_exclude_each_other() {
    use seckill::db::{Order, StockGuard, WriteOutcome};
    use sqlx::Connection;
    let Some(bin) = bin_dir() else {
        eprintln!("\n*** SKIPPED: no PostgreSQL server binaries; run scripts/setup ***\n");
        return;
    };
    let pg = Postgres::start(&bin);
    let h = Harness::start_with_db(Strategy::Lua, 1, Some(pg.url())).await;
    let voucher = h.create_voucher(10).await;
    let db = h.servers[0].state().db().clone();
    let mut stock = 10;
    for (round, write_first) in [(1, false), (2, true), (3, false), (4, true)] {
        let order = Order {
            id: 5000 + round,
            voucher_id: voucher,
            user_id: round,
        };
        let mut holder = sqlx::postgres::PgConnection::connect(&pg.url())
            .await
            .unwrap();
        sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
        sqlx::query("SELECT 1 FROM vouchers WHERE id = $1 FOR UPDATE")
            .bind(voucher)
            .execute(&mut holder)
            .await
            .unwrap();
        let spawn_write = || {
            let db = db.clone();
            tokio::spawn(async move {
                db.write_abandonable_order(&order, StockGuard::Enforce)
                    .await
                    .unwrap()
            })
        };
        let spawn_abandon = || {
            let db = db.clone();
            tokio::spawn(async move { db.abandon_order(&order, "test").await.unwrap() })
        };
        let settle = || tokio::time::sleep(Duration::from_millis(300));
        let (write, abandon) = if write_first {
            let w = spawn_write();
            settle().await;
            let a = spawn_abandon();
            (w, a)
        } else {
            let a = spawn_abandon();
            settle().await;
            let w = spawn_write();
            (w, a)
        };
        settle().await;
        sqlx::query("COMMIT").execute(&mut holder).await.unwrap();
        let (written, abandoned) = (write.await.unwrap(), abandon.await.unwrap());
        let in_db = db.order(order.id).await.unwrap().is_some();
        let failed = db.failed_order(order.id).await.unwrap().is_some();
        match written {
            WriteOutcome::Created => {
                stock -= 1;
                assert!(!abandoned, "round {round}: written and abandoned");
                assert!(in_db && !failed, "round {round}");
            }
            WriteOutcome::Abandoned => {
                assert!(abandoned, "round {round}: refused but not abandoned");
                assert!(!in_db && failed, "round {round}");
            }
            other => panic!("round {round}: {other:?}"),
        }
        assert_eq!(db.voucher(voucher).await.unwrap().unwrap().stock, stock);
    }
}

/// Shutdown waits for purchases still running in their own tasks: one
/// stuck on a silent database completes (its order written) once the
/// database answers, before the pool closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_purchases_in_flight() {
    let Some(bin) = bin_dir() else {
        eprintln!("\n*** SKIPPED: no PostgreSQL server binaries; run scripts/setup ***\n");
        return;
    };
    let pg = Postgres::start(&bin);
    let (mut h, proxy, voucher) = behind_proxy(&pg).await;

    proxy.set_mode(locksmith_testkit::FaultMode::BlackHole);
    let buy = {
        let http = h.http.clone();
        let url = format!("{}/vouchers/{voucher}/orders", h.servers[0].url());
        tokio::spawn(async move { http.post(url).header("x-user-id", "77").send().await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let server = h.servers.remove(0);
    let shutdown = tokio::spawn(server.shutdown());
    // The request itself ends at its deadline (202), which lets the HTTP
    // server finish; the purchase goes on in its task.
    let answer = buy.await.unwrap().unwrap();
    let status = answer.status().as_u16();
    let body = answer.text().await.unwrap_or_default();
    assert_eq!(status, 202, "{body}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !shutdown.is_finished(),
        "shutdown did not wait for the purchase"
    );
    proxy.set_mode(locksmith_testkit::FaultMode::Pass);
    tokio::time::timeout(Duration::from_secs(30), shutdown)
        .await
        .expect("shutdown finishes once the purchase has")
        .unwrap();
    let db = seckill::db::Db::connect(&pg.url(), Default::default())
        .await
        .unwrap();
    let orders = db.orders_of_user(voucher, 77).await.unwrap();
    assert_eq!(orders.len(), 1, "the purchase in flight was cut off");
    assert_eq!(db.voucher(voucher).await.unwrap().unwrap().stock, 9);
}
