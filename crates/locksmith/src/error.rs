//! The one error type of the library.
//!
//! Callers branch on meaning ([`Error::kind`], [`Error::is_timeout`], ...),
//! not on the variants of the underlying Redis client.

use std::time::Duration;

/// Everything that can go wrong in locksmith.
///
/// The enum is `#[non_exhaustive]`: new failure modes may be added in minor
/// releases, so match on [`Error::kind`] or use the `is_*` helpers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A caller-supplied value was rejected before anything was sent to Redis
    /// (empty or oversized name, zero lease, ...). Nothing was changed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The client could not connect to the Redis server at `addr`.
    #[error("cannot connect to Redis at {addr}: {source}")]
    Connect {
        /// The address that was dialled, as `host:port`.
        addr: String,
        /// What the Redis client reported.
        #[source]
        source: redis::RedisError,
    },

    /// A command (or the connection attempt) did not answer within the
    /// configured timeout. The command may or may not have run on the server.
    #[error("Redis did not answer within {0:?}")]
    Timeout(Duration),

    /// A key exists but holds a value of another type than the primitive
    /// expects (for example a string where the lock hash should be).
    #[error("key {key:?} holds a value of the wrong type for this primitive")]
    WrongType {
        /// The Redis key that has the unexpected type.
        key: String,
    },

    /// The lock was not held by this owner when releasing: it expired, was
    /// force-unlocked, or was never acquired by this owner.
    #[error("lock {name:?} is not held by this owner (lease lost or never acquired)")]
    NotHeld {
        /// The lock's name.
        name: String,
    },

    /// A release whose reply was lost was sent again and found the hold
    /// gone, and nothing tells which of two things happened: the first
    /// send released it, or the hold had already ended (its lease ran
    /// out, it was force-unlocked, or a restart or failover wiped it).
    /// Either way this owner no longer holds the lock. A client built with
    /// [`ClientBuilder::release_receipts`](crate::ClientBuilder::release_receipts)
    /// answers a final release (the owner's last hold) exactly instead:
    /// `Ok` or [`Error::NotHeld`]. Releases of a lock, fair lock,
    /// read-write lock or simple lock answer this; not one whose lease
    /// had run out on the server before it was first sent (that is
    /// `NotHeld`).
    #[error("release of {name:?} is unconfirmed: its reply was lost and the resend found the hold gone (released by the first send, or already lost); this owner does not hold it either way")]
    Unconfirmed {
        /// The lock's name.
        name: String,
    },

    /// A fenced store refused a write: a larger fencing token has written
    /// already, so the writer's lock was lost and granted again since.
    #[error("fenced store {name:?} refused a write with token {token}: token {highest} has written already (this holder's lock was lost)")]
    StaleToken {
        /// The store's name.
        name: String,
        /// The refused writer's token.
        token: u64,
        /// The highest token the store has accepted.
        highest: u64,
    },

    /// A read-write lock owner that holds read holds asked for the write
    /// hold: waiting for it would wait for itself. Release the read holds
    /// first (the reverse, a writer taking read holds, is allowed).
    #[error("read-write lock {name:?}: this owner holds read holds and asked for the write hold (an upgrade would deadlock); release the read holds first")]
    Upgrade {
        /// The lock's name.
        name: String,
    },

    /// A non-reentrant lock ([`Client::non_reentrant_lock`]) was asked for
    /// again by the task that holds it: a second hold is refused, as
    /// Redisson's non-reentrant lock refuses it (nothing was sent).
    ///
    /// [`Client::non_reentrant_lock`]: crate::Client::non_reentrant_lock
    #[error("lock {name:?} is non-reentrant and is already held by this owner and task; release it before acquiring it again")]
    Reentry {
        /// The lock's name.
        name: String,
    },

    /// A permit of a permit-expirable semaphore was not held when it was
    /// released: its lease had run out (`expired`; it is back in the pool,
    /// and its holder had lost it), or no such permit exists (never issued,
    /// or expired and already returned to the pool).
    #[error("permit {id} of semaphore {name:?} is not held: {}", if *.expired { "its lease had run out" } else { "no such permit (never issued, or expired and already returned)" })]
    PermitNotHeld {
        /// The semaphore's name.
        name: String,
        /// The permit id.
        id: String,
        /// True when the permit existed but its lease had run out.
        expired: bool,
    },

    /// Fewer replicas acknowledged a grant than the client requires (see
    /// [`ClientBuilder::replica_acks`](crate::ClientBuilder::replica_acks)).
    /// The grant was rolled back: the caller does not hold the lock.
    #[error("grant of {name:?} reached {acked} replica(s) of the {wanted} required within the timeout; rolled back")]
    NotReplicated {
        /// The primitive's name.
        name: String,
        /// Replicas that acknowledged in time.
        acked: u32,
        /// Replicas required.
        wanted: u32,
    },

    /// Fewer than a majority of a Redlock's nodes answered (down,
    /// unreachable within the per-node timeout, or answering errors), so
    /// the lock can be neither granted nor, on release, confirmed.
    #[error("Redlock{}: {answered} of {nodes} nodes answered, a majority needs {needed} ({errors})", if name.is_empty() { String::new() } else { format!(" {name:?}") })]
    NoQuorum {
        /// The lock's name (empty when connecting).
        name: String,
        /// Nodes that answered.
        answered: usize,
        /// Nodes a majority needs.
        needed: usize,
        /// Nodes in the set.
        nodes: usize,
        /// What the others reported, `addr: error` separated by `; `.
        errors: String,
    },

    /// Redis answered something the library's own script or command
    /// cannot answer: another program changed the primitive's keys in a
    /// layout the library does not know, or a server speaks another
    /// protocol version. Nothing more was changed by the call.
    #[error("unexpected answer from Redis: {0}")]
    Protocol(String),

    /// A failure inside the library (a background task panicked or was
    /// cut off by its runtime ending, an id range was used up, an internal
    /// invariant did not hold). Not caused by the caller's input.
    #[error("internal failure: {0}")]
    Internal(String),

    /// The client was closed ([`Client::close`](crate::Client::close)):
    /// it takes no new acquires and ends the waits that were under way.
    /// Nothing was acquired by the failed call.
    #[error("the client for {addr} is closed; it takes no new acquires")]
    Closed {
        /// The deployment the client was for.
        addr: String,
    },

    /// The lock stayed held by another owner for the whole of a bounded
    /// wait (`#[locked(wait = ..)]` returns it). Redis answered every
    /// call: nothing is held by the caller, and trying again later may
    /// succeed.
    #[error("lock {name:?} stayed held by another owner for the whole wait of {waited:?}")]
    Busy {
        /// The lock's name.
        name: String,
        /// How long the caller waited.
        waited: Duration,
    },

    /// The server is too old for what was asked: for the library at all
    /// (older than Redis 6.0.6), or for an option (sharded notifications
    /// on a cluster before Redis 7.0). Refused when the client is built,
    /// before anything was sent beyond the connection's own questions.
    /// Retrying cannot succeed: upgrade the server, or leave the option
    /// out (the message says which).
    #[error("{addr} runs {server}; locksmith needs {needs} for {feature}")]
    Unsupported {
        /// The deployment, as the URL named it.
        addr: String,
        /// What the server said it is (`Redis 5.0.14`).
        server: String,
        /// The oldest server that has what is missing.
        needs: String,
        /// What needs it.
        feature: String,
    },

    /// Any other error reported by Redis or by the connection to it.
    #[error("Redis error: {0}")]
    Redis(#[from] redis::RedisError),
}

/// The broad category of an [`Error`], for callers that branch on meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Bad input from the caller; retrying the same call cannot succeed.
    InvalidArgument,
    /// The server could not be reached or the connection broke.
    Connection,
    /// No answer in time; the outcome on the server is unknown.
    Timeout,
    /// A key holds a value of another type.
    WrongType,
    /// The caller does not hold the lock it tried to release.
    NotHeld,
    /// A release's outcome is unknown (see [`Error::Unconfirmed`]); the
    /// caller does not hold the lock any more.
    Unconfirmed,
    /// A read-write lock reader asked for the write hold.
    Upgrade,
    /// A non-reentrant lock was asked for again by its holder.
    Reentry,
    /// A fenced store refused a write with a stale fencing token.
    StaleToken,
    /// A grant was not acknowledged by enough replicas and was rolled
    /// back; retrying may succeed once the replicas catch up.
    NotReplicated,
    /// Too few of a Redlock's nodes answered to form a majority.
    NoQuorum,
    /// Any other error answered by Redis.
    Server,
    /// Redis answered something the library cannot read (see
    /// [`Error::Protocol`]).
    Protocol,
    /// A failure inside the library (see [`Error::Internal`]).
    Internal,
    /// The client was closed (see [`Error::Closed`]).
    Closed,
    /// The server refused the credentials (wrong user or password, none
    /// given where one is required), or the ACL user lacks the rights for
    /// a command or key (`NOPERM`). Retrying with the same credentials
    /// cannot succeed.
    Auth,
    /// The TLS handshake failed: a certificate that does not verify or
    /// does not match the host, a server that wants a client certificate,
    /// or TLS spoken to a port that does not speak it.
    Tls,
    /// The lock stayed held by another owner for a whole bounded wait
    /// (see [`Error::Busy`]).
    Busy,
    /// The server is too old for the library (see
    /// [`Error::Unsupported`]).
    Unsupported,
}

/// True for the server's refusals of credentials or rights.
fn is_auth_failure(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"))
}

/// True for a failed TLS handshake (redis-rs reports rustls's errors as
/// I/O errors; their text tells them apart).
fn is_tls_failure(e: &redis::RedisError) -> bool {
    let text = e.to_string();
    [
        "invalid peer certificate",
        "received fatal alert",
        "tls handshake",
        "InvalidContentType",
        "corrupt message",
        "CertificateRequired",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// Shorthand for `Result<T, locksmith::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The category of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::Connect { source, .. } if is_auth_failure(source) => ErrorKind::Auth,
            Error::Connect { source, .. } if is_tls_failure(source) => ErrorKind::Tls,
            Error::Connect { .. } => ErrorKind::Connection,
            Error::Timeout(_) => ErrorKind::Timeout,
            Error::WrongType { .. } => ErrorKind::WrongType,
            Error::NotHeld { .. } | Error::PermitNotHeld { .. } => ErrorKind::NotHeld,
            Error::Unconfirmed { .. } => ErrorKind::Unconfirmed,
            Error::Upgrade { .. } => ErrorKind::Upgrade,
            Error::Reentry { .. } => ErrorKind::Reentry,
            Error::StaleToken { .. } => ErrorKind::StaleToken,
            Error::NotReplicated { .. } => ErrorKind::NotReplicated,
            Error::NoQuorum { .. } => ErrorKind::NoQuorum,
            Error::Protocol(_) => ErrorKind::Protocol,
            Error::Internal(_) => ErrorKind::Internal,
            Error::Closed { .. } => ErrorKind::Closed,
            Error::Busy { .. } => ErrorKind::Busy,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            // While running, only a refused right is final: a failed AUTH
            // on a reconnect (a password rotated before the provider was
            // asked again) stays a connection error, which is resent.
            Error::Redis(e) if e.code() == Some("NOPERM") => ErrorKind::Auth,
            Error::Redis(e) if e.is_timeout() => ErrorKind::Timeout,
            // An answer that does not convert to what the call expects
            // (redis-rs reports it as a parse error, whose retry method is
            // a reconnect): the server answered, in a shape the library
            // cannot read. Resending would get the same answer.
            Error::Redis(e)
                if matches!(
                    e.kind(),
                    redis::ErrorKind::Parse | redis::ErrorKind::UnexpectedReturnType
                ) =>
            {
                ErrorKind::Protocol
            }
            Error::Redis(e)
                if e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_unrecoverable_error() =>
            {
                ErrorKind::Connection
            }
            Error::Redis(_) => ErrorKind::Server,
        }
    }

    /// True when no answer came in time; the command may have run anyway.
    pub fn is_timeout(&self) -> bool {
        self.kind() == ErrorKind::Timeout
    }

    /// True when the server was unreachable or the connection dropped.
    pub fn is_connection_error(&self) -> bool {
        self.kind() == ErrorKind::Connection
    }

    /// True when the reply was lost: the command timed out or the connection
    /// dropped, so it may or may not have run on the server. Every
    /// idempotent call of the library is sent again on such an error (up
    /// to three sends in all); a call that is not idempotent never is.
    pub fn is_reply_lost(&self) -> bool {
        self.is_timeout() || self.is_connection_error()
    }

    /// The one resend rule: after send number `sends` failed with this
    /// error, an idempotent call is sent again.
    pub(crate) fn may_resend(&self, sends: usize) -> bool {
        sends < crate::engine::conn::ATTEMPTS && self.is_reply_lost()
    }

    /// True when the caller passed a value that can never be accepted.
    pub fn is_invalid_argument(&self) -> bool {
        self.kind() == ErrorKind::InvalidArgument
    }

    /// Builds an [`Error::InvalidArgument`] from anything printable.
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }

    /// Builds an [`Error::Protocol`]: Redis answered something unexpected.
    pub(crate) fn protocol(msg: impl Into<String>) -> Self {
        Error::Protocol(msg.into())
    }

    /// Builds an [`Error::Internal`]: a failure inside the library.
    pub(crate) fn internal(msg: impl Into<String>) -> Self {
        Error::Internal(msg.into())
    }

    /// Converts a Redis error raised while touching `key`, turning
    /// `WRONGTYPE` replies into [`Error::WrongType`] naming the key.
    pub(crate) fn from_redis_for_key(err: redis::RedisError, key: &str) -> Self {
        if err.code() == Some("WRONGTYPE") || err.to_string().contains("WRONGTYPE") {
            Error::WrongType {
                key: key.to_owned(),
            }
        } else {
            Error::Redis(err)
        }
    }
}
