//! [`FaultProxy`]: a TCP proxy whose behaviour (pass, delay, black hole,
//! reset) can be switched while connections are open.
//!
//! Plain threads, not tasks: the proxy must keep working whether or not the
//! test runs inside a tokio runtime, and whether that runtime is busy.

use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often blocked reads, writes and sleeps look at the mode and the stop
/// flag: the upper bound on how long a mode switch takes to bite.
const TICK: Duration = Duration::from_millis(10);

/// Bounds dialling the target, so a dead target resets the client quickly
/// instead of holding it.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// What a [`FaultProxy`] does to the traffic passing through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FaultMode {
    /// Forward everything as it comes.
    #[default]
    Pass,
    /// Hold every chunk of data for at least this long before forwarding
    /// it, in each direction: a request-reply round trip takes at least
    /// twice this much longer.
    Latency(Duration),
    /// Keep every connection (and accept new ones) but forward nothing in
    /// either direction, like a network partition. Nothing is lost: bytes
    /// wait in the socket buffers and flow again once the mode changes, as
    /// they would after a partition heals before TCP gives up.
    BlackHole,
    /// Reset (RST) every open connection now, and every new connection as
    /// soon as it is accepted, until the mode changes.
    Reset,
}

/// A TCP proxy on `127.0.0.1:<free port>` in front of `target`, for fault
/// injection between a client and a server. Threads stop and connections
/// close on drop.
///
/// ```no_run
/// use locksmith_testkit::{FaultMode, FaultProxy, RedisServer};
/// let server = RedisServer::start()?;
/// let proxy = FaultProxy::start(&server.addr())?;
/// // Point the client at proxy.url() instead of server.url(), then:
/// proxy.set_mode(FaultMode::BlackHole);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct FaultProxy {
    /// Where clients connect.
    addr: SocketAddr,
    /// Where the proxy forwards to, for diagnostics.
    target: SocketAddr,
    /// State the accept loop and the pumps read on every tick.
    shared: Arc<Shared>,
    /// The accept loop, joined on drop.
    acceptor: Option<JoinHandle<()>>,
}

/// State shared by the proxy handle, the accept loop and the pumps.
#[derive(Debug, Default)]
struct Shared {
    /// The current mode.
    mode: Mutex<FaultMode>,
    /// Bumped each time `Reset` is set. A connection remembers the value at
    /// its start and resets when it differs, so even a `Reset` that is
    /// switched off again within one tick reaches every open connection.
    resets: AtomicU64,
    /// Set on drop: every thread exits within a tick.
    stop: AtomicBool,
    /// Pump threads (two per connection), joined on drop.
    pumps: Mutex<Vec<JoinHandle<()>>>,
    /// Connections accepted so far; a connection's index is its place in
    /// accept order.
    accepted: AtomicU64,
    /// Indexes of connections abandoned by [`FaultProxy::sever`].
    severed: Mutex<HashSet<u64>>,
    /// An armed [`FaultProxy::cut_reply_after`], until it has cut.
    cut: Mutex<Option<Cut>>,
    /// Replies cut so far.
    cuts: AtomicU64,
}

/// One reply to cut: the first one on the connection whose request
/// carried `pattern`.
#[derive(Debug)]
struct Cut {
    /// Bytes a request must contain.
    pattern: Vec<u8>,
    /// The connection that sent such a request, once one did.
    doomed: Option<u64>,
}

impl Shared {
    fn mode(&self) -> FaultMode {
        *self.mode.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// A request chunk passed on connection `index`: arms the cut for it
    /// if the chunk carries the pattern.
    fn saw_request(&self, index: u64, chunk: &[u8]) {
        let mut cut = self.cut.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cut) = cut.as_mut() {
            if cut.doomed.is_none()
                && chunk
                    .windows(cut.pattern.len().max(1))
                    .any(|w| w == cut.pattern.as_slice())
            {
                cut.doomed = Some(index);
            }
        }
    }

    /// A reply chunk arrived on connection `index`: true when it must be
    /// cut (then the cut is spent).
    fn cuts_reply(&self, index: u64) -> bool {
        let mut cut = self.cut.lock().unwrap_or_else(|e| e.into_inner());
        if cut.as_ref().is_some_and(|c| c.doomed == Some(index)) {
            *cut = None;
            self.cuts.fetch_add(1, Ordering::SeqCst);
            return true;
        }
        false
    }

    fn is_severed(&self, index: u64) -> bool {
        self.severed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&index)
    }
}

impl FaultProxy {
    /// Starts a proxy in [`FaultMode::Pass`] in front of `target`
    /// (`host:port`, e.g. [`RedisServer::addr`](crate::RedisServer::addr)).
    ///
    /// # Errors
    /// When `target` is not a socket address or no loopback port can be
    /// bound. The target need not be up yet.
    pub fn start(target: &str) -> io::Result<FaultProxy> {
        let target: SocketAddr = target
            .parse()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{target:?}: {e}")))?;
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let acceptor = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("fault-proxy-{}", addr.port()))
                .spawn(move || accept_loop(listener, target, shared))?
        };
        Ok(FaultProxy {
            addr,
            target,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// Switches the mode; open connections follow within a few milliseconds.
    pub fn set_mode(&self, mode: FaultMode) {
        let mut current = self.shared.mode.lock().unwrap_or_else(|e| e.into_inner());
        if mode == FaultMode::Reset {
            self.shared.resets.fetch_add(1, Ordering::SeqCst);
        }
        *current = mode;
    }

    /// The current mode.
    pub fn mode(&self) -> FaultMode {
        self.shared.mode()
    }

    /// Connections accepted so far (also those reset at once). The next
    /// connection gets this number as its index.
    pub fn connection_count(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Abandons connection `index` (0 = the first accepted) silently and for
    /// good: nothing is forwarded in either direction any more, and the
    /// client's socket stays open without an error. This is a half-open
    /// connection, as after a NAT or firewall dropped the flow or the
    /// server's host rebooted: only a request that times out reveals it.
    /// Other and new connections are not affected.
    pub fn sever(&self, index: u64) {
        self.shared
            .severed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(index);
    }

    /// Cuts one reply: the next request (on any connection) whose bytes
    /// contain `pattern` is forwarded to the server, which runs it, and the
    /// first reply data that comes back on that connection is dropped and
    /// the connection closed with a reset. The client sees its connection
    /// break with the command's outcome unknown although the server did
    /// run it: the case where resending a command that is not idempotent
    /// applies it twice. One-shot; [`FaultProxy::cuts`] counts the cuts.
    pub fn cut_reply_after(&self, pattern: &[u8]) {
        *self.shared.cut.lock().unwrap_or_else(|e| e.into_inner()) = Some(Cut {
            pattern: pattern.to_vec(),
            doomed: None,
        });
    }

    /// Withdraws a [`FaultProxy::cut_reply_after`] that has not cut yet.
    pub fn disarm_cut(&self) {
        *self.shared.cut.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Replies cut by [`FaultProxy::cut_reply_after`] so far.
    pub fn cuts(&self) -> u64 {
        self.shared.cuts.load(Ordering::SeqCst)
    }

    /// `127.0.0.1:<port>` clients should connect to.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// `redis://127.0.0.1:<port>`, for a Redis client.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// The address traffic is forwarded to.
    pub fn target(&self) -> String {
        self.target.to_string()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop out of its blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let pumps =
            std::mem::take(&mut *self.shared.pumps.lock().unwrap_or_else(|e| e.into_inner()));
        for pump in pumps {
            let _ = pump.join();
        }
    }
}

fn accept_loop(listener: TcpListener, target: SocketAddr, shared: Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stopped() {
            return;
        }
        let Ok(client) = client else { continue };
        let index = shared.accepted.fetch_add(1, Ordering::SeqCst);
        let generation = shared.resets.load(Ordering::SeqCst);
        if shared.mode() == FaultMode::Reset {
            reset(&client);
            continue;
        }
        let upstream = match TcpStream::connect_timeout(&target, CONNECT_TIMEOUT) {
            Ok(upstream) => upstream,
            Err(_) => {
                // Tell the client the way an unreachable server would.
                reset(&client);
                continue;
            }
        };
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        let mut pumps = shared.pumps.lock().unwrap_or_else(|e| e.into_inner());
        // Forget finished connections so a long test does not grow the list.
        pumps.retain(|p| !p.is_finished());
        for (from, to, replies) in [(&client, &upstream, false), (&upstream, &client, true)] {
            let pump = Pump {
                from: from.try_clone(),
                to: to.try_clone(),
                client: client.try_clone(),
                replies,
                generation,
                index,
                shared: shared.clone(),
            };
            if let Ok(handle) = std::thread::Builder::new()
                .name("fault-proxy-pump".into())
                .spawn(move || pump.run())
            {
                pumps.push(handle);
            }
        }
    }
}

/// Closes `stream` with a TCP reset instead of an orderly FIN.
fn reset(stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
}

/// One direction of one connection.
struct Pump {
    /// Where bytes are read.
    from: io::Result<TcpStream>,
    /// Where they are written.
    to: io::Result<TcpStream>,
    /// The client side of the connection, which gets the reset.
    client: io::Result<TcpStream>,
    /// True for the server-to-client direction.
    replies: bool,
    /// `Shared::resets` when the connection was accepted.
    generation: u64,
    /// The connection's index, for [`FaultProxy::sever`].
    index: u64,
    /// Mode and stop flag.
    shared: Arc<Shared>,
}

/// Why a pump stopped.
enum End {
    /// The connection must be reset (mode `Reset`).
    Reset,
    /// A reply was cut: reset the client and wake the other direction.
    Cut,
    /// The connection is over (EOF, error or proxy drop).
    Close,
}

impl Pump {
    fn run(self) {
        let (Ok(mut from), Ok(mut to), Ok(client)) = (self.from, self.to, self.client) else {
            return;
        };
        let ctl = Control {
            replies: self.replies,
            generation: self.generation,
            index: self.index,
            shared: self.shared,
        };
        match pump(&mut from, &mut to, &ctl) {
            End::Reset => {
                // Both pumps of the connection see the reset; the RST goes
                // out when the last handle of the client socket closes.
                reset(&client);
            }
            End::Cut => {
                reset(&client);
                let _ = client.shutdown(Shutdown::Both);
                let _ = from.shutdown(Shutdown::Both);
                let _ = to.shutdown(Shutdown::Both);
            }
            End::Close => {
                // Wake the other direction too.
                let _ = from.shutdown(Shutdown::Both);
                let _ = to.shutdown(Shutdown::Both);
            }
        }
    }
}

/// What a pump checks on every tick.
struct Control {
    /// True for the server-to-client direction.
    replies: bool,
    /// `Shared::resets` when the connection was accepted.
    generation: u64,
    /// The connection's index, for [`FaultProxy::sever`].
    index: u64,
    /// Mode and stop flag.
    shared: Arc<Shared>,
}

impl Control {
    /// `Some(end)` when the pump must stop now.
    fn check(&self) -> Option<End> {
        if self.shared.stopped() {
            Some(End::Close)
        } else if self.shared.resets.load(Ordering::SeqCst) != self.generation {
            Some(End::Reset)
        } else {
            None
        }
    }

    /// Holds a chunk that was just read as the mode now demands (the mode
    /// may have changed while the read was blocked): until the black hole
    /// ends, then for the latency. `Some(end)` when the pump must stop.
    fn hold(&self) -> Option<End> {
        loop {
            if self.shared.is_severed(self.index) {
                if let Some(end) = self.sleep(TICK) {
                    return Some(end);
                }
                continue;
            }
            match self.shared.mode() {
                FaultMode::BlackHole => {
                    if let Some(end) = self.sleep(TICK) {
                        return Some(end);
                    }
                }
                FaultMode::Latency(d) => return self.sleep(d),
                FaultMode::Pass | FaultMode::Reset => return self.check(),
            }
        }
    }

    /// Sleeps `d` in ticks, stopping early when the pump must stop.
    fn sleep(&self, d: Duration) -> Option<End> {
        let until = Instant::now() + d;
        loop {
            if let Some(end) = self.check() {
                return Some(end);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            std::thread::sleep(left.min(TICK));
        }
    }
}

fn pump(from: &mut TcpStream, to: &mut TcpStream, ctl: &Control) -> End {
    if from.set_read_timeout(Some(TICK)).is_err() || to.set_write_timeout(Some(TICK)).is_err() {
        return End::Close;
    }
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if let Some(end) = ctl.check() {
            return end;
        }
        if ctl.shared.mode() == FaultMode::BlackHole || ctl.shared.is_severed(ctl.index) {
            // Read nothing: the bytes stay queued in the kernel.
            std::thread::sleep(TICK);
            continue;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => {
                // Orderly close: pass the half-close on, let the other
                // direction finish.
                let _ = to.shutdown(Shutdown::Write);
                return End::Close;
            }
            Ok(n) => n,
            Err(e) if is_tick(&e) => continue,
            Err(_) => return End::Close,
        };
        if ctl.replies {
            if ctl.shared.cuts_reply(ctl.index) {
                return End::Cut;
            }
        } else {
            // Armed before the request goes on, so its own reply cannot
            // slip through first. (A reply to an earlier request still in
            // flight would be cut instead: callers cut on a quiet
            // connection, with their scripts already loaded.)
            ctl.shared.saw_request(ctl.index, &buf[..n]);
        }
        if let Some(end) = ctl.hold() {
            return end;
        }
        if let Some(end) = write_all(to, &buf[..n], ctl) {
            return end;
        }
    }
}

/// Writes all of `data`, checking the controls between partial writes so a
/// peer that stops reading cannot wedge the pump past a drop or reset.
fn write_all(to: &mut TcpStream, mut data: &[u8], ctl: &Control) -> Option<End> {
    while !data.is_empty() {
        if let Some(end) = ctl.check() {
            return Some(end);
        }
        match to.write(data) {
            Ok(0) => return Some(End::Close),
            Ok(n) => data = &data[n..],
            Err(e) if is_tick(&e) => {}
            Err(_) => return Some(End::Close),
        }
    }
    None
}

/// True for the errors a read or write timeout produces.
fn is_tick(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}
