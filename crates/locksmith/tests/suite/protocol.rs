//! Replies the library's scripts can never give (another program, or a
//! server speaking otherwise, answered) come back as `ErrorKind::Protocol`,
//! not as the caller's fault (`InvalidArgument`) and not as a panic.
//!
//! A small fake server speaks enough RESP for a client to connect (INFO,
//! CLIENT, PING, SCRIPT LOAD) and answers every script call with an array
//! no script of the library returns.

use std::time::Duration;

use locksmith::{Client, ErrorKind};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// Reads one RESP command (an array of bulk strings); `None` at EOF.
async fn read_command<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> Option<Vec<String>> {
    let mut line = String::new();
    if r.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let n: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut parts = Vec::with_capacity(n);
    for _ in 0..n {
        line.clear();
        r.read_line(&mut line).await.ok()?;
        let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut buf = vec![0; len + 2];
        tokio::io::AsyncReadExt::read_exact(r, &mut buf)
            .await
            .ok()?;
        buf.truncate(len);
        parts.push(String::from_utf8_lossy(&buf).into_owned());
    }
    Some(parts)
}

fn bulk(s: &str) -> String {
    format!("${}\r\n{s}\r\n", s.len())
}

/// The answer to one command: enough for a client to connect (its `INFO`
/// names `version`), and `script_reply` for every script call.
fn answer_as(version: &str, command: &[String], script_reply: &str) -> String {
    let name = command
        .first()
        .map(|c| c.to_ascii_uppercase())
        .unwrap_or_default();
    match name.as_str() {
        "PING" => "+PONG\r\n".into(),
        "INFO" => bulk(&format!(
            "# Server\r\nredis_version:{version}\r\nrun_id:0123456789abcdef0123456789abcdef01234567\r\n\
             # Replication\r\nrole:master\r\nconnected_slaves:0\r\n\
             # Cluster\r\ncluster_enabled:0\r\n",
        )),
        "SCRIPT" => bulk(&"0".repeat(40)),
        "EVALSHA" | "EVAL" => script_reply.into(),
        _ => "+OK\r\n".into(),
    }
}

/// Starts the fake server; answers its `redis://` URL.
async fn fake_server(script_reply: &'static str) -> String {
    fake_server_as("7.2.0", script_reply).await
}

/// [`fake_server`] for a server whose `INFO` names `version` (see [`answer_as`]).
async fn fake_server_as(version: &'static str, script_reply: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut read = BufReader::new(read);
                while let Some(command) = read_command(&mut read).await {
                    let reply = answer_as(version, &command, script_reply);
                    if write.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("redis://{addr}")
}

/// A client of the fake server at `url`.
async fn fake_client(url: &str) -> Client {
    Client::builder(url)
        .command_timeout(Duration::from_secs(2))
        .replica_acks(0, Duration::from_millis(100))
        .build()
        .await
        .expect("the fake server is enough to connect")
}

#[tokio::test]
async fn replies_no_script_gives_are_protocol_errors() {
    // An array of one request's reply with a status no script answers
    // (batch scripts answer one array per request).
    let url = fake_server("*1\r\n*3\r\n:7\r\n:0\r\n:0\r\n").await;
    let client = fake_client(&url).await;
    let semaphore = client.semaphore("s").unwrap();
    let err = semaphore
        .try_acquire(1)
        .await
        .expect_err("status 7 is no answer of the semaphore script");
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    assert!(err.to_string().contains("unexpected"), "{err}");
    let err = client
        .fair_lock("f")
        .unwrap()
        .try_lock()
        .await
        .expect_err("status 7 is no answer of the fair lock script");
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    let err = client
        .read_write_lock("rw")
        .unwrap()
        .try_read()
        .await
        .expect_err("status 7 is no answer of the read-write lock script");
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
}

/// A reply of another shape than a script returns (`+OK` where an array
/// comes) is `Protocol` too, not `Connection`: it is no lost reply
/// (`is_reply_lost` is false), so it is not resent as one.
#[tokio::test]
async fn a_reply_of_another_shape_is_a_protocol_error() {
    let url = fake_server("+OK\r\n").await;
    let client = fake_client(&url).await;
    let err = client
        .lock("l")
        .unwrap()
        .try_lock()
        .await
        .expect_err("+OK is no answer of the acquire script");
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    assert!(!err.is_reply_lost(), "{err}");
}

/// A reentrant lock's `info` on a read-write lock's key: the server
/// answers, in a shape the lock's script cannot read; `Protocol`, not a
/// lost reply.
#[tokio::test]
async fn info_on_a_key_of_another_layout_is_a_protocol_error() {
    let server = locksmith_testkit::RedisServer::start().unwrap();
    let client = Client::open(&server.url()).await.unwrap();
    let rw = client.read_write_lock("shared").unwrap();
    let _read = rw.read().await.unwrap();
    match client.lock("shared").unwrap().info().await {
        Ok(info) => panic!("a read-write lock read as a lock: {info:?}"),
        Err(err) => {
            assert!(
                matches!(err.kind(), ErrorKind::Protocol | ErrorKind::WrongType),
                "{err}"
            );
            assert!(!err.is_reply_lost(), "{err}");
        }
    }
}

/// A server older than the oldest the library supports is refused when
/// the client is built, with an error naming its version and what needs
/// a newer one, not at the first acquire with a script error.
#[tokio::test]
async fn a_server_too_old_is_refused_at_connect_naming_its_version() {
    for version in ["5.0.14", "6.0.5", "4.0.9"] {
        let url = fake_server_as(version, "*0\r\n").await;
        let err = Client::builder(&url)
            .command_timeout(Duration::from_secs(2))
            .build()
            .await
            .err()
            .unwrap_or_else(|| panic!("Redis {version} was accepted"));
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{version}: {err}");
        let text = err.to_string();
        assert!(text.contains(&format!("Redis {version}")), "{text}");
        assert!(text.contains("6.0.6") && text.contains("LPOS"), "{text}");
    }
    // A version that cannot be read is the server's surprise, not the
    // caller's mistake.
    let url = fake_server_as("banana", "*0\r\n").await;
    let Err(err) = Client::open(&url).await else {
        panic!("a server without a version was accepted");
    };
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    // The oldest supported one connects.
    let url = fake_server_as("6.0.6", "*0\r\n").await;
    fake_client(&url).await;
}
