//! The Redisson peer: a Java program on the real `org.redisson:redisson`
//! (`interop/redisson`, built by `scripts/redisson-peer`) that plays a Java
//! service, driven over its stdin and stdout. See
//! `interop/redisson/README.md` for the requests it answers.
//!
//! [`RedissonPeer::start`] builds the jar if needed (once per process),
//! starts `java -jar` and waits for its `ready` line. [`RedissonPeer::send`]
//! writes one request and gives back a receiver for its answer, so several
//! requests can wait at once (a blocking `lock` does not hold up the
//! others); [`RedissonPeer::call`] sends and waits. Each [`Answer`] carries
//! the instant its line was read, for hand-off timings.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// How long a request may wait for its answer in [`RedissonPeer::call`].
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// One answer line: `<id> ok [value]` or `<id> err <Class> [message]`.
#[derive(Debug, Clone)]
pub struct Answer {
    /// `ok` (true) or `err` (false).
    pub ok: bool,
    /// After `ok`: the value (empty when none). After `err`: the exception's
    /// simple class name, a space and its message.
    pub value: String,
    /// When the line was read.
    pub at: Instant,
}

impl Answer {
    /// The value of an `ok` answer; an error naming the request otherwise.
    pub fn ok_value(&self) -> io::Result<&str> {
        if self.ok {
            Ok(&self.value)
        } else {
            Err(io::Error::other(format!(
                "the Redisson peer answered err {}",
                self.value
            )))
        }
    }

    /// `ok true` / `ok false` as a bool.
    pub fn truth(&self) -> io::Result<bool> {
        match self.ok_value()? {
            "true" => Ok(true),
            "false" => Ok(false),
            other => Err(io::Error::other(format!(
                "expected true or false, got {other:?}"
            ))),
        }
    }

    /// An `ok <number>` answer's number.
    pub fn number(&self) -> io::Result<i64> {
        let v = self.ok_value()?;
        v.parse()
            .map_err(|_| io::Error::other(format!("expected a number, got {v:?}")))
    }
}

/// The requests waiting for their answers; `None` once the peer's output
/// ended (nothing more will be answered).
type Waiting = Arc<Mutex<Option<HashMap<u64, oneshot::Sender<Answer>>>>>;

/// A running Redisson peer (one `RedissonClient`). Killed on drop, and
/// with the test process (it is spawned as the servers are).
pub struct RedissonPeer {
    stdin: tokio::sync::Mutex<ChildStdin>,
    waiting: Waiting,
    next: AtomicU64,
    child: std::process::Child,
    version: String,
    id: String,
}

impl std::fmt::Debug for RedissonPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedissonPeer")
            .field("version", &self.version)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Drop for RedissonPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The jar, built once per process (the script itself skips an
/// up-to-date build, and serializes concurrent ones).
fn jar() -> io::Result<PathBuf> {
    static JAR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    JAR.get_or_init(|| {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/redisson-peer");
        let out = std::process::Command::new(&script)
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("running {}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} failed ({}): the Redisson peer could not be built",
                script.display(),
                out.status
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let path = text.lines().last().unwrap_or("").trim();
        if path.is_empty() {
            return Err(format!("{} printed no jar path", script.display()));
        }
        Ok(PathBuf::from(path))
    })
    .clone()
    .map_err(io::Error::other)
}

impl RedissonPeer {
    /// Builds the peer if needed and starts it with `args` (such as
    /// `["--url", url]` or `["--cluster", urls, "--prefix", "app:"]`);
    /// answers once it printed `ready`.
    ///
    /// # Errors
    /// No Java or Maven, a failed build, or a peer that could not connect
    /// (its `fatal` line is in the error).
    pub async fn start(args: &[&str]) -> io::Result<RedissonPeer> {
        // For tests: quick to start and light on two shared cores (the
        // basic JIT only, the serial collector).
        Self::start_with(&["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"], args).await
    }

    /// As [`RedissonPeer::start`], with the JVM's own defaults (the
    /// optimising JIT, the default collector): for measuring Redisson.
    ///
    /// # Errors
    /// As [`RedissonPeer::start`].
    pub async fn start_for_bench(args: &[&str]) -> io::Result<RedissonPeer> {
        Self::start_with(&[], args).await
    }

    async fn start_with(jvm: &[&str], args: &[&str]) -> io::Result<RedissonPeer> {
        let jar = tokio::task::spawn_blocking(jar)
            .await
            .map_err(io::Error::other)??;
        let mut java_args: Vec<String> = jvm.iter().map(|a| a.to_string()).collect();
        java_args.push("-jar".to_owned());
        java_args.push(jar.display().to_string());
        java_args.extend(args.iter().map(|a| a.to_string()));
        let mut child = crate::process::spawn_guarded("java", &java_args, |cmd| {
            cmd.stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
        })?;
        // The last lines the JVM wrote on stderr, for an error at start.
        let stderr_tail: Arc<Mutex<std::collections::VecDeque<String>>> = Arc::default();
        if let Some(stderr) = child.stderr.take() {
            let tail = stderr_tail.clone();
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(stderr)
                    .lines()
                    .map_while(Result::ok)
                {
                    let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                    if tail.len() == 20 {
                        tail.pop_front();
                    }
                    tail.push_back(line);
                }
            });
        }
        let stdin = ChildStdin::from_std(child.stdin.take().expect("piped stdin"))?;
        let stdout = ChildStdout::from_std(child.stdout.take().expect("piped stdout"))?;
        let mut lines = BufReader::new(stdout).lines();
        let first = match tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await {
            Ok(Ok(line)) => line.unwrap_or_default(),
            Ok(Err(e)) => return Err(e),
            Err(_) => String::from("nothing within 60 s"),
        };
        if !first.starts_with("ready ") {
            // Give the stderr reader a moment to catch the JVM's last words.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let tail = stderr_tail.lock().unwrap_or_else(|e| e.into_inner());
            let tail: Vec<&str> = tail.iter().map(String::as_str).collect();
            return Err(io::Error::other(format!(
                "the Redisson peer did not start: it said {first:?}; stderr: {}",
                tail.join(" | ")
            )));
        }
        let version = first["ready ".len()..].trim().to_owned();
        let waiting: Waiting = Arc::new(Mutex::new(Some(HashMap::new())));
        let dispatch = waiting.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let at = Instant::now();
                let mut parts = line.splitn(3, ' ');
                let (Some(id), Some(status)) = (parts.next(), parts.next()) else {
                    continue;
                };
                let Ok(id) = id.parse::<u64>() else { continue };
                let answer = Answer {
                    ok: status == "ok",
                    value: parts.next().unwrap_or("").to_owned(),
                    at,
                };
                let sender = dispatch
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_mut()
                    .and_then(|waiting| waiting.remove(&id));
                if let Some(sender) = sender {
                    let _ = sender.send(answer);
                }
            }
            // The peer ended: every request still waiting fails, and so
            // does every later one.
            *dispatch.lock().unwrap_or_else(|e| e.into_inner()) = None;
        });
        let mut peer = RedissonPeer {
            stdin: tokio::sync::Mutex::new(stdin),
            waiting,
            next: AtomicU64::new(1),
            child,
            version,
            id: String::new(),
        };
        peer.id = peer.call("id").await?.ok_value()?.to_owned();
        Ok(peer)
    }

    /// Redisson's version, as the peer said when ready.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The Java client's id: the UUID in its lock owner fields.
    pub fn client_id(&self) -> &str {
        &self.id
    }

    /// The lock hash field of this client's Java thread `holder`.
    pub fn owner(&self, holder: u64) -> String {
        format!("{}:{holder}", self.id)
    }

    /// Writes `request` (`<op> <args...>`) and gives back the receiver of
    /// its answer (an error if the peer ends first).
    ///
    /// # Errors
    /// The peer's stdin is closed.
    pub async fn send(&self, request: &str) -> io::Result<oneshot::Receiver<Answer>> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        match self
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            Some(waiting) => waiting.insert(id, tx),
            None => {
                return Err(io::Error::other(format!(
                    "the Redisson peer has ended; {request:?} cannot be sent"
                )))
            }
        };
        let mut stdin = self.stdin.lock().await;
        stdin
            .write_all(format!("{id} {request}\n").as_bytes())
            .await?;
        stdin.flush().await?;
        Ok(rx)
    }

    /// Sends `request` and waits (at most 30 s) for its answer.
    ///
    /// # Errors
    /// The peer ended or did not answer in time.
    pub async fn call(&self, request: &str) -> io::Result<Answer> {
        let rx = self.send(request).await?;
        Self::answer(rx, CALL_TIMEOUT, request).await
    }

    /// Waits at most `limit` for the answer `rx` of `request`.
    ///
    /// # Errors
    /// The peer ended or did not answer in time.
    pub async fn answer(
        rx: oneshot::Receiver<Answer>,
        limit: Duration,
        request: &str,
    ) -> io::Result<Answer> {
        match tokio::time::timeout(limit, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(io::Error::other(format!(
                "the Redisson peer ended before answering {request:?}"
            ))),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the Redisson peer did not answer {request:?} within {limit:?}"),
            )),
        }
    }

    /// Asks the peer to shut down (its watchdog stops; holds stay, as a
    /// Java service that died leaves them) and waits for it to exit.
    pub async fn quit(mut self) {
        let _ = self.call("quit").await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
