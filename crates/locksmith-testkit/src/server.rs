//! [`RedisServer`]: one `redis-server` child process on a free port.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::process::{free_port, spawn_guarded};

/// Environment variable naming the `redis-server` binary to run instead of
/// the one found on `PATH`.
pub const REDIS_SERVER_ENV: &str = "LOCKSMITH_REDIS_SERVER";

/// How long a fresh server may take to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Options for a [`RedisServer`].
#[derive(Debug, Clone, Default)]
pub struct RedisServerBuilder {
    /// Extra `--option value` arguments, for cluster or replica setups.
    args: Vec<String>,
    /// A fixed port instead of a free one (used by `restart`).
    port: Option<u16>,
    /// Contents of a config file passed as the first argument. Sentinel
    /// insists on one it can rewrite, so it lives in the server's directory.
    config_file: Option<String>,
    /// The TLS port, when the server also speaks TLS.
    tls_port: Option<u16>,
}

impl RedisServerBuilder {
    /// Also listens for TLS on a second free port (the plain port stays,
    /// for setup and assertions), with `files`' server certificate; with
    /// `mutual`, TLS clients must present a certificate of `files`' CA.
    ///
    /// # Panics
    /// When no free port can be found (the loopback interface is gone).
    pub fn tls(self, files: &crate::TlsFiles, mutual: bool) -> Self {
        let (cert, key) = files.server_cert();
        self.tls_with(&cert, &key, &files.ca_cert(), mutual)
    }

    /// As [`tls`](Self::tls) with a certificate and key of the caller's
    /// choice (e.g. [`crate::TlsFiles::wrong_name_cert`]) and the CA that
    /// checks client certificates.
    ///
    /// # Panics
    /// When no free port can be found.
    pub fn tls_with(mut self, cert: &Path, key: &Path, ca: &Path, mutual: bool) -> Self {
        let port = free_port().expect("a free loopback port");
        self.tls_port = Some(port);
        self.config("tls-port", port.to_string())
            .config("tls-cert-file", cert.display().to_string())
            .config("tls-key-file", key.display().to_string())
            .config("tls-ca-cert-file", ca.display().to_string())
            .config("tls-auth-clients", if mutual { "yes" } else { "no" })
    }

    /// Moves the TLS port [`tls`](Self::tls) chose to `port`.
    pub(crate) fn tls_port(mut self, port: u16) -> Self {
        self.tls_port = Some(port);
        self.config("tls-port", port.to_string())
    }

    /// Adds one raw command-line argument, e.g. `"--cluster-enabled"`.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Adds `--name value`.
    pub fn config(self, name: &str, value: impl Into<String>) -> Self {
        self.arg(format!("--{name}")).arg(value)
    }

    /// Listens on `port` instead of a free one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Writes `contents` to `redis.conf` in the server's directory and starts
    /// the server with it. The server may rewrite the file (Sentinel does);
    /// a restart reuses the rewritten file.
    pub fn config_file(mut self, contents: impl Into<String>) -> Self {
        self.config_file = Some(contents.into());
        self
    }

    /// Starts the server and waits until it answers `PING`.
    ///
    /// # Errors
    /// When `redis-server` cannot be run or does not answer in time; the
    /// error includes the tail of the server's log.
    pub fn start(self) -> io::Result<RedisServer> {
        let dir = tempfile::Builder::new()
            .prefix("locksmith-redis-")
            .tempdir()?;
        let conf = match &self.config_file {
            Some(contents) => {
                let path = conf_path(dir.path());
                std::fs::write(&path, contents)?;
                Some(path)
            }
            None => None,
        };
        // A free port can be taken by someone else between probing and the
        // server binding it; try a few times with fresh ports.
        let mut last_err = None;
        for _ in 0..5 {
            let port = match self.port {
                Some(p) => p,
                None => free_port()?,
            };
            match launch(port, &self.args, conf.as_deref(), dir.path()) {
                Ok(child) => {
                    return Ok(RedisServer {
                        port,
                        tls_port: self.tls_port,
                        args: self.args,
                        conf,
                        dir,
                        child: Some(child),
                    })
                }
                Err(e) if self.port.is_none() => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }
}

/// A running `redis-server` on `127.0.0.1:<free port>`, with no persistence
/// and a private temporary directory. Killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    /// Kept across restarts so clients can reconnect to the same address.
    port: u16,
    /// The TLS port, if the server speaks TLS (see
    /// [`RedisServerBuilder::tls`]).
    tls_port: Option<u16>,
    /// Extra arguments, replayed on restart.
    args: Vec<String>,
    /// The config file, if any; reused as rewritten by the server on restart.
    conf: Option<PathBuf>,
    /// Working directory (cluster config, logs); deleted on drop.
    dir: tempfile::TempDir,
    /// The live process, or `None` after `kill`.
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a plain server on a free port.
    ///
    /// # Errors
    /// See [`RedisServerBuilder::start`].
    pub fn start() -> io::Result<RedisServer> {
        RedisServerBuilder::default().start()
    }

    /// A builder for servers with extra options.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// The TCP port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The TLS port, if the server was started with TLS.
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// `rediss://127.0.0.1:<TLS port>`.
    ///
    /// # Panics
    /// When the server was started without TLS.
    pub fn tls_url(&self) -> String {
        let port = self.tls_port.expect("the server was started with TLS");
        format!("rediss://127.0.0.1:{port}")
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's working directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id, while the server runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A synchronous redis-rs connection, for setup and assertions.
    ///
    /// # Errors
    /// When the server does not accept the connection.
    pub fn connection(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(5))
    }

    /// Kills the server (SIGKILL) and starts it again on the same port with
    /// the same options; all data is gone (no persistence).
    ///
    /// # Errors
    /// When the new process does not come up.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill_child();
        // The old process has released the port once `wait` returned, but a
        // restart right after a kill can still race the kernel; retry briefly.
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match launch(self.port, &self.args, self.conf.as_deref(), self.dir.path()) {
                Ok(child) => {
                    self.child = Some(child);
                    return Ok(());
                }
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Freezes the process (SIGSTOP): connections stay open, nothing answers.
    ///
    /// # Errors
    /// When the process is not running.
    pub fn pause(&self) -> io::Result<()> {
        self.signal(Signal::SIGSTOP)
    }

    /// Thaws a paused process (SIGCONT).
    ///
    /// # Errors
    /// When the process is not running.
    pub fn resume(&self) -> io::Result<()> {
        self.signal(Signal::SIGCONT)
    }

    /// Kills the process with SIGKILL and reaps it. `restart` brings it back.
    pub fn kill(&mut self) {
        self.kill_child();
    }

    /// True while the process is running (paused counts as running).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The last lines of the server's log, for error messages.
    pub fn log_tail(&self) -> String {
        log_tail(self.dir.path())
    }

    fn signal(&self, signal: Signal) -> io::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| io::Error::other("redis-server is not running"))?;
        let pid = i32::try_from(pid).map_err(io::Error::other)?;
        kill(Pid::from_raw(pid), signal).map_err(io::Error::from)
    }

    fn kill_child(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A stopped process still dies from SIGKILL.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill_child();
    }
}

fn log_path(dir: &Path) -> PathBuf {
    dir.join("redis.log")
}

fn conf_path(dir: &Path) -> PathBuf {
    dir.join("redis.conf")
}

fn log_tail(dir: &Path) -> String {
    let log = std::fs::read_to_string(log_path(dir)).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Spawns `redis-server` on `port` with the base options plus `extra`, and
/// waits until it answers as itself (`INFO`'s process id). On failure the process is killed and the
/// error carries the tail of its log.
fn launch(port: u16, extra: &[String], conf: Option<&Path>, dir: &Path) -> io::Result<Child> {
    let binary = match std::env::var(REDIS_SERVER_ENV) {
        Ok(binary) => binary,
        Err(_) => crate::versions::binary("redis-server")?,
    };
    // redis-server only takes a config file as its first argument.
    let mut args: Vec<String> = conf.map(|p| p.display().to_string()).into_iter().collect();
    args.extend(
        [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
            "--daemonize",
            "no",
            "--dir",
            &dir.display().to_string(),
            "--logfile",
            &log_path(dir).display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    args.extend(extra.iter().cloned());
    let mut child = spawn_guarded(&binary, &args, |cmd| {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
    })
    .map_err(|e| io::Error::new(e.kind(), format!("cannot run {binary}: {e}")))?;
    match wait_ready(port, &mut child, dir) {
        Ok(()) => Ok(child),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

fn wait_ready(port: u16, child: &mut Child, dir: &Path) -> io::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let client =
        redis::Client::open(format!("redis://127.0.0.1:{port}")).map_err(io::Error::other)?;
    loop {
        if let Some(status) = child.try_wait()? {
            return Err(io::Error::other(format!(
                "redis-server on port {port} exited with {status}; log:\n{}",
                log_tail(dir)
            )));
        }
        let answer = client
            .get_connection_with_timeout(Duration::from_millis(200))
            .and_then(|mut c| redis::cmd("INFO").arg("server").query::<String>(&mut c));
        match answer {
            // Another test's server may have taken the port between the
            // probe and our bind: then it answers, and ours exits. Only
            // our own process counts.
            Ok(info) => {
                let pid = info
                    .lines()
                    .find_map(|l| l.strip_prefix("process_id:"))
                    .and_then(|p| p.trim().parse::<u32>().ok());
                if pid.is_none_or(|pid| pid == child.id()) {
                    return Ok(());
                }
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("port {port} is taken by another redis-server (process {pid:?})"),
                ));
            }
            // A server whose default user is off (ACL tests) answers
            // NOAUTH: it is up all the same.
            Err(e) if e.code() == Some("NOAUTH") => return Ok(()),
            Err(_) => {}
        }
        if Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "redis-server on port {port} did not answer in {READY_TIMEOUT:?}; log:\n{}",
                    log_tail(dir)
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
