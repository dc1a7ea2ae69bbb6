//! How the CLI reaches Redis: the URL and the TLS and ACL options, with
//! redis-cli's flag names where it has one, each also read from an
//! environment variable.

use std::path::PathBuf;

use locksmith::{Client, ClientBuilder};

use crate::exit::CliError;

/// Where the Redis URL comes from when `--redis` is not given, in order.
const REDIS_URL_ENVS: [&str; 2] = ["LOCKSMITH_REDIS_URL", "REDIS_URL"];

/// The URL used when neither `--redis` nor an environment variable is set.
const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// Connection options shared by every subcommand.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ConnArgs {
    /// Redis URL [default: $LOCKSMITH_REDIS_URL, then $REDIS_URL, then
    /// redis://127.0.0.1:6379]. rediss://, rediss+sentinel:// and
    /// rediss+cluster:// speak TLS; valkey:// and valkeys:// are aliases.
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) redis: Option<String>,
    /// Speak TLS even when the URL's scheme is a plain one.
    #[arg(long, global = true, env = "LOCKSMITH_TLS", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) tls: bool,
    /// PEM file of the CAs that sign the servers' certificates (default:
    /// the system's roots). Implies --tls.
    #[arg(long, global = true, env = "LOCKSMITH_CACERT", value_name = "FILE")]
    pub(crate) cacert: Option<PathBuf>,
    /// Client certificate for mutual TLS (PEM); needs --key. Implies --tls.
    #[arg(
        long,
        global = true,
        env = "LOCKSMITH_CERT",
        value_name = "FILE",
        requires = "key"
    )]
    pub(crate) cert: Option<PathBuf>,
    /// Private key of --cert (PEM).
    #[arg(
        long,
        global = true,
        env = "LOCKSMITH_KEY",
        value_name = "FILE",
        requires = "cert"
    )]
    pub(crate) key: Option<PathBuf>,
    /// Do not check the servers' certificates at all. For tests only:
    /// anyone on the path can read and change the traffic. Implies --tls.
    #[arg(long, global = true, env = "LOCKSMITH_INSECURE", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) insecure: bool,
    /// ACL user name (replaces the URL's).
    #[arg(long, global = true, env = "LOCKSMITH_USER", value_name = "NAME")]
    pub(crate) user: Option<String>,
    /// Password (replaces the URL's). Prefer the environment variable: a
    /// flag shows in the process list.
    #[arg(
        long,
        global = true,
        env = "LOCKSMITH_PASS",
        hide_env_values = true,
        value_name = "PASSWORD"
    )]
    pub(crate) pass: Option<String>,
    /// Put before every name (the library's `ClientBuilder::key_prefix`),
    /// to share one Redis between applications: `--key-prefix app1:`
    /// makes `--lock orders` the key `app1:orders`.
    #[arg(
        long,
        global = true,
        env = "LOCKSMITH_KEY_PREFIX",
        value_name = "PREFIX"
    )]
    pub(crate) key_prefix: Option<String>,
    /// How long connecting may take, per connection (the library's
    /// `ClientBuilder::connect_timeout`; a whole cluster or Sentinel
    /// connect gets twice this) [default: 5s].
    #[arg(
        long,
        global = true,
        env = "LOCKSMITH_CONNECT_TIMEOUT",
        value_name = "DUR",
        value_parser = crate::duration::parse_nonzero
    )]
    pub(crate) connect_timeout: Option<std::time::Duration>,
    /// How long one command may wait for its reply (the library's
    /// `ClientBuilder::command_timeout`) [default: 3s].
    #[arg(
        long,
        global = true,
        env = "LOCKSMITH_COMMAND_TIMEOUT",
        value_name = "DUR",
        value_parser = crate::duration::parse_nonzero
    )]
    pub(crate) command_timeout: Option<std::time::Duration>,
}

impl ConnArgs {
    /// `--redis`, else the first environment variable set, else the
    /// default; with `--user` / `--pass` in place of the URL's own.
    pub(crate) fn url(&self) -> String {
        let url = self
            .redis
            .clone()
            .or_else(|| {
                REDIS_URL_ENVS
                    .iter()
                    .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
            })
            .unwrap_or_else(|| DEFAULT_REDIS_URL.to_owned());
        self.with_credentials(&url)
    }

    /// `url` with `--user` / `--pass` as its user info, when given.
    fn with_credentials(&self, url: &str) -> String {
        if self.user.is_none() && self.pass.is_none() {
            return url.to_owned();
        }
        let Some((scheme, rest)) = url.split_once("://") else {
            return url.to_owned();
        };
        // The user info ends at the last '@' before the path.
        let (hosts_end, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let (old, hosts) = match hosts_end.rsplit_once('@') {
            Some((info, hosts)) => (Some(info), hosts),
            None => (None, hosts_end),
        };
        let (old_user, old_pass) = match old.map(|i| i.split_once(':')) {
            Some(Some((u, p))) => (u.to_owned(), Some(p.to_owned())),
            Some(None) => (old.unwrap_or_default().to_owned(), None),
            None => (String::new(), None),
        };
        let user = self.user.as_deref().map(encode).unwrap_or(old_user);
        let pass = self.pass.as_deref().map(encode).or(old_pass);
        let info = match pass {
            Some(p) => format!("{user}:{p}@"),
            None if !user.is_empty() => format!("{user}@"),
            None => String::new(),
        };
        format!("{scheme}://{info}{hosts}{path}")
    }

    /// A builder for the URL with the TLS options applied.
    pub(crate) fn builder(&self) -> ClientBuilder {
        self.builder_for(&self.url())
    }

    /// A builder for another URL (a Redlock node) with the same TLS and
    /// ACL options.
    pub(crate) fn builder_for(&self, url: &str) -> ClientBuilder {
        let mut b = Client::builder(self.with_credentials(url));
        if self.tls {
            b = b.tls(true);
        }
        if let Some(ca) = &self.cacert {
            b = b.tls_ca_file(ca);
        }
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            b = b.tls_client_cert(cert, key);
        }
        if self.insecure {
            b = b.tls_insecure(true);
        }
        if let Some(prefix) = &self.key_prefix {
            b = b.key_prefix(prefix);
        }
        if let Some(timeout) = self.connect_timeout {
            b = b.connect_timeout(timeout);
        }
        if let Some(timeout) = self.command_timeout {
            b = b.command_timeout(timeout);
        }
        b
    }

    /// Connects with every option. What the deployment lacks (sharded
    /// pub/sub, `WAIT`, scripts across slots: [`Client::notes`]) is said
    /// on stderr, one `locksmith: note:` line each, as the library's WARN
    /// logs go nowhere here.
    pub(crate) async fn connect(&self) -> Result<Client, CliError> {
        let client = self.builder().build().await?;
        say_notes(&client);
        Ok(client)
    }
}

/// Says on stderr, one `locksmith: note:` line each, what the deployment
/// lacks and the library works around ([`Client::notes`]).
pub(crate) fn say_notes(client: &Client) {
    for note in client.notes() {
        eprintln!("locksmith: note: {note}");
    }
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

    fn args(url: &str, user: Option<&str>, pass: Option<&str>) -> ConnArgs {
        ConnArgs {
            redis: Some(url.to_owned()),
            user: user.map(str::to_owned),
            pass: pass.map(str::to_owned),
            ..ConnArgs::default()
        }
    }

    #[test]
    fn user_and_pass_replace_the_urls_own() {
        assert_eq!(args("redis://h:1/2", None, None).url(), "redis://h:1/2");
        assert_eq!(
            args("rediss://h:1/2", Some("app"), Some("p@ss")).url(),
            "rediss://app:p%40ss@h:1/2"
        );
        assert_eq!(
            args("redis://old:pw@h:1", None, Some("new")).url(),
            "redis://old:new@h:1"
        );
        assert_eq!(
            args("redis+cluster://u:p@a:1,b:2", Some("app"), None).url(),
            "redis+cluster://app:p@a:1,b:2"
        );
        assert_eq!(
            args("redis+sentinel://a:1,b:2/svc/3", None, Some("pw")).url(),
            "redis+sentinel://:pw@a:1,b:2/svc/3"
        );
    }
}
