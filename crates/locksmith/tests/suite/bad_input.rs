//! The bad-input catalog of the library: every bad input the issues name,
//! in one table, each with the error kind it must produce (never a panic,
//! never a silent success), plus servers that are not there, are not
//! Redis, or close the connection mid-reply.

use crate::common;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use locksmith::{Client, ErrorKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use common::setup;

type Case<'a> = (
    &'static str,
    Pin<Box<dyn Future<Output = locksmith::Result<()>> + 'a>>,
    ErrorKind,
);

fn case<'a, T>(
    what: &'static str,
    kind: ErrorKind,
    op: impl Future<Output = locksmith::Result<T>> + 'a,
) -> Case<'a> {
    (what, Box::pin(async move { op.await.map(drop) }), kind)
}

#[tokio::test]
async fn every_bad_input_maps_to_its_error_kind() {
    let (server, client) = setup(Duration::from_secs(30)).await;
    let mut conn = server.connection().unwrap();
    for (cmd, key) in [("SET", "a-string"), ("HSET", "a-hash"), ("RPUSH", "a-list")] {
        let mut c = redis::cmd(cmd);
        c.arg(key);
        if cmd == "HSET" {
            c.arg("f");
        }
        let _: () = c.arg("v").query(&mut conn).unwrap();
    }
    let long = "x".repeat(70 * 1024);
    let lease_zero = Duration::ZERO;
    use ErrorKind::*;
    // Held through the cases: a forced unlock must leave it.
    let rw_read = client
        .read_write_lock("rw-forced")
        .unwrap()
        .read()
        .await
        .unwrap();
    let cases: Vec<Case<'_>> = vec![
        // Names.
        case("empty lock name", InvalidArgument, async {
            client.lock("")
        }),
        case("oversized lock name", InvalidArgument, async {
            client.lock(long.clone())
        }),
        case("empty fair lock name", InvalidArgument, async {
            client.fair_lock("")
        }),
        case("empty read-write lock name", InvalidArgument, async {
            client.read_write_lock("")
        }),
        case("empty semaphore name", InvalidArgument, async {
            client.semaphore("")
        }),
        case("empty permit semaphore name", InvalidArgument, async {
            client.expirable_semaphore("")
        }),
        case("empty latch name", InvalidArgument, async {
            client.count_down_latch("")
        }),
        case("empty id prefix", InvalidArgument, async {
            client.id_generator("")
        }),
        case("empty fenced store name", InvalidArgument, async {
            client.fenced_store("")
        }),
        case("MultiLock of no names", InvalidArgument, async {
            client.multi_lock(Vec::<String>::new())
        }),
        case("MultiLock with a name twice", InvalidArgument, async {
            client.multi_lock(["a", "a"])
        }),
        // Durations.
        case("zero lock lease", InvalidArgument, async {
            client.lock("l")?.with_lease(lease_zero)
        }),
        case("zero fair lease", InvalidArgument, async {
            client.fair_lock("l")?.with_lease(lease_zero)
        }),
        case("zero read-write lease", InvalidArgument, async {
            client.read_write_lock("l")?.with_lease(lease_zero)
        }),
        case("zero permit lease", InvalidArgument, async {
            client.expirable_semaphore("s")?.with_lease(lease_zero)
        }),
        case("tiny fair wait timeout", InvalidArgument, async {
            client
                .fair_lock("l")?
                .with_wait_timeout(Duration::from_millis(1))
        }),
        case("wait overflowing the clock", InvalidArgument, async {
            client.lock("l")?.try_lock_for(Duration::MAX).await
        }),
        case("zero client lease", InvalidArgument, async {
            Client::builder(server.url())
                .lease(lease_zero)
                .build()
                .await
        }),
        case("zero command timeout", InvalidArgument, async {
            Client::builder(server.url())
                .command_timeout(lease_zero)
                .build()
                .await
        }),
        case("zero recheck interval", InvalidArgument, async {
            Client::builder(server.url())
                .recheck_interval(lease_zero)
                .build()
                .await
        }),
        // Permits and counts.
        case("acquire zero permits", InvalidArgument, async {
            client.semaphore("s")?.acquire(0).await
        }),
        case("acquire more than 2^53 permits", InvalidArgument, async {
            client.semaphore("s")?.try_acquire((1 << 53) + 1).await
        }),
        case("add zero permits", InvalidArgument, async {
            client.semaphore("s")?.add_permits(0).await
        }),
        case("release zero permits", InvalidArgument, async {
            client.semaphore("s")?.release(0).await
        }),
        case("latch count zero", InvalidArgument, async {
            client.count_down_latch("c")?.try_set_count(0).await
        }),
        case("id block zero", InvalidArgument, async {
            client.id_generator("i")?.with_block(0)
        }),
        case("id epoch in the future", InvalidArgument, async {
            client
                .id_generator("i")?
                .with_epoch(SystemTime::now() + Duration::from_secs(3600))
        }),
        case("fencing token above 2^53", InvalidArgument, async {
            client.fenced_store("f")?.write((1 << 53) + 1, b"x").await
        }),
        case("permit id not hex", InvalidArgument, async {
            client.expirable_semaphore("s")?.release_by_id("nope").await
        }),
        // Keys of another kind.
        case("lock on a string", WrongType, async {
            client.lock("a-string")?.try_lock().await
        }),
        case("fair lock on a list", WrongType, async {
            client.fair_lock("a-list")?.try_lock().await
        }),
        case("read lock on a string", WrongType, async {
            client.read_write_lock("a-string")?.try_read().await
        }),
        case("semaphore on a hash", WrongType, async {
            client.semaphore("a-hash")?.try_acquire(1).await
        }),
        case("permit semaphore on a hash", WrongType, async {
            client.expirable_semaphore("a-hash")?.try_acquire().await
        }),
        case("latch on a list", WrongType, async {
            client.count_down_latch("a-list")?.count_down().await
        }),
        case("fenced store on a list", WrongType, async {
            client.fenced_store("a-list")?.write(1, b"x").await
        }),
        // A forced unlock of a key of another kind leaves it alone.
        case("force unlock of a string", WrongType, async {
            client.lock("a-string")?.force_unlock().await
        }),
        case("force unlock of a read-write lock", WrongType, async {
            client.lock("rw-forced")?.force_unlock().await
        }),
        case("simple force unlock of a count", WrongType, async {
            client.semaphore("a-count")?.try_set_permits(3).await?;
            client.simple_lock("a-count")?.force_unlock().await
        }),
        case("simple force unlock of a hash", WrongType, async {
            client.simple_lock("a-hash")?.force_unlock().await
        }),
        // Release by a non-owner, and a reader asking to write.
        case("permit never issued", NotHeld, async {
            client
                .expirable_semaphore("s")?
                .release_by_id("00112233445566778899aabbccddeeff")
                .await
        }),
        case("upgrade of a read hold", Upgrade, async {
            let rw = client.read_write_lock("upgrade")?;
            let _read = rw.read().await?;
            rw.try_write().await
        }),
        case("release of a lock deleted meanwhile", NotHeld, async {
            let lock = client.lock("deleted")?;
            let guard = lock.lock().await?;
            lock.force_unlock().await?;
            guard.release().await
        }),
    ];
    for (what, op, kind) in cases {
        let err = tokio::time::timeout(Duration::from_secs(20), op)
            .await
            .unwrap_or_else(|_| panic!("{what}: hung"))
            .expect_err(what);
        assert_eq!(err.kind(), kind, "{what}: {err}");
        assert!(!err.to_string().is_empty(), "{what}: a message");
    }
    // Bad input changed nothing it was refused on.
    let value: String = redis::cmd("GET").arg("a-string").query(&mut conn).unwrap();
    assert_eq!(value, "v");
    let count: String = redis::cmd("GET").arg("a-count").query(&mut conn).unwrap();
    assert_eq!(count, "3");
    let mode: Option<String> = redis::cmd("HGET")
        .arg("rw-forced")
        .arg("mode")
        .query(&mut conn)
        .unwrap();
    assert_eq!(mode.as_deref(), Some("read"), "the read hold stays");
    rw_read.release().await.unwrap();
    let fields: i64 = redis::cmd("HLEN").arg("a-hash").query(&mut conn).unwrap();
    assert_eq!(fields, 1);
}

/// A TCP server on a free port that does `serve` with each connection.
async fn fake_server<F, Fut>(serve: F) -> String
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(serve(socket));
        }
    });
    format!("redis://{addr}")
}

async fn connect(url: &str) -> locksmith::Result<Client> {
    Client::builder(url)
        .connect_timeout(Duration::from_secs(2))
        .command_timeout(Duration::from_secs(2))
        .build()
        .await
}

#[tokio::test]
async fn absent_foreign_and_broken_servers_are_clear_errors() {
    // Nothing listens.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let err = connect(&format!("redis://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(
        err.to_string().contains(&port.to_string()),
        "names the address: {err}"
    );

    // Not Redis: an HTTP server's answer.
    let http = fake_server(|mut s| async move {
        let mut buf = [0u8; 256];
        let _ = s.read(&mut buf).await;
        let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
    })
    .await;
    let err = tokio::time::timeout(Duration::from_secs(20), connect(&http))
        .await
        .expect("no hang")
        .unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Connection | ErrorKind::Server | ErrorKind::Timeout
        ),
        "{err}"
    );

    // Garbage in the reply, then silence.
    let garbage = fake_server(|mut s| async move {
        let mut buf = [0u8; 256];
        let _ = s.read(&mut buf).await;
        let _ = s.write_all(b"\x00\x01not resp at all\r\n").await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    })
    .await;
    let err = tokio::time::timeout(Duration::from_secs(20), connect(&garbage))
        .await
        .expect("no hang")
        .unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Connection | ErrorKind::Server | ErrorKind::Timeout
        ),
        "{err}"
    );

    // A reply cut off in the middle.
    let cut = fake_server(|mut s| async move {
        let mut buf = [0u8; 256];
        let _ = s.read(&mut buf).await;
        let _ = s.write_all(b"$100\r\nonly a part").await;
    })
    .await;
    let err = tokio::time::timeout(Duration::from_secs(20), connect(&cut))
        .await
        .expect("no hang")
        .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Connection | ErrorKind::Timeout),
        "{err}"
    );
}
