//! The checks and questions of a first connection: is the deployment what
//! the URL says, which server answers, can replicas acknowledge writes,
//! does the server have sharded pub/sub, which major version it runs.

use std::time::Duration;

use redis::Value;

use crate::engine::conn::Acks;

use crate::engine::topology::{Address, Conn};
use crate::error::{Error, Result};

/// Turns a failed first connection into an error that says what to fix.
pub(crate) fn explain_connect(address: &Address, err: Error) -> Error {
    let Error::Connect { addr, source } = err else {
        return err;
    };
    let text = source.to_string();
    if matches!(address, Address::Cluster { .. })
        && (text.contains("cluster support disabled") || text.contains("ERR This instance"))
    {
        return Error::invalid(format!(
            "{addr} is a standalone server, not a cluster node: use redis://host:port for it"
        ));
    }
    Error::Connect { addr, source }
}

/// Checks that the deployment is what the URL says and is usable: a
/// `redis://` URL must not point at a cluster node (every command would be
/// redirected), and a cluster must serve all of its slots.
pub(crate) async fn check_deployment(address: &Address, conn: &Conn) -> Result<()> {
    let describe = address.describe();
    let cluster = matches!(address, Address::Cluster { .. });
    // CLUSTER INFO on a cluster (one node answers), INFO cluster elsewhere.
    let mut query = if cluster {
        redis::cmd("CLUSTER")
    } else {
        redis::cmd("INFO")
    };
    query.arg(if cluster { "INFO" } else { "cluster" });
    let text: String = query
        .query_async(&mut conn.clone())
        .await
        .map_err(|source| Error::Connect {
            addr: describe.clone(),
            source,
        })?;
    let field = |name: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
            .unwrap_or_default()
    };
    if cluster {
        let (assigned, state) = (field("cluster_slots_assigned"), field("cluster_state"));
        if assigned != "16384" || state != "ok" {
            return Err(Error::invalid(format!(
                "{describe}: the cluster serves {assigned} of 16384 slots (state {state}); assign every slot (redis-cli --cluster fix) before using it"
            )));
        }
    } else if field("cluster_enabled") == "1" {
        return Err(Error::invalid(format!(
            "{describe} is a Redis Cluster node: use redis+cluster://host:port[,host:port…] for it"
        )));
    }
    Ok(())
}

/// Which server (or cluster) `conn` reaches, whatever address named it:
/// the server's `run_id` (one server, or the primary a Sentinel group
/// named at connect), or for a cluster the smallest node id of its nodes.
/// Two clients that answer the same id talk to the same data, however
/// their URLs differ (`localhost` and `127.0.0.1`, two DNS names).
pub(crate) async fn server_identity(address: &Address, conn: &Conn) -> Result<String> {
    let describe = address.describe();
    let fail = |source: redis::RedisError| Error::Connect {
        addr: describe.clone(),
        source,
    };
    let (cmd, arg) = match address {
        Address::Cluster { .. } => ("CLUSTER", "NODES"),
        _ => ("INFO", "server"),
    };
    let text: String = redis::cmd(cmd)
        .arg(arg)
        .query_async(&mut conn.clone())
        .await
        .map_err(fail)?;
    if matches!(address, Address::Cluster { .. }) {
        let smallest = text
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .min()
            .unwrap_or_default();
        return Ok(format!("cluster:{smallest}"));
    }
    let run_id = text
        .lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(str::trim)
        .unwrap_or_default();
    Ok(format!("server:{run_id}"))
}

/// Resolves the replica acknowledgement policy against the deployment:
/// the fewest replicas any primary has (`connected_slaves`) decides the
/// default, and caps what may be asked for.
pub(crate) async fn replica_acks(
    address: &Address,
    conn: &Conn,
    wanted: Option<Acks>,
    default_timeout: Option<Duration>,
    command_timeout: Duration,
) -> Result<(Acks, Option<String>)> {
    let acks = replica_acks_wanted(address, conn, wanted, default_timeout, command_timeout).await?;
    if acks.min == 0 {
        return Ok((acks, None));
    }
    // Proxies, serverless offerings and ACL users may refuse WAIT
    // (renamed away, "unknown command", NOPERM). `WAIT 0 0` answers at
    // once where it is allowed.
    let mut probe = conn.clone();
    let refused = match redis::cmd("WAIT")
        .arg(0)
        .arg(0)
        .query_async::<Value>(&mut probe)
        .await
    {
        Ok(_) => return Ok((acks, None)),
        Err(e) if is_refusal(&e) => e,
        Err(e) => return Err(Error::Redis(e)),
    };
    if wanted.is_some() {
        return Err(Error::invalid(format!(
            "replica_acks needs the WAIT command, which {} refuses ({refused}): allow WAIT, or pass 0 to turn acknowledgement off",
            address.describe()
        )));
    }
    let note = format!(
        "replica acknowledgement is off: {} refuses WAIT ({refused})",
        address.describe()
    );
    tracing::warn!(addr = %address.describe(), error = %refused, "replica acknowledgement turned off: the server refuses WAIT");
    metrics::counter!("locksmith_capability_missing_total", "capability" => "wait").increment(1);
    Ok((Acks::default(), Some(note)))
}

/// True unless the deployment refuses sharded pub/sub (a proxy that does
/// not know `SPUBLISH`, an ACL user without the right).
pub(crate) async fn sharded_pubsub(conn: &Conn) -> bool {
    // SPUBLISH is routed to the one node of its channel's slot, whose
    // answer comes back as it is (nobody listens to the probe channel).
    let mut probe = conn.clone();
    !matches!(
        redis::cmd("SPUBLISH")
            .arg("redisson_locksmith_probe")
            .arg("")
            .query_async::<Value>(&mut probe)
            .await,
        Err(e) if is_refusal(&e)
    )
}

/// True when the server refuses a command outright (unknown, renamed
/// away, or not permitted to this user): nothing ran.
fn is_refusal(e: &redis::RedisError) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    e.code() == Some("NOPERM")
        || text.contains("unknown command")
        || text.contains("not allowed")
        || text.contains("cannot be used")
}

/// The acknowledgement the options and the deployment ask for, before
/// checking that the server takes `WAIT`.
async fn replica_acks_wanted(
    address: &Address,
    conn: &Conn,
    wanted: Option<Acks>,
    default_timeout: Option<Duration>,
    command_timeout: Duration,
) -> Result<Acks> {
    if wanted.is_some_and(|a| a.min == 0) {
        return Ok(Acks::default());
    }
    if let Some(timeout) = default_timeout.filter(|_| wanted.is_none()) {
        if timeout.as_millis() == 0 || timeout >= command_timeout {
            return Err(Error::invalid(format!(
                "replica_ack_timeout must be at least 1 ms and shorter than the command timeout ({command_timeout:?}), got {timeout:?}"
            )));
        }
    }
    let mut conn = conn.clone();
    let reply: Value = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut conn)
        .await
        .map_err(Error::Redis)?;
    let texts: Vec<String> = match reply {
        Value::Map(nodes) => nodes
            .into_iter()
            .filter_map(|(_, v)| redis::from_redis_value(v).ok())
            .collect(),
        other => vec![redis::from_redis_value(other).unwrap_or_default()],
    };
    let replicas = texts
        .iter()
        .map(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("connected_slaves:"))
                .and_then(|v| v.trim().parse::<u32>().ok())
                .unwrap_or(0)
        })
        .min()
        .unwrap_or(0);
    match wanted {
        // WAIT travels with the call it follows, so it must leave that
        // call room within the command timeout.
        None if replicas > 0 => Ok(Acks {
            min: 1,
            timeout: default_timeout.unwrap_or_else(|| {
                crate::engine::conn::DEFAULT_ACK_TIMEOUT.min(command_timeout / 2)
            }),
        }),
        None => Ok(Acks::default()),
        Some(acks) if acks.timeout.as_millis() == 0 || acks.timeout >= command_timeout => {
            Err(Error::invalid(format!(
                "replica_acks timeout must be at least 1 ms and shorter than the command timeout ({command_timeout:?}), got {:?}",
                acks.timeout
            )))
        }
        Some(acks) if acks.min > replicas => Err(Error::invalid(format!(
            "replica_acks asks for {} acknowledgement(s) but {} has {replicas} connected replica(s){}: lower the minimum, or pass 0 to turn acknowledgement off",
            acks.min,
            address.describe(),
            if matches!(address, Address::Cluster { .. }) { " on its smallest shard" } else { "" },
        ))),
        Some(acks) => Ok(acks),
    }
}

/// The texts of an `INFO` reply: one, or on a cluster, where redis-rs asks
/// every primary and answers with a map by node, each primary's.
fn info_texts(reply: Value) -> Vec<String> {
    match reply {
        Value::Map(nodes) => nodes
            .into_iter()
            .map(|(_, v)| redis::from_redis_value::<String>(v).unwrap_or_default())
            .collect(),
        other => vec![redis::from_redis_value::<String>(other).unwrap_or_default()],
    }
}

/// The oldest Redis every primitive runs on: the fair lock's queue uses
/// `LPOS` (6.0.6), release notifications on a cluster a RESP3
/// connection (6.0), ACL users `AUTH user pass` (6.0).
pub(crate) const OLDEST: (u32, u32, u32) = (6, 0, 6);

/// The Redis version whose commands a server speaks, read from `INFO
/// server` (Valkey answers the Redis version it is compatible with in
/// `redis_version`, and its own in `valkey_version`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerVersion {
    /// `Redis 6.0.16`, `Valkey 8.0.1`: what to show a person.
    pub(crate) product: String,
    /// The Redis version the server is compatible with.
    pub(crate) redis: (u32, u32, u32),
}

impl ServerVersion {
    /// Parses `INFO server`'s text; `None` when it names no version.
    pub(crate) fn parse(info: &str) -> Option<ServerVersion> {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        // The leading digits of each part: `6.0.7-rc1` is 6.0.7.
        let number = |part: &str| {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().ok()
        };
        let triple = |text: &str| {
            let mut parts = text.split('.');
            let major = number(parts.next()?)?;
            let minor = number(parts.next()?)?;
            let patch = parts.next().and_then(number).unwrap_or(0);
            Some((major, minor, patch))
        };
        match (field("redis_version"), field("valkey_version")) {
            (Some(redis), valkey) => Some(ServerVersion {
                redis: triple(redis)?,
                product: match valkey {
                    Some(v) => format!("Valkey {v}"),
                    None => format!("Redis {redis}"),
                },
            }),
            // A Valkey that stopped naming the Redis version it speaks:
            // every Valkey speaks at least Redis 7.2.
            (None, Some(valkey)) => {
                triple(valkey)?;
                Some(ServerVersion {
                    redis: (7, 2, 0),
                    product: format!("Valkey {valkey}"),
                })
            }
            (None, None) => None,
        }
    }

    /// The oldest version among the `INFO server` texts of a deployment's
    /// primaries (one text for one server), said as such when there are
    /// several; `None` when one of them names no version, or none came.
    pub(crate) fn oldest(texts: &[String]) -> Option<ServerVersion> {
        let mut oldest: Option<ServerVersion> = None;
        for text in texts {
            let version = ServerVersion::parse(text)?;
            if oldest.as_ref().is_none_or(|o| version.redis < o.redis) {
                oldest = Some(version);
            }
        }
        let mut oldest = oldest?;
        if texts.len() > 1 {
            oldest.product = format!(
                "{} (the oldest of its {} primaries)",
                oldest.product,
                texts.len()
            );
        }
        Some(oldest)
    }

    /// Sharded pub/sub and scripts flagged `allow-cross-slot-keys`
    /// arrived in Redis 7.0.
    pub(crate) fn has_7_0(&self) -> bool {
        self.redis >= (7, 0, 0)
    }
}

/// The version of the server `conn` reaches; on a cluster the oldest of
/// its primaries' (a cluster in the middle of a rolling upgrade is as
/// capable as its oldest primary). A server older than [`OLDEST`] is
/// refused here, at connect, naming what it lacks, rather than at the
/// first acquire with a script error.
pub(crate) async fn server_version(address: &Address, conn: &Conn) -> Result<ServerVersion> {
    let mut conn = conn.clone();
    let reply: Value = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .map_err(Error::Redis)?;
    let texts = info_texts(reply);
    let Some(version) = ServerVersion::oldest(&texts) else {
        return Err(Error::protocol(format!(
            "{}: INFO server names no version the library can read (no redis_version or valkey_version)",
            address.describe()
        )));
    };
    if version.redis < OLDEST {
        let (a, b, c) = OLDEST;
        let cluster = matches!(address, Address::Cluster { .. });
        return Err(Error::Unsupported {
            addr: address.describe(),
            server: version.product,
            needs: format!("Redis {a}.{b}.{c} or later (or any Valkey)"),
            feature: if cluster {
                "the fair lock's queue (LPOS arrived in 6.0.6) and release notifications over RESP3 on a cluster (6.0)"
            } else {
                "the fair lock's queue (LPOS arrived in 6.0.6)"
            }
            .to_owned(),
        });
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::ServerVersion;

    #[test]
    fn versions_are_read_from_info() {
        let redis6 =
            ServerVersion::parse("# Server\r\nredis_version:6.0.16\r\nredis_mode:standalone\r\n")
                .unwrap();
        assert_eq!(redis6.product, "Redis 6.0.16");
        assert_eq!(redis6.redis, (6, 0, 16));
        assert!(!redis6.has_7_0());
        let valkey = ServerVersion::parse(
            "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n",
        )
        .unwrap();
        assert_eq!(valkey.product, "Valkey 8.0.1");
        assert!(valkey.has_7_0());
        let short = ServerVersion::parse("redis_version:8.0\r\n").unwrap();
        assert_eq!(short.redis, (8, 0, 0));
        let suffixed = ServerVersion::parse("redis_version:6.0.7-rc1\r\n").unwrap();
        assert_eq!(suffixed.redis, (6, 0, 7));
        let bare_valkey = ServerVersion::parse("valkey_version:9.0.0\r\n").unwrap();
        assert_eq!(
            (bare_valkey.product.as_str(), bare_valkey.redis),
            ("Valkey 9.0.0", (7, 2, 0))
        );
        assert!(ServerVersion::parse("redis_version:banana\r\n").is_none());
        assert!(ServerVersion::parse("uptime:3\r\n").is_none());
        // A cluster in the middle of an upgrade is as old as its oldest
        // primary, whichever node answers first.
        let nodes = [
            "redis_version:7.0.15\r\n".to_owned(),
            "redis_version:6.2.14\r\n".to_owned(),
            "redis_version:7.2.4\r\nvalkey_version:8.0.1\r\n".to_owned(),
        ];
        let oldest = ServerVersion::oldest(&nodes).unwrap();
        assert_eq!(oldest.redis, (6, 2, 14));
        assert_eq!(
            oldest.product,
            "Redis 6.2.14 (the oldest of its 3 primaries)"
        );
        assert!(!oldest.has_7_0());
        assert!(ServerVersion::oldest(&[]).is_none());
        assert!(ServerVersion::oldest(&[nodes[0].clone(), "uptime:3".to_owned()]).is_none());
        assert!(ServerVersion::parse("redis_version:6.0.5").unwrap().redis < super::OLDEST);
    }
}
