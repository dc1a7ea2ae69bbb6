//! The notify hub's pub/sub connection, for each topology.
//!
//! - Single server: a dedicated RESP2 pub/sub connection (`SUBSCRIBE`).
//! - Sentinel: the same, to the primary the Sentinels name; when the
//!   command connection switches primary (a failover), the subscription
//!   ends and the hub opens a new one on the new primary.
//! - Cluster: a RESP3 cluster connection whose push messages arrive on a
//!   channel. With sharded notifications (`SSUBSCRIBE`, Redis 7+) each
//!   channel is subscribed on the primary that owns its slot, and redis-rs
//!   moves the subscription when the slot moves (a migration or a
//!   failover), announcing it with a fresh `ssubscribe` push: the hub then
//!   wakes that channel's waiters, since a message may have been missed
//!   while it moved. Classic `SUBSCRIBE` works on any node (the cluster
//!   bus carries `PUBLISH` everywhere).

use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;
#[cfg(feature = "cluster")]
use redis::{PushInfo, PushKind};
use redis::{RedisResult, Value};
#[cfg(feature = "cluster")]
use tokio::sync::mpsc;
use tokio::sync::watch;

#[cfg(feature = "cluster")]
use crate::engine::conn::{NotifyMode, Timing};
use crate::engine::security::Security;
#[cfg(feature = "cluster")]
use crate::engine::topology::cluster_client;
#[cfg(feature = "sentinel")]
use crate::engine::topology::SentinelConn;

/// Where the hub's connection goes.
#[derive(Clone)]
pub(crate) enum Source {
    /// One server, and how its connections authenticate.
    Single(redis::Client, Security),
    #[cfg(feature = "sentinel")]
    /// The current primary of a Sentinel-managed group.
    Sentinel(SentinelConn),
    #[cfg(feature = "cluster")]
    /// A cluster, with the notification mode the client uses there.
    Cluster {
        seeds: Vec<String>,
        timing: Timing,
        mode: NotifyMode,
        security: Security,
    },
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Single(..) => f.write_str("Source::Single"),
            #[cfg(feature = "sentinel")]
            Source::Sentinel(_) => f.write_str("Source::Sentinel"),
            #[cfg(feature = "cluster")]
            Source::Cluster { mode, .. } => write!(f, "Source::Cluster({mode:?})"),
        }
    }
}

/// What the connection reports.
// Only the cluster connection reports the middle three.
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(crate) enum Event {
    /// A message arrived on this channel, with this payload.
    Message(String, Vec<u8>),
    /// The channel was (re)subscribed by the connection on its own (its
    /// slot moved, or a node connection was re-established): a message may
    /// have been missed meanwhile.
    Resubscribed(String),
    /// The server ended a sharded subscription by itself (its slot moved
    /// to another node): subscribe again, which reaches the new owner.
    Dropped(String),
    /// Part of the connection dropped and is being re-established by the
    /// connection itself: any message may have been missed.
    Interrupted,
    /// The connection is gone (or the primary changed): open a new one.
    Closed,
}

/// One open pub/sub connection.
pub(crate) enum Subscriber {
    /// RESP2 pub/sub to one server; `epochs` ends the subscription when a
    /// Sentinel-managed command connection switches primary.
    Plain {
        sink: PubSubSink,
        stream: PubSubStream,
        epochs: Option<watch::Receiver<u64>>,
    },
    #[cfg(feature = "cluster")]
    /// RESP3 cluster connection; pushes arrive on `pushes`.
    Cluster {
        conn: ClusterConnection,
        pushes: mpsc::UnboundedReceiver<PushInfo>,
        mode: NotifyMode,
    },
}

impl Subscriber {
    /// Opens a connection to `source`.
    pub(crate) async fn open(source: &Source) -> RedisResult<Subscriber> {
        match source {
            Source::Single(client, security) => {
                let client = security
                    .refreshed(client.clone())
                    .map_err(|e| redis::RedisError::from(std::io::Error::other(e.to_string())))?;
                let (sink, stream) = client.get_async_pubsub().await?.split();
                Ok(Subscriber::Plain {
                    sink,
                    stream,
                    epochs: None,
                })
            }
            #[cfg(feature = "sentinel")]
            Source::Sentinel(sentinel) => {
                // Watch from before asking, so a switch during the ask is
                // not missed.
                let mut epochs = sentinel.epochs();
                epochs.borrow_and_update();
                let client = sentinel.primary_client().await?;
                let client = sentinel
                    .security()
                    .refreshed(client)
                    .map_err(|e| redis::RedisError::from(std::io::Error::other(e.to_string())))?;
                let (sink, stream) = client.get_async_pubsub().await?.split();
                Ok(Subscriber::Plain {
                    sink,
                    stream,
                    epochs: Some(epochs),
                })
            }
            #[cfg(feature = "cluster")]
            Source::Cluster {
                seeds,
                timing,
                mode,
                security,
            } => {
                let (tx, pushes) = mpsc::unbounded_channel();
                let client = cluster_client(seeds, *timing, Some(tx), security)
                    .map_err(|e| redis::RedisError::from(std::io::Error::other(e.to_string())))?;
                let conn = client.get_async_connection().await?;
                Ok(Subscriber::Cluster {
                    conn,
                    pushes,
                    mode: *mode,
                })
            }
        }
    }

    /// Subscribes to `channels`.
    pub(crate) async fn subscribe(&mut self, channels: &[String]) -> RedisResult<()> {
        match self {
            Subscriber::Plain { sink, .. } => sink.subscribe(channels).await,
            #[cfg(feature = "cluster")]
            Subscriber::Cluster { conn, mode, .. } => {
                // One at a time: channels of different slots may live on
                // different nodes, and SSUBSCRIBE takes one slot per call.
                for channel in channels {
                    if mode.classic() {
                        conn.subscribe(channel).await?;
                    }
                    if mode.sharded() {
                        conn.ssubscribe(channel).await?;
                    }
                }
                Ok(())
            }
        }
    }

    /// Unsubscribes from `channel`.
    pub(crate) async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Subscriber::Plain { sink, .. } => sink.unsubscribe(channel).await,
            #[cfg(feature = "cluster")]
            Subscriber::Cluster { conn, mode, .. } => {
                if mode.classic() {
                    conn.unsubscribe(channel).await?;
                }
                if mode.sharded() {
                    conn.sunsubscribe(channel).await?;
                }
                Ok(())
            }
        }
    }

    /// Checks the connection with `PING`.
    pub(crate) async fn ping(&mut self) -> RedisResult<()> {
        match self {
            Subscriber::Plain { sink, .. } => sink.ping::<Value>().await.map(drop),
            #[cfg(feature = "cluster")]
            Subscriber::Cluster { conn, .. } => redis::cmd("PING")
                .query_async::<Value>(conn)
                .await
                .map(drop),
        }
    }

    /// The next event.
    pub(crate) async fn next(&mut self) -> Event {
        match self {
            Subscriber::Plain { stream, epochs, .. } => {
                let switched = async {
                    match epochs {
                        Some(epochs) => {
                            let _ = epochs.changed().await;
                        }
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    message = stream.next() => match message {
                        Some(message) => Event::Message(
                            message.get_channel_name().to_owned(),
                            message.get_payload_bytes().to_vec(),
                        ),
                        None => Event::Closed,
                    },
                    () = switched => Event::Closed,
                }
            }
            #[cfg(feature = "cluster")]
            Subscriber::Cluster { pushes, .. } => loop {
                let Some(push) = pushes.recv().await else {
                    return Event::Closed;
                };
                let channel = || match push.data.first() {
                    Some(Value::BulkString(bytes)) => {
                        Some(String::from_utf8_lossy(bytes).into_owned())
                    }
                    Some(Value::SimpleString(s)) => Some(s.clone()),
                    _ => None,
                };
                match push.kind {
                    PushKind::Message | PushKind::SMessage => {
                        if let Some(channel) = channel() {
                            let payload = match push.data.get(1) {
                                Some(Value::BulkString(bytes)) => bytes.clone(),
                                Some(Value::SimpleString(s)) => s.clone().into_bytes(),
                                _ => Vec::new(),
                            };
                            return Event::Message(channel, payload);
                        }
                    }
                    PushKind::Subscribe | PushKind::SSubscribe => {
                        if let Some(channel) = channel() {
                            return Event::Resubscribed(channel);
                        }
                    }
                    PushKind::SUnsubscribe => {
                        if let Some(channel) = channel() {
                            return Event::Dropped(channel);
                        }
                    }
                    PushKind::Disconnection => return Event::Interrupted,
                    _ => {}
                }
            },
        }
    }
}
