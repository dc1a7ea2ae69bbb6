//! The URL forms a client accepts (single server, Sentinel, Cluster; TLS
//! and Valkey schemes) parsed into an [`Address`], and how an address is
//! described in errors (no passwords).

use redis::IntoConnectionInfo;

use crate::engine::security::{is_tls_url, redact, Credentials};
use crate::error::{Error, Result};

/// A parsed deployment address: what [`Topology::connect`] dials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Address {
    /// One server: any URL redis-rs accepts (`redis://`, `redis+unix://`).
    Single(String),
    /// Sentinels (`redis://host:port` each), the monitored service name,
    /// and credentials and database for the data nodes.
    Sentinel {
        sentinels: Vec<String>,
        service: String,
        username: Option<String>,
        password: Option<String>,
        db: i64,
    },
    /// Seed nodes of a cluster (`redis://[user:pass@]host:port` each).
    Cluster { seeds: Vec<String> },
}

impl Address {
    /// Parses the URL forms locksmith accepts:
    ///
    /// - `redis://[[user]:pass@]host[:port][/db]` (and anything else
    ///   redis-rs accepts for one server),
    /// - `redis+sentinel://[[user]:pass@]host:port[,host:port…]/service[/db]`,
    /// - `redis+cluster://[[user]:pass@]host:port[,host:port…]`,
    ///
    /// each also as `rediss…` (TLS), and `valkey…`/`valkeys…` as aliases.
    /// With `force_tls`, a plain scheme is taken as its TLS form.
    ///
    /// Credentials in the Sentinel form are for the data nodes; the
    /// Sentinels themselves are contacted without, unless given apart
    /// ([`Address::with_sentinel_credentials`]).
    pub(crate) fn parse(url: &str, force_tls: bool) -> Result<Address> {
        // Asked of the scheme before anything parses the rest, so a form
        // this build left out is named as such.
        let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
        let tls = force_tls || scheme.starts_with("rediss") || scheme.starts_with("valkeys");
        let needs = [
            (tls, "tls", cfg!(feature = "tls")),
            (
                scheme.ends_with("+sentinel"),
                "sentinel",
                cfg!(feature = "sentinel"),
            ),
            (
                scheme.ends_with("+cluster"),
                "cluster",
                cfg!(feature = "cluster"),
            ),
        ];
        if let Some((_, feature, _)) = needs.iter().find(|(wanted, _, built)| *wanted && !built) {
            return Err(left_out(
                &format!("the Redis URL {:?}", redact(url)),
                feature,
            ));
        }
        Address::parse_form(url, force_tls)
    }

    /// [`Address::parse`] without asking whether this build has the
    /// form's cargo feature: for an address that stands for a redis-rs
    /// configuration the caller made (whose TLS is redis-rs's own).
    pub(crate) fn parse_form(url: &str, force_tls: bool) -> Result<Address> {
        let bad = |why: &str| Error::invalid(format!("bad Redis URL {:?}: {why}", redact(url)));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("expected scheme://..."))?;
        let (topology, tls) = match scheme {
            "redis" | "valkey" => ("single", force_tls),
            "rediss" | "valkeys" => ("single", true),
            "redis+sentinel" | "valkey+sentinel" => ("sentinel", force_tls),
            "rediss+sentinel" | "valkeys+sentinel" => ("sentinel", true),
            "redis+cluster" | "valkey+cluster" => ("cluster", force_tls),
            "rediss+cluster" | "valkeys+cluster" => ("cluster", true),
            _ if force_tls => {
                return Err(bad(
                    "TLS was asked for, but this URL's scheme has no TLS form (use rediss://, rediss+sentinel:// or rediss+cluster://)",
                ))
            }
            _ => {
                url.into_connection_info()
                    .map_err(|e| bad(&e.to_string()))?;
                return Ok(Address::Single(url.to_owned()));
            }
        };
        let node_scheme = if tls { "rediss" } else { "redis" };
        if topology == "single" {
            let url = format!("{node_scheme}://{rest}");
            url.as_str()
                .into_connection_info()
                .map_err(|e| bad(&e.to_string()))?;
            return Ok(Address::Single(url));
        }
        let (userinfo, rest) = match rest.rsplit_once('@') {
            Some((user, rest)) => (Some(user), rest),
            None => (None, rest),
        };
        let (hosts, path) = match rest.split_once('/') {
            Some((hosts, path)) => (hosts, path),
            None => (rest, ""),
        };
        let hosts: Vec<&str> = hosts.split(',').filter(|h| !h.is_empty()).collect();
        if hosts.is_empty() {
            return Err(bad("no host:port given"));
        }
        for host in &hosts {
            let (h, port) = host
                .rsplit_once(':')
                .ok_or_else(|| bad(&format!("{host:?} needs a port (host:port)")))?;
            if h.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
                return Err(bad(&format!("{host:?} is not host:port")));
            }
        }
        let (username, password) = match userinfo {
            None => (None, None),
            Some(info) => match info.split_once(':') {
                Some((u, p)) => (
                    (!u.is_empty()).then(|| u.to_owned()),
                    (!p.is_empty()).then(|| p.to_owned()),
                ),
                None => ((!info.is_empty()).then(|| info.to_owned()), None),
            },
        };
        if topology == "cluster" {
            if !path.is_empty() && path != "0" {
                return Err(bad("a cluster has only database 0"));
            }
            let auth = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
            let seeds = hosts
                .iter()
                .map(|h| format!("{node_scheme}://{auth}{h}"))
                .collect();
            return Ok(Address::Cluster { seeds });
        }
        let mut parts = path.split('/').filter(|p| !p.is_empty());
        let service = parts
            .next()
            .ok_or_else(|| {
                bad("the Sentinel form needs the service name: redis+sentinel://host:port/SERVICE")
            })?
            .to_owned();
        let db = match parts.next() {
            Some(db) => db
                .parse::<i64>()
                .map_err(|_| bad(&format!("database {db:?} is not a number")))?,
            None => 0,
        };
        if parts.next().is_some() {
            return Err(bad("expected /service[/db] after the hosts"));
        }
        Ok(Address::Sentinel {
            sentinels: hosts
                .iter()
                .map(|h| format!("{node_scheme}://{h}"))
                .collect(),
            service,
            username,
            password,
            db,
        })
    }

    /// The same address with `credentials` for the Sentinels themselves
    /// (a Sentinel with `requirepass` or ACL users); other topologies are
    /// returned as they are.
    pub(crate) fn with_sentinel_credentials(mut self, credentials: &Credentials) -> Address {
        if let Address::Sentinel { sentinels, .. } = &mut self {
            let user = credentials.username.as_deref().unwrap_or("");
            let userinfo = match &credentials.password {
                Some(p) => format!("{}:{}@", encode(user), encode(p)),
                None if !user.is_empty() => format!("{}@", encode(user)),
                None => String::new(),
            };
            for sentinel in sentinels.iter_mut() {
                if let Some((scheme, host)) = sentinel.split_once("://") {
                    *sentinel = format!("{scheme}://{userinfo}{host}");
                }
            }
        }
        self
    }

    /// `scheme://[user info@]` of a data node's URL: what a node's
    /// `host:port` is appended to, for a connection with this address's
    /// credentials and TLS.
    pub(crate) fn node_prefix(&self) -> String {
        let scheme = if self.is_tls() { "rediss" } else { "redis" };
        let userinfo = match self {
            Address::Single(url) => url
                .split_once("://")
                .and_then(|(_, rest)| rest.split('/').next())
                .and_then(|hosts| hosts.rsplit_once('@'))
                .map(|(info, _)| format!("{info}@"))
                .unwrap_or_default(),
            Address::Cluster { seeds } => seeds
                .first()
                .and_then(|s| s.split_once("://"))
                .and_then(|(_, rest)| rest.rsplit_once('@'))
                .map(|(info, _)| format!("{info}@"))
                .unwrap_or_default(),
            Address::Sentinel {
                username, password, ..
            } => match (username, password) {
                (u, Some(p)) => format!("{}:{}@", encode(u.as_deref().unwrap_or("")), encode(p)),
                (Some(u), None) => format!("{}@", encode(u)),
                (None, None) => String::new(),
            },
        };
        format!("{scheme}://{userinfo}")
    }

    /// A cluster's seed nodes as the caller gave them (URLs of single
    /// nodes, `redis://[user:pass@]host:port`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no seeds, or a seed redis-rs refuses.
    #[cfg(feature = "cluster")]
    pub(crate) fn seeds(seeds: &[String]) -> Result<Address> {
        if seeds.is_empty() {
            return Err(Error::invalid("a cluster needs at least one seed node"));
        }
        for seed in seeds {
            seed.as_str()
                .into_connection_info()
                .map_err(|e| Error::invalid(format!("bad cluster seed {:?}: {e}", redact(seed))))?;
        }
        Ok(Address::Cluster {
            seeds: seeds.to_vec(),
        })
    }

    /// A Sentinel group as the caller gave it: the Sentinels' URLs and the
    /// service name (the data nodes' settings are the caller's own).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no Sentinels, an empty service name,
    /// or a URL redis-rs refuses.
    #[cfg(feature = "sentinel")]
    pub(crate) fn sentinels(sentinels: &[String], service: &str) -> Result<Address> {
        if sentinels.is_empty() || service.is_empty() {
            return Err(Error::invalid(
                "a Sentinel group needs at least one Sentinel and a service name",
            ));
        }
        for sentinel in sentinels {
            sentinel.as_str().into_connection_info().map_err(|e| {
                Error::invalid(format!("bad Sentinel URL {:?}: {e}", redact(sentinel)))
            })?;
        }
        Ok(Address::Sentinel {
            sentinels: sentinels.to_vec(),
            service: service.to_owned(),
            username: None,
            password: None,
            db: 0,
        })
    }

    /// The error for an address whose form this build left out (see
    /// [`Address::parse`], which refuses such a URL first).
    pub(crate) fn unsupported(&self) -> Error {
        let feature = match self {
            Address::Sentinel { .. } => "sentinel",
            Address::Cluster { .. } => "cluster",
            Address::Single(_) => "tls",
        };
        left_out(&self.describe(), feature)
    }

    /// True when this address's connections use TLS.
    pub(crate) fn is_tls(&self) -> bool {
        match self {
            Address::Single(url) => is_tls_url(url),
            Address::Sentinel { sentinels, .. } => sentinels.iter().any(|s| is_tls_url(s)),
            Address::Cluster { seeds } => seeds.iter().any(|s| is_tls_url(s)),
        }
    }

    /// A short description for errors and diagnostics.
    pub(crate) fn describe(&self) -> String {
        match self {
            Address::Single(url) => match url.as_str().into_connection_info() {
                Ok(info) => info.addr().to_string(),
                Err(_) => url.clone(),
            },
            Address::Sentinel {
                sentinels, service, ..
            } => format!(
                "sentinel service {service:?} via {}",
                sentinels
                    .iter()
                    .map(|s| strip_scheme(s.rsplit('@').next().unwrap_or(s)))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Address::Cluster { seeds } => format!(
                "cluster via {}",
                seeds
                    .iter()
                    .map(|s| strip_scheme(s.rsplit('@').next().unwrap_or(s)))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }
}

/// A URL form whose cargo feature this build left out.
fn left_out(what: &str, feature: &str) -> Error {
    Error::invalid(format!(
        "{what} needs redis-locksmith's `{feature}` cargo feature, which this build leaves \
         out (redis-locksmith = {{ version = \"0.1\", features = [\"{feature}\"] }})"
    ))
}

/// `host:port` of a node URL (no scheme, no credentials).
fn strip_scheme(url: &str) -> &str {
    url.split_once("://").map_or(url, |(_, rest)| rest)
}

/// Percent-encodes what a URL's user info cannot carry as it is.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A URL whose form this build left out is refused at parse time with
    /// an error naming the cargo feature (scripts/check-features runs this
    /// in a build with no default features too).
    #[test]
    fn a_form_left_out_names_its_feature() {
        let forms = [
            ("rediss://127.0.0.1:6380", "tls", cfg!(feature = "tls")),
            (
                "redis+sentinel://127.0.0.1:26379/mymaster",
                "sentinel",
                cfg!(feature = "sentinel"),
            ),
            (
                "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
                "cluster",
                cfg!(feature = "cluster"),
            ),
        ];
        for (url, feature, built) in forms {
            match Address::parse(url, false) {
                Ok(_) => assert!(built, "{url} accepted without the `{feature}` feature"),
                Err(e) => {
                    assert!(!built, "{url} refused with the `{feature}` feature: {e}");
                    assert!(e.is_invalid_argument(), "{e:?}");
                    assert!(
                        e.to_string()
                            .contains(&format!("`{feature}` cargo feature")),
                        "{e}"
                    );
                }
            }
        }
        // Forcing TLS on a plain URL needs the feature as much.
        assert_eq!(
            Address::parse("redis://127.0.0.1:6379", true).is_ok(),
            cfg!(feature = "tls")
        );
    }

    #[cfg(all(feature = "tls", feature = "sentinel", feature = "cluster"))]
    #[test]
    fn url_forms() {
        assert_eq!(
            Address::parse("redis://127.0.0.1:6379/2", false).unwrap(),
            Address::Single("redis://127.0.0.1:6379/2".into())
        );
        assert_eq!(
            Address::parse("redis+sentinel://u:pw@h1:26379,h2:26380/mymaster/3", false).unwrap(),
            Address::Sentinel {
                sentinels: vec!["redis://h1:26379".into(), "redis://h2:26380".into()],
                service: "mymaster".into(),
                username: Some("u".into()),
                password: Some("pw".into()),
                db: 3,
            }
        );
        assert_eq!(
            Address::parse("redis+cluster://:pw@h1:7000,h2:7001", false).unwrap(),
            Address::Cluster {
                seeds: vec!["redis://:pw@h1:7000".into(), "redis://:pw@h2:7001".into()]
            }
        );
        for bad in [
            "nonsense",
            "redis+sentinel://h1:26379",
            "redis+sentinel://h1/mymaster",
            "redis+sentinel:///mymaster",
            "redis+cluster://h1:0",
            "redis+cluster://h1:7000/3",
            "redis+sentinel://h1:1/s/x",
        ] {
            let err = Address::parse(bad, false).unwrap_err();
            assert!(err.is_invalid_argument(), "{bad}: {err}");
        }
        let err = Address::parse("redis+unix:///tmp/r.sock", true).unwrap_err();
        assert!(err.to_string().contains("no TLS form"), "{err}");
    }

    #[cfg(all(feature = "tls", feature = "sentinel", feature = "cluster"))]
    #[test]
    fn tls_and_valkey_forms() {
        assert_eq!(
            Address::parse("valkeys://u:p@h:6380/1", false).unwrap(),
            Address::Single("rediss://u:p@h:6380/1".into())
        );
        assert_eq!(
            Address::parse("redis://h:6379", true).unwrap(),
            Address::Single("rediss://h:6379".into())
        );
        assert_eq!(
            Address::parse("valkey://h:6379", false).unwrap(),
            Address::Single("redis://h:6379".into())
        );
        let cluster = Address::parse("rediss+cluster://:pw@h1:7000,h2:7001", false).unwrap();
        assert_eq!(
            cluster,
            Address::Cluster {
                seeds: vec!["rediss://:pw@h1:7000".into(), "rediss://:pw@h2:7001".into()]
            }
        );
        assert!(cluster.is_tls());
        assert_eq!(cluster.describe(), "cluster via h1:7000,h2:7001");
        let sentinel = Address::parse("valkey+sentinel://h1:26379/svc", true)
            .unwrap()
            .with_sentinel_credentials(&Credentials {
                username: Some("sen".into()),
                password: Some("p@ss:w".into()),
            });
        let Address::Sentinel { sentinels, .. } = &sentinel else {
            panic!("{sentinel:?}");
        };
        assert_eq!(
            sentinels,
            &vec!["rediss://sen:p%40ss%3Aw@h1:26379".to_owned()]
        );
        assert!(sentinel.is_tls());
        assert_eq!(sentinel.node_prefix(), "rediss://");
        assert_eq!(cluster.node_prefix(), "rediss://:pw@");
        assert_eq!(
            Address::parse("redis://app:pw@h:1/2", false)
                .unwrap()
                .node_prefix(),
            "redis://app:pw@"
        );
        assert!(
            !sentinel.describe().contains("p%40ss"),
            "{}",
            sentinel.describe()
        );
    }
}
