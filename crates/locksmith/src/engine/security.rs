//! TLS and credentials for every connection a client opens: the command
//! connection, the pub/sub connection, the Sentinels and the nodes a
//! cluster or a Sentinel names. One [`Security`] is built per client from
//! its options and handed to whatever dials.
//!
//! TLS is rustls (through redis-rs's `tokio-rustls-comp`): the server's
//! certificate is checked against the CA file given, or the system's
//! roots without one; a client certificate and key make it mutual TLS;
//! `insecure` turns every check off (for tests only).

use std::fmt;
use std::future::Future;
#[cfg(feature = "tls")]
use std::path::Path;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
#[cfg(feature = "cluster")]
use redis::cluster::ClusterClientBuilder;
use redis::IntoConnectionInfo;
#[cfg(all(feature = "tls", any(feature = "cluster", feature = "sentinel")))]
use redis::TlsMode;
#[cfg(feature = "tls")]
use redis::{ClientTlsConfig, TlsCertificates};
use tokio::sync::watch;

use crate::error::{Error, Result};

/// The TLS options of a client, as the caller gave them.
#[derive(Debug, Clone, Default)]
pub(crate) struct TlsOptions {
    /// TLS even for a URL whose scheme does not ask for it.
    pub(crate) force: bool,
    /// PEM file of the certificate authorities that sign the servers'
    /// certificates.
    pub(crate) ca_file: Option<PathBuf>,
    /// PEM files of this client's certificate and its private key.
    pub(crate) client_cert: Option<(PathBuf, PathBuf)>,
    /// No certificate checks at all.
    pub(crate) insecure: bool,
}

impl TlsOptions {
    /// True when any option asks for TLS.
    pub(crate) fn wanted(&self) -> bool {
        self.force || self.ca_file.is_some() || self.client_cert.is_some() || self.insecure
    }
}

/// A user name and password or token (the password is never printed).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// ACL user; `None` for the default user.
    pub username: Option<String>,
    /// Password or token; `None` for none.
    pub password: Option<String>,
}

impl Credentials {
    /// `password` for ACL user `username` (`None`: the default user).
    pub fn new(username: Option<&str>, password: impl Into<String>) -> Credentials {
        Credentials {
            username: username.map(str::to_owned),
            password: Some(password.into()),
        }
    }
}

/// The future a [`CredentialsProvider`] answers with.
pub type CredentialsFuture<'a> = Pin<Box<dyn Future<Output = Result<Credentials>> + Send + 'a>>;

/// A source of credentials that change over time: cloud IAM or Entra ID
/// tokens that live 15 to 60 minutes, or a password rotated by a secrets
/// manager. Set with `ClientBuilder::credentials_provider`; the client asks
/// it once when it is built and then on a schedule, and every connection
/// it opens from then on (command, pub/sub, each cluster node, after a
/// reconnect or a failover) authenticates with the latest answer; live
/// command connections are sent `AUTH` with each new answer.
///
/// ```
/// use locksmith::{Credentials, CredentialsFuture, CredentialsProvider};
///
/// struct FromFile(std::path::PathBuf);
///
/// impl CredentialsProvider for FromFile {
///     fn credentials(&self) -> CredentialsFuture<'_> {
///         Box::pin(async move {
///             let token = tokio::fs::read_to_string(&self.0).await.map_err(|e| {
///                 locksmith::Error::InvalidArgument(format!("token file: {e}"))
///             })?;
///             Ok(Credentials::new(Some("app"), token.trim()))
///         })
///     }
/// }
/// ```
pub trait CredentialsProvider: Send + Sync + 'static {
    /// The credentials to use from now on.
    fn credentials(&self) -> CredentialsFuture<'_>;
}

/// A client's rotating credentials: the latest answer of its provider,
/// refreshed by a background task. The task runs on the runtime that last
/// used the client: when that runtime ends, the next use on another one
/// starts it again there, asking the provider at once (the credentials may
/// have rotated meanwhile), as the watchdog and the pub/sub task do.
#[derive(Clone)]
pub(crate) struct Rotation {
    latest: watch::Receiver<Credentials>,
    shared: Arc<RotationShared>,
}

/// What the refresh task needs, shared by the clones of a [`Rotation`].
struct RotationShared {
    provider: Arc<dyn CredentialsProvider>,
    refresh: Duration,
    timeout: Duration,
    /// Where a new answer goes.
    tx: watch::Sender<Credentials>,
    /// The refresh task, restarted on the current runtime when it ended.
    task: crate::engine::task::TaskSlot,
    /// Fires when the client closes: the task ends for good. (When the
    /// last handle goes, the slot's drop ends it.)
    tasks: crate::engine::task::Tasks,
}

impl Rotation {
    /// Asks `provider` once (bounded by `timeout`), and then every
    /// `refresh` in a background task that ends when the client closes or
    /// every handle is gone.
    pub(crate) async fn start(
        provider: Arc<dyn CredentialsProvider>,
        refresh: Duration,
        timeout: Duration,
        tasks: &crate::engine::task::Tasks,
    ) -> Result<Rotation> {
        let first = tokio::time::timeout(timeout, provider.credentials())
            .await
            .map_err(|_| Error::Timeout(timeout))??;
        let (tx, latest) = watch::channel(first);
        let rotation = Rotation {
            latest,
            shared: Arc::new(RotationShared {
                provider,
                refresh,
                timeout,
                tx,
                task: crate::engine::task::TaskSlot::default(),
                tasks: tasks.clone(),
            }),
        };
        rotation
            .shared
            .task
            .ensure(|| refresh_credentials(Arc::downgrade(&rotation.shared), false));
        Ok(rotation)
    }

    /// Starts the refresh task again on the current runtime if the runtime
    /// it ran on has ended (it then asks the provider at once).
    pub(crate) fn keep_refreshing(&self) {
        if self.shared.tasks.is_closed() {
            return;
        }
        let shared = Arc::downgrade(&self.shared);
        if self
            .shared
            .task
            .ensure(|| refresh_credentials(shared, true))
        {
            tracing::debug!("the credentials refresh restarted on this runtime");
        }
    }

    /// The latest credentials.
    pub(crate) fn current(&self) -> Credentials {
        self.keep_refreshing();
        self.latest.borrow().clone()
    }
}

/// The refresh loop: every `refresh` (and first of all with `at_once`),
/// asks the provider and publishes a changed answer. Ends when the client
/// closes or the rotation is gone.
async fn refresh_credentials(shared: std::sync::Weak<RotationShared>, mut at_once: bool) {
    let Some(stopped) = shared.upgrade().map(|s| s.tasks.stopped()) else {
        return;
    };
    tokio::pin!(stopped);
    loop {
        let Some(refresh) = shared.upgrade().map(|s| s.refresh) else {
            return;
        };
        if !at_once {
            tokio::select! {
                () = &mut stopped => return,
                () = tokio::time::sleep(refresh) => {}
            }
        }
        at_once = false;
        let Some(strong) = shared.upgrade() else {
            return;
        };
        match tokio::time::timeout(strong.timeout, strong.provider.credentials()).await {
            Ok(Ok(next)) => {
                strong.tx.send_if_modified(|current| {
                    let changed = *current != next;
                    *current = next;
                    changed
                });
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "credentials provider failed; keeping the last credentials");
            }
            Err(_) => {
                tracing::warn!(
                    "credentials provider did not answer in time; keeping the last credentials"
                );
            }
        }
    }
}

impl redis::StreamingCredentialsProvider for Rotation {
    fn subscribe(
        &self,
    ) -> Pin<
        Box<dyn futures_util::Stream<Item = redis::RedisResult<redis::BasicAuth>> + Send + 'static>,
    > {
        let mut rx = self.latest.clone();
        rx.mark_changed();
        Box::pin(futures_util::stream::unfold(rx, |mut rx| async move {
            rx.changed().await.ok()?;
            let c = rx.borrow_and_update().clone();
            let auth = redis::BasicAuth::new(
                c.username.unwrap_or_else(|| "default".to_owned()),
                c.password.unwrap_or_default(),
            );
            Some((Ok(auth), rx))
        }))
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// What every connection of one client is dialled with.
#[derive(Clone, Default)]
pub(crate) struct Security {
    /// CA and client certificate, read from their files; `None` when
    /// neither was given (the system's roots check the server).
    #[cfg(feature = "tls")]
    certs: Option<TlsCertificates>,
    /// Certificates are not checked.
    insecure: bool,
    /// Credentials that rotate; `None`: the URL's.
    rotation: Option<Rotation>,
    /// The caller's own redis-rs configuration, when the client was built
    /// from it: it carries TLS and credentials, and every connection of
    /// the client is made from it.
    given: Option<Arc<Given>>,
}

/// A redis-rs configuration the caller built (see
/// `ClientBuilder::from_redis_client` and `ClientBuilder::from_cluster`).
// Kept behind an `Arc` (see `Security::given`): its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(crate) enum Given {
    /// One server's client, and the URL that stands for it in the
    /// client's address (no credentials).
    Single(redis::Client, String),
    /// A cluster: what to set on each cluster client builder the client
    /// makes (TLS, certificates, credentials, ...), before the client's
    /// own timeouts, retries and push settings.
    #[cfg(feature = "cluster")]
    Cluster(ClusterConfig, Vec<String>),
    /// A Sentinel group: what to set on the Sentinel client builder
    /// (the data nodes' user, password, database and TLS; the Sentinels'
    /// TLS), the Sentinels' URLs and the service name.
    #[cfg(feature = "sentinel")]
    Sentinel(SentinelConfig, Vec<String>, String),
}

/// The caller's settings for the Sentinel client a client makes.
#[cfg(feature = "sentinel")]
pub(crate) type SentinelConfig = Arc<
    dyn Fn(redis::sentinel::SentinelClientBuilder) -> redis::sentinel::SentinelClientBuilder
        + Send
        + Sync,
>;

/// The caller's settings for the cluster clients a client makes.
#[cfg(feature = "cluster")]
pub(crate) type ClusterConfig =
    Arc<dyn Fn(ClusterClientBuilder) -> ClusterClientBuilder + Send + Sync>;

impl fmt::Debug for Given {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Given::Single(_, url) => write!(f, "Given::Single({url})"),
            #[cfg(feature = "cluster")]
            Given::Cluster(_, seeds) => write!(f, "Given::Cluster({seeds:?})"),
            #[cfg(feature = "sentinel")]
            Given::Sentinel(_, sentinels, service) => {
                write!(f, "Given::Sentinel({sentinels:?}, {service:?})")
            }
        }
    }
}

impl Given {
    /// The URL standing for a given single-server client: scheme, address
    /// and database, no credentials.
    pub(crate) fn single_url(client: &redis::Client) -> String {
        let info = client.get_connection_info();
        let db = info.redis_settings().db();
        // An IPv6 address goes in brackets, as in any URL.
        let host = |host: &str| {
            if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]")
            } else {
                host.to_owned()
            }
        };
        match info.addr() {
            redis::ConnectionAddr::Tcp(h, port) => format!("redis://{}:{port}/{db}", host(h)),
            redis::ConnectionAddr::TcpTls { host: h, port, .. } => {
                format!("rediss://{}:{port}/{db}", host(h))
            }
            redis::ConnectionAddr::Unix(path) => {
                format!("redis+unix://{}?db={db}", path.display())
            }
            // A transport this version does not know: described by what
            // redis-rs prints for it.
            #[allow(unreachable_patterns)]
            other => format!("redis://{other}/{db}"),
        }
    }
}

impl fmt::Debug for Security {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("Security");
        #[cfg(feature = "tls")]
        out.field("certs", &self.certs.is_some());
        out.field("insecure", &self.insecure)
            .field("rotating", &self.rotation.is_some())
            .field("given", &self.given)
            .finish()
    }
}

impl Security {
    /// Reads the files `options` name; `tls` says whether the client's
    /// connections use TLS.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the file that cannot be read or
    /// holds no PEM certificate (or key), and for a client certificate
    /// without TLS.
    pub(crate) fn load(options: &TlsOptions, tls: bool) -> Result<Security> {
        #[cfg(not(feature = "tls"))]
        {
            if tls || options.wanted() {
                return Err(Error::invalid(
                    "TLS needs redis-locksmith's `tls` cargo feature, which this build leaves out \
                     (redis-locksmith = { version = \"0.1\", features = [\"tls\"] })",
                ));
            }
            Ok(Security::default())
        }
        #[cfg(feature = "tls")]
        Security::load_tls(options, tls)
    }

    /// [`Security::load`] in a build with TLS.
    #[cfg(feature = "tls")]
    fn load_tls(options: &TlsOptions, tls: bool) -> Result<Security> {
        if tls {
            ensure_crypto_provider();
        }
        let root_cert = match &options.ca_file {
            Some(path) => Some(read_pem(path, "CA file", "CERTIFICATE")?),
            None => None,
        };
        let client_tls = match &options.client_cert {
            Some((cert, key)) => Some(ClientTlsConfig {
                client_cert: read_pem(cert, "client certificate", "CERTIFICATE")?,
                client_key: read_pem(key, "client key", "PRIVATE KEY")?,
            }),
            None => None,
        };
        let certs = (root_cert.is_some() || client_tls.is_some()).then_some(TlsCertificates {
            client_tls,
            root_cert,
        });
        Ok(Security {
            certs,
            insecure: options.insecure,
            rotation: None,
            given: None,
        })
    }

    /// Connections made from the caller's own redis-rs configuration.
    pub(crate) fn given(given: Given) -> Security {
        // A given configuration that speaks TLS needs a crypto provider as
        // much as a `rediss://` URL (the closures' TLS settings cannot be
        // read, so a cluster or Sentinel configuration always gets one).
        #[cfg(feature = "tls")]
        {
            let tls = match &given {
                Given::Single(client, _) => matches!(
                    client.get_connection_info().addr(),
                    redis::ConnectionAddr::TcpTls { .. }
                ),
                #[allow(unreachable_patterns)]
                _ => true,
            };
            if tls {
                ensure_crypto_provider();
            }
        }
        Security {
            given: Some(Arc::new(given)),
            ..Security::default()
        }
    }

    /// For a client built from the caller's configuration, a client for the
    /// node `addr` (`host:port`): the caller's own client for its own
    /// server; nothing else can be made from that configuration without
    /// losing part of it (certificates, a credentials provider), so other
    /// nodes are refused. `None` for a client built from a URL.
    pub(crate) fn given_node(&self, addr: &str) -> Option<Result<redis::Client>> {
        Some(match self.given.as_deref()? {
            Given::Single(client, _) if client.get_connection_info().addr().to_string() == addr => {
                Ok(client.clone())
            }
            Given::Single(..) => Err(Error::invalid(format!(
                "{addr} is not the server of the redis-rs client this client was built from; \
                 make a client for it from your own configuration"
            ))),
            #[cfg(feature = "cluster")]
            Given::Cluster(..) => Err(Error::invalid(
                "a client built from a cluster configuration makes no node clients; \
                 make them from that configuration",
            )),
            #[cfg(feature = "sentinel")]
            Given::Sentinel(..) => Err(Error::invalid(
                "a client built from a Sentinel configuration makes no node clients; \
                 make them from that configuration",
            )),
        })
    }

    /// The caller's Sentinel settings, for a client built from them.
    #[cfg(feature = "sentinel")]
    pub(crate) fn given_sentinel(&self) -> Option<&SentinelConfig> {
        match self.given.as_deref()? {
            Given::Sentinel(configure, ..) => Some(configure),
            _ => None,
        }
    }

    /// The same, authenticating with `rotation`'s latest credentials.
    pub(crate) fn with_rotation(mut self, rotation: Rotation) -> Security {
        self.rotation = Some(rotation);
        self
    }

    /// True when the credentials rotate.
    #[cfg(feature = "sentinel")]
    pub(crate) fn rotates(&self) -> bool {
        self.rotation.is_some()
    }

    /// Starts the credentials refresh again on the current runtime if the
    /// runtime it ran on has ended.
    pub(crate) fn keep_refreshing(&self) {
        if let Some(rotation) = &self.rotation {
            rotation.keep_refreshing();
        }
    }

    /// The latest rotating credentials, if they rotate.
    #[cfg(feature = "sentinel")]
    pub(crate) fn current_credentials(&self) -> Option<Credentials> {
        self.rotation.as_ref().map(Rotation::current)
    }

    /// A command connection's options, with the rotating credentials (the
    /// connection re-authenticates on each change).
    pub(crate) fn manager_config(
        &self,
        config: ConnectionManagerConfig,
    ) -> ConnectionManagerConfig {
        match &self.rotation {
            Some(rotation) => config.set_credentials_provider(rotation.clone()),
            None => config,
        }
    }

    /// A node connection's options, with the rotating credentials (the
    /// connection re-authenticates on each change), as for
    /// [`manager_config`](Self::manager_config).
    pub(crate) fn node_config(
        &self,
        config: redis::AsyncConnectionConfig,
    ) -> redis::AsyncConnectionConfig {
        match &self.rotation {
            Some(rotation) => config.set_credentials_provider(rotation.clone()),
            None => config,
        }
    }

    /// `client` authenticating with the latest rotating credentials (a
    /// pub/sub connection, which cannot re-authenticate once subscribed,
    /// takes them whenever it is opened again).
    pub(crate) fn refreshed(&self, client: redis::Client) -> Result<redis::Client> {
        let Some(rotation) = &self.rotation else {
            return Ok(client);
        };
        let c = rotation.current();
        let info = client.get_connection_info().clone();
        let mut settings = info.redis_settings().clone();
        settings = settings.set_username(c.username.unwrap_or_else(|| "default".to_owned()));
        if let Some(p) = c.password {
            settings = settings.set_password(p);
        }
        let info = info.set_redis_settings(settings);
        #[cfg(feature = "tls")]
        if let (Some(certs), redis::ConnectionAddr::TcpTls { .. }) = (&self.certs, info.addr()) {
            return redis::Client::build_with_tls(info, certs.clone())
                .map_err(|e| Error::invalid(format!("TLS certificates: {e}")));
        }
        redis::Client::open(info).map_err(|e| Error::invalid(e.to_string()))
    }

    /// A redis-rs client for one server's URL (`redis://` or `rediss://`),
    /// with this client's certificates when the URL is a TLS one.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a URL redis-rs refuses, or PEM data
    /// it cannot parse.
    pub(crate) fn client(&self, url: &str) -> Result<redis::Client> {
        if let Some(Given::Single(client, given_url)) = self.given.as_deref() {
            if url == given_url {
                return Ok(client.clone());
            }
        }
        let bad =
            |e: redis::RedisError| Error::invalid(format!("bad Redis URL {:?}: {e}", redact(url)));
        let url = self.with_mode(url);
        let info = url.as_str().into_connection_info().map_err(bad)?;
        #[cfg(feature = "tls")]
        if let (Some(certs), redis::ConnectionAddr::TcpTls { .. }) = (&self.certs, info.addr()) {
            return redis::Client::build_with_tls(info, certs.clone()).map_err(|e| {
                Error::invalid(format!("TLS certificates for {:?}: {e}", redact(&url)))
            });
        }
        redis::Client::open(info).map_err(bad)
    }

    /// A `rediss://` URL in insecure mode carries redis-rs's `#insecure`.
    fn with_mode(&self, url: &str) -> String {
        if self.insecure && is_tls_url(url) && !url.contains('#') {
            format!("{url}#insecure")
        } else {
            url.to_owned()
        }
    }

    /// A cluster client builder for `seeds`, with the caller's own
    /// settings when the client was built from them: those come first, so
    /// the client's timeouts, retries and push channel, set after, are the
    /// ones that hold (a caller's retry count must not reach the
    /// connection that never resends).
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster_base(&self, seeds: &[String]) -> ClusterClientBuilder {
        let builder = ClusterClientBuilder::new(seeds.to_vec());
        match self.given.as_deref() {
            Some(Given::Cluster(configure, _)) => configure(builder),
            _ => builder,
        }
    }

    /// The TLS settings of a cluster connection whose seeds are
    /// `rediss://` (every node the cluster names gets the same).
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster(
        &self,
        mut builder: ClusterClientBuilder,
        tls: bool,
    ) -> ClusterClientBuilder {
        if let Some(Given::Cluster(..)) = self.given.as_deref() {
            // The caller's settings came first (`cluster_base`).
            return builder;
        }
        if let Some(rotation) = &self.rotation {
            builder = builder.set_credentials_provider(rotation.clone());
        }
        #[cfg(feature = "tls")]
        if tls {
            if let Some(certs) = &self.certs {
                builder = builder.certs(certs.clone());
            }
            builder = builder.tls(self.mode());
        }
        // A TLS seed list in a build without TLS never gets this far
        // (`Address::parse` refuses it).
        #[cfg(not(feature = "tls"))]
        let _ = tls;
        builder
    }

    /// The TLS settings of the Sentinels' and the data nodes' connections.
    #[cfg(feature = "sentinel")]
    pub(crate) fn sentinel(
        &self,
        builder: redis::sentinel::SentinelClientBuilder,
        tls: bool,
    ) -> redis::sentinel::SentinelClientBuilder {
        #[cfg(feature = "tls")]
        if tls {
            return self.sentinel_tls(builder);
        }
        // A TLS Sentinel address in a build without TLS never gets this
        // far (`Address::parse` refuses it).
        let _ = tls;
        builder
    }

    /// [`Security::sentinel`] for TLS connections.
    #[cfg(all(feature = "sentinel", feature = "tls"))]
    fn sentinel_tls(
        &self,
        mut builder: redis::sentinel::SentinelClientBuilder,
    ) -> redis::sentinel::SentinelClientBuilder {
        builder = builder
            .set_client_to_sentinel_tls_mode(self.mode())
            .set_client_to_redis_tls_mode(self.mode());
        if let Some(certs) = &self.certs {
            builder = builder
                .set_client_to_sentinel_certificates(certs.clone())
                .set_client_to_redis_certificates(certs.clone());
        }
        builder
    }

    #[cfg(all(feature = "tls", any(feature = "cluster", feature = "sentinel")))]
    fn mode(&self) -> TlsMode {
        if self.insecure {
            TlsMode::Insecure
        } else {
            TlsMode::Secure
        }
    }
}

/// `url` without its user info (`user:password@`), for messages.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find('/').unwrap_or(rest.len());
    let (hosts, path) = rest.split_at(end);
    let hosts = hosts
        .split(',')
        .map(|h| h.rsplit_once('@').map_or(h, |(_, host)| host))
        .collect::<Vec<_>>()
        .join(",");
    format!("{scheme}://{hosts}{path}")
}

/// Makes sure rustls has a process-wide crypto provider, for a client whose
/// connections use TLS. redis-rs builds its rustls configurations with the
/// process default, and with more than one provider compiled in (an
/// application that also enables rustls's aws-lc-rs) none is picked: then,
/// and only then, ring is installed. A client without TLS installs nothing,
/// and a provider the application installed first is kept.
#[cfg(feature = "tls")]
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one first: theirs is kept.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// True for a URL that asks for TLS.
pub(crate) fn is_tls_url(url: &str) -> bool {
    url.starts_with("rediss://") || url.starts_with("rediss+") || url.starts_with("valkeys")
}

/// The contents of a PEM file that must hold at least one `what` block.
#[cfg(feature = "tls")]
fn read_pem(path: &Path, role: &str, what: &str) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::invalid(format!("cannot read the {role} {}: {e}", path.display())))?;
    let text = String::from_utf8_lossy(&bytes);
    if text.contains("ENCRYPTED PRIVATE KEY") {
        return Err(Error::invalid(format!(
            "the {role} {} is encrypted; give an unencrypted PEM key",
            path.display()
        )));
    }
    if !text.contains("-----BEGIN ") || !text.contains(what) {
        return Err(Error::invalid(format!(
            "the {role} {} holds no PEM {}",
            path.display(),
            what.to_lowercase()
        )));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "tls")]
    #[test]
    fn unreadable_and_empty_files_are_named() {
        let options = TlsOptions {
            ca_file: Some(PathBuf::from("/nonexistent/ca.pem")),
            ..TlsOptions::default()
        };
        let e = Security::load(&options, true).unwrap_err();
        assert!(e.is_invalid_argument(), "{e}");
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");

        let dir = std::env::temp_dir().join(format!("locksmith-pem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let options = TlsOptions {
            ca_file: Some(empty.clone()),
            ..TlsOptions::default()
        };
        let e = Security::load(&options, true).unwrap_err();
        assert!(e.to_string().contains("holds no PEM certificate"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(feature = "tls")]
    #[test]
    fn insecure_mode_marks_tls_urls_only() {
        let s = Security {
            certs: None,
            insecure: true,
            rotation: None,
            given: None,
        };
        assert_eq!(s.with_mode("rediss://h:1"), "rediss://h:1#insecure");
        assert_eq!(s.with_mode("redis://h:1"), "redis://h:1");
        assert_eq!(
            s.with_mode("rediss://h:1/#insecure"),
            "rediss://h:1/#insecure"
        );
    }

    /// The URL standing for an application's own client: no credentials,
    /// IPv6 in brackets, and it parses back to the same address.
    #[test]
    fn a_given_clients_url_names_its_address_only() {
        for (url, want) in [
            ("redis://app:pw@10.1.2.3:6380/2", "redis://10.1.2.3:6380/2"),
            ("redis://[::1]:6379", "redis://[::1]:6379/0"),
        ] {
            let client = redis::Client::open(url).unwrap();
            let given = Given::single_url(&client);
            assert_eq!(given, want);
            let parsed = redis::Client::open(given.as_str()).unwrap();
            assert_eq!(
                parsed.get_connection_info().addr().to_string(),
                client.get_connection_info().addr().to_string()
            );
        }
    }

    #[test]
    fn urls_in_messages_carry_no_credentials() {
        assert_eq!(redact("rediss://app:secret@h:1/2"), "rediss://h:1/2");
        assert_eq!(
            redact("redis+cluster://:pw@a:1,b:2"),
            "redis+cluster://a:1,b:2"
        );
        assert_eq!(redact("redis://h:1"), "redis://h:1");
    }

    #[test]
    fn credentials_never_print_the_password() {
        let c = Credentials {
            username: Some("app".into()),
            password: Some("hunter2".into()),
        };
        let shown = format!("{c:?}");
        assert!(
            shown.contains("app") && !shown.contains("hunter2"),
            "{shown}"
        );
    }
}
