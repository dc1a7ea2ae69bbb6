//! TLS and ACL users against real servers: the family over `rediss://`
//! with a CA file (the pub/sub wake-up included), mutual TLS, certificates
//! that do not verify, TLS and plain spoken to the wrong port (a clear
//! error within the connect timeout, not a hang), ACL users and a wrong
//! password (`ErrorKind::Auth`), and a cluster whose nodes speak only TLS
//! between each other and to clients.

use crate::common;
use std::time::{Duration, Instant};

use locksmith::{Client, ErrorKind};
use locksmith_testkit::{RedisServer, TlsFiles};

/// The connect bound of the clients that must be refused: a refusal comes
/// at once, and a hang would show as the wrong error.
const CONNECT: Duration = Duration::from_secs(2);

/// Building a client that must fail: its error.
trait Refused {
    async fn refused(self) -> locksmith::Error;
}

impl Refused for locksmith::ClientBuilder {
    async fn refused(self) -> locksmith::Error {
        self.build().await.map(|_| ()).unwrap_err()
    }
}

fn tls_server(files: &TlsFiles, mutual: bool) -> RedisServer {
    RedisServer::builder()
        .tls(files, mutual)
        .start()
        .expect("start a TLS redis-server")
}

async fn tls_client(url: &str, files: &TlsFiles) -> Client {
    Client::builder(url)
        .tls_ca_file(files.ca_cert())
        // Room to connect: on a cluster, every node is dialled twice over
        // TLS, which a loaded machine can stretch past seconds.
        .connect_timeout(Duration::from_secs(10))
        .lease(Duration::from_secs(5))
        .build()
        .await
        .expect("connect over TLS")
}

/// Lock, hand-over to a waiter of another client (woken through the
/// pub/sub connection, which is TLS too), fair lock, semaphore and latch.
async fn exercise_family(a: &Client, b: &Client, name: &str) {
    let lock_a = a.lock(name).unwrap();
    let lock_b = b.lock(name).unwrap();
    let held = lock_a.lock().await.unwrap();
    let first = held.fencing_token();
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let guard = lock_b.lock().await.unwrap();
        (started.elapsed(), guard.fencing_token(), guard)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.unwrap();
    let (waited, token, guard) = tokio::time::timeout(Duration::from_secs(4), waiter)
        .await
        .expect("the waiter is woken by the release message, well before the lease")
        .unwrap();
    assert!(token > first, "fencing tokens grow: {first} then {token}");
    assert!(waited < Duration::from_secs(4), "{waited:?}");
    guard.release().await.unwrap();

    let fair = a.fair_lock(format!("{name}-fair")).unwrap();
    fair.lock().await.unwrap().release().await.unwrap();

    let sem = a.semaphore(format!("{name}-sem")).unwrap();
    assert!(sem.try_set_permits(2).await.unwrap());
    let permits = sem.acquire(2).await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 0);
    permits.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 2);

    let latch = b.count_down_latch(format!("{name}-latch")).unwrap();
    assert!(latch.try_set_count(1).await.unwrap());
    assert_eq!(latch.count_down().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_family_works_over_tls_with_a_ca_file() {
    let files = TlsFiles::generate().unwrap();
    let server = tls_server(&files, false);
    let a = tls_client(&server.tls_url(), &files).await;
    let b = tls_client(&server.tls_url(), &files).await;
    exercise_family(&a, &b, "tls-family").await;
    // The plain port of the same server sees what the TLS clients did.
    let mut admin = server.connection().unwrap();
    let exists: bool = redis::cmd("EXISTS")
        .arg("tls-family-sem")
        .query(&mut admin)
        .unwrap();
    assert!(exists);
    // `.tls(true)` upgrades a plain URL; valkeys:// is an alias.
    let plain_form = format!("redis://127.0.0.1:{}", server.tls_port().unwrap());
    let c = Client::builder(plain_form)
        .tls(true)
        .tls_ca_file(files.ca_cert())
        .build()
        .await
        .unwrap();
    c.ping().await.unwrap();
    let alias = format!("valkeys://127.0.0.1:{}", server.tls_port().unwrap());
    tls_client(&alias, &files).await.ping().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_needs_the_client_certificate() {
    let files = TlsFiles::generate().unwrap();
    let server = tls_server(&files, true);
    let refused = Client::builder(server.tls_url())
        .tls_ca_file(files.ca_cert())
        .connect_timeout(CONNECT)
        .build()
        .await
        .map(|_| ())
        .expect_err("a server that wants a client certificate refuses a client without");
    assert!(
        matches!(refused.kind(), ErrorKind::Tls | ErrorKind::Connection),
        "{:?}: {refused}",
        refused.kind()
    );
    let (cert, key) = files.client_cert();
    let client = Client::builder(server.tls_url())
        .tls_ca_file(files.ca_cert())
        .tls_client_cert(cert, key)
        .connect_timeout(CONNECT)
        .build()
        .await
        .unwrap();
    let other = Client::builder(server.tls_url())
        .tls_ca_file(files.ca_cert())
        .tls_client_cert(files.client_cert().0, files.client_cert().1)
        .build()
        .await
        .unwrap();
    exercise_family(&client, &other, "mtls").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_that_do_not_verify_are_refused_unless_insecure() {
    let files = TlsFiles::generate().unwrap();
    let server = tls_server(&files, false);
    // Trusting another CA.
    let e = Client::builder(server.tls_url())
        .tls_ca_file(files.other_ca_cert())
        .connect_timeout(CONNECT)
        .refused()
        .await;
    assert_eq!(e.kind(), ErrorKind::Tls, "{e}");
    assert!(e.to_string().contains("certificate"), "{e}");
    // A certificate of the right CA for another host name.
    let (cert, key) = files.wrong_name_cert();
    let elsewhere = RedisServer::builder()
        .tls_with(&cert, &key, &files.ca_cert(), false)
        .start()
        .unwrap();
    let e = Client::builder(elsewhere.tls_url())
        .tls_ca_file(files.ca_cert())
        .connect_timeout(CONNECT)
        .refused()
        .await;
    assert_eq!(e.kind(), ErrorKind::Tls, "{e}");
    assert!(e.to_string().contains("not valid for name"), "{e}");
    // Insecure mode checks nothing, and says so in its name.
    let client = Client::builder(elsewhere.tls_url())
        .tls_insecure(true)
        .build()
        .await
        .unwrap();
    client.ping().await.unwrap();
    // A CA file that cannot be read is the caller's mistake.
    let e = Client::builder(server.tls_url())
        .tls_ca_file(files.dir().join("missing.pem"))
        .refused()
        .await;
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("missing.pem"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrong_protocol_for_a_port_fails_clearly_within_the_connect_timeout() {
    let files = TlsFiles::generate().unwrap();
    let server = tls_server(&files, false);
    // TLS to the plain port.
    let started = Instant::now();
    let e = Client::builder(format!("rediss://127.0.0.1:{}", server.port()))
        .tls_ca_file(files.ca_cert())
        .connect_timeout(CONNECT)
        .refused()
        .await;
    assert!(
        started.elapsed() < CONNECT * 2 + Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(e.kind(), ErrorKind::Tls | ErrorKind::Connection),
        "{:?}: {e}",
        e.kind()
    );
    // Plain to the TLS port: refused, not a hang.
    let started = Instant::now();
    let e = Client::builder(format!("redis://127.0.0.1:{}", server.tls_port().unwrap()))
        .connect_timeout(CONNECT)
        .command_timeout(Duration::from_secs(1))
        .refused()
        .await;
    assert!(
        started.elapsed() < CONNECT * 2 + Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(e.kind(), ErrorKind::Connection | ErrorKind::Timeout),
        "{:?}: {e}",
        e.kind()
    );
    // TLS options with a URL that cannot carry TLS.
    let e = Client::builder("redis+unix:///tmp/locksmith-nowhere.sock")
        .tls_ca_file(files.ca_cert())
        .refused()
        .await;
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_users_connect_and_a_wrong_password_is_an_auth_error() {
    let files = TlsFiles::generate().unwrap();
    let server = RedisServer::builder()
        .tls(&files, false)
        .arg("--user")
        .arg("app")
        .arg("on")
        .arg(">s3cret")
        .arg("~*")
        .arg(common::all_channels())
        .arg("+@all")
        .arg("--user")
        .arg("default")
        .arg("off")
        .start()
        .unwrap();
    let url = |user: &str, pass: &str| {
        format!(
            "rediss://{user}:{pass}@127.0.0.1:{}",
            server.tls_port().unwrap()
        )
    };
    let a = tls_client(&url("app", "s3cret"), &files).await;
    let b = tls_client(&url("app", "s3cret"), &files).await;
    exercise_family(&a, &b, "acl").await;
    for (user, pass) in [("app", "wrong"), ("nobody", "s3cret")] {
        let started = Instant::now();
        let e = Client::builder(url(user, pass))
            .tls_ca_file(files.ca_cert())
            .connect_timeout(CONNECT)
            .refused()
            .await;
        assert_eq!(e.kind(), ErrorKind::Auth, "{user}: {e}");
        assert!(
            !e.to_string().contains("s3cret"),
            "the password leaked: {e}"
        );
        assert!(started.elapsed() < CONNECT * 2 + Duration::from_secs(2));
    }
    // No credentials where the default user is off.
    let e = Client::builder(server.tls_url())
        .tls_ca_file(files.ca_cert())
        .connect_timeout(CONNECT)
        .refused()
        .await;
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_speaks_tls_on_every_node() {
    let files = TlsFiles::generate().unwrap();
    let cluster =
        tokio::task::block_in_place(|| locksmith_testkit::RedisCluster::start_tls(&files))
            .expect("a TLS cluster");
    let url = format!("rediss+cluster://{}", cluster.tls_addrs().join(","));
    let a = tls_client(&url, &files).await;
    let b = tls_client(&url, &files).await;
    // Names in several slots: several nodes, each reached over TLS (the
    // nodes announce their TLS ports to a TLS client).
    for name in ["tls-c-a", "tls-c-b", "tls-c-c"] {
        exercise_family(&a, &b, name).await;
    }
    // A TLS cluster refuses a client that does not trust its CA.
    let e = Client::builder(url)
        .tls_ca_file(files.other_ca_cert())
        .connect_timeout(CONNECT)
        .refused()
        .await;
    assert_eq!(e.kind(), ErrorKind::Tls, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_and_their_primary_over_tls() {
    let files = TlsFiles::generate().unwrap();
    let group = tokio::task::block_in_place(|| locksmith_testkit::SentinelGroup::start_tls(&files))
        .expect("a TLS Sentinel group");
    let url = format!(
        "rediss+sentinel://{}/{}",
        group.tls_sentinel_addrs().join(","),
        group.master_name()
    );
    let a = tls_client(&url, &files).await;
    let b = tls_client(&url, &files).await;
    exercise_family(&a, &b, "tls-sentinel").await;
    // The lock is on the primary the Sentinels name (reached over TLS).
    let mut primary = group.nodes()[group.primary_index()].connection().unwrap();
    let exists: bool = redis::cmd("EXISTS")
        .arg("tls-sentinel-sem")
        .query(&mut primary)
        .unwrap();
    assert!(exists);
}

/// A client without TLS leaves rustls's process-wide crypto provider
/// alone, so an application can install its own afterwards with
/// `.expect()`; a TLS client installs ring's only where none is installed,
/// and keeps one the application installed first. Each case in a process
/// of its own: the provider is process-wide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_client_installs_no_crypto_provider() {
    let test = "a_plain_client_installs_no_crypto_provider";
    if !crate::common::in_own_process(module_path!(), test) {
        return;
    }
    let server = RedisServer::start().unwrap();
    let client = Client::open(&server.url()).await.unwrap();
    crate::common::lock_and_release(&client, "p").await;
    assert!(
        rustls::crypto::CryptoProvider::get_default().is_none(),
        "a redis:// client installed a process-wide provider"
    );
    rustls::crypto::ring::default_provider()
        .install_default()
        .expect("the application's own provider goes in");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_keeps_the_applications_crypto_provider() {
    let test = "a_tls_client_keeps_the_applications_crypto_provider";
    if !crate::common::in_own_process(module_path!(), test) {
        return;
    }
    let files = TlsFiles::generate().unwrap();
    let server = tls_server(&files, false);
    let url = format!("rediss://127.0.0.1:{}", server.tls_port().unwrap());
    // The application's provider, installed at startup: told apart from
    // ring's default by its shorter list of cipher suites (TLS 1.3 only).
    let mut mine = rustls::crypto::ring::default_provider();
    mine.cipher_suites
        .retain(|s| s.version() == &rustls::version::TLS13);
    let suites = mine.cipher_suites.len();
    assert!(suites > 0);
    mine.install_default().unwrap();
    let client = tls_client(&url, &files).await;
    crate::common::lock_and_release(&client, "t").await;
    let now = rustls::crypto::CryptoProvider::get_default().expect("still installed");
    assert_eq!(now.cipher_suites.len(), suites, "the client replaced it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_installs_a_crypto_provider_where_none_is() {
    let test = "a_tls_client_installs_a_crypto_provider_where_none_is";
    if !crate::common::in_own_process(module_path!(), test) {
        return;
    }
    let files = TlsFiles::generate().unwrap();
    let server = tls_server(&files, false);
    let url = format!("rediss://127.0.0.1:{}", server.tls_port().unwrap());
    let client = tls_client(&url, &files).await;
    crate::common::lock_and_release(&client, "t").await;
    assert!(rustls::crypto::CryptoProvider::get_default().is_some());
}
