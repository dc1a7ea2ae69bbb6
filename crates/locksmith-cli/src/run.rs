//! `locksmith run`: hold a lock (or a semaphore permit) while a command
//! runs, like `flock(1)` but across machines.
//!
//! The lock is held by this process; the command is a child. The child's
//! exit releases the lock; the lock's loss signals the child. Signals sent
//! to locksmith are forwarded so that `kill <locksmith-pid>` stops the
//! command and the lock is released once it has exited. A permit works
//! the same way: it has a lease, renewed while the command runs, so a
//! killed locksmith's permit comes back when the lease runs out.

use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use locksmith::{Client, ErrorKind, LockGuard, MultiGuard, Permit, RedlockGuard, RedlockNodes};

use crate::exit::{self, CliError};
use crate::{OnLost, RunArgs};

/// Runs `args.command` under the lock; returns the exit code.
pub(crate) async fn run(conn: &crate::conn::ConnArgs, args: RunArgs) -> Result<u8, CliError> {
    let mut builder = conn.builder();
    if let (Some(lease), false) = (args.lease, args.no_renew) {
        // The watchdog renews the client's lease length, so a renewed lease
        // other than the default is set on the client.
        builder = builder.lease(lease);
    }
    if args.lock.len() > 1 && args.lock.iter().any(|n| n.contains(',')) {
        return Err(CliError::Usage(
            "with several --lock, names may not contain ',' (CMD gets them comma-separated)".into(),
        ));
    }
    if !args.redlock.is_empty() && args.lock.len() > 1 {
        return Err(CliError::Usage(
            "--redlock takes one --lock (a MultiLock over Redlock is not supported)".into(),
        ));
    }
    // With --redlock the nodes are the deployment; --redis is not used.
    let target = if args.redlock.is_empty() {
        let client = builder.build().await?;
        crate::conn::say_notes(&client);
        Target::Client(client)
    } else {
        let lease = args.lease.filter(|_| !args.no_renew);
        let nodes = RedlockNodes::connect_with(args.redlock.iter().map(|url| {
            let b = conn.builder_for(url.trim());
            match lease {
                Some(lease) => b.lease(lease),
                None => b,
            }
        }))
        .await?;
        Target::Redlock(match args.node_timeout {
            Some(timeout) => nodes.with_node_timeout(timeout)?,
            None => nodes,
        })
    };
    let fixed = match (args.lease, args.no_renew) {
        (Some(lease), true) => Some(lease),
        _ => None,
    };

    // Installed before waiting so that Ctrl-C during a long wait ends the
    // wait cleanly (a grant racing the signal is rolled back) instead of
    // killing the process with a grant possibly in flight.
    let mut sigint = signal(SignalKind::interrupt()).map_err(signal_error)?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(signal_error)?;

    let (what, acquire) = match (object(&args), &target) {
        (Object::Lock(LockKind::Plain, name), Target::Redlock(nodes)) => (
            format!(
                "Redlock {name:?} ({} of {} nodes)",
                nodes.quorum(),
                nodes.len()
            ),
            acquire_redlock(nodes, name, fixed, args.wait),
        ),
        (_, Target::Redlock(_)) => {
            return Err(CliError::Usage("--redlock takes one --lock".into()));
        }
        (Object::Semaphore(name), Target::Client(client)) => (
            format!("semaphore {name:?}"),
            acquire_permit(client, name, args.permits.unwrap_or(1), fixed, args.wait),
        ),
        (Object::Lock(kind, name), Target::Client(client)) => (
            format!("{} {name:?}", kind.noun()),
            acquire_lock(client, kind, name, fixed, args.wait),
        ),
        (Object::Multi(names), Target::Client(client)) => (
            format!("locks {}", names.join(", ")),
            acquire_multi(client, names, fixed, args.wait),
        ),
    };
    let mut acquire = acquire;
    let signalled = tokio::select! {
        acquired = &mut acquire => Err(acquired),
        _ = sigint.recv() => Ok(Signal::SIGINT),
        _ = sigterm.recv() => Ok(Signal::SIGTERM),
    };
    let held = match signalled {
        Err(Ok(held)) => held,
        Err(Err(e)) => {
            // The undo of what the failed wait may have taken (a Redlock
            // round short of a majority, a grant too few replicas saw)
            // runs in the background: let it finish first.
            target.close().await;
            return Err(e.into());
        }
        Ok(signal) => {
            // Dropping the wait cancels it; a grant that was on its way
            // (for a MultiLock or Redlock, the members or nodes taken so
            // far) is undone in the background, and closing waits for
            // that before the process exits.
            drop(acquire);
            target.close().await;
            return Ok(128 + signal as u8);
        }
    };
    let Some(held) = held else {
        let gave_up = match args.wait {
            Some(wait) if !wait.is_zero() => format!("gave up after {wait:?}"),
            _ => "tried once (--wait 0)".to_owned(),
        };
        let busy = match object(&args) {
            Object::Semaphore(_) => "has no free permit",
            Object::Lock(..) => "is held by someone else",
            Object::Multi(_) => "are not all free (none was kept)",
        };
        eprintln!("locksmith: {what} {busy}; {gave_up}");
        target.close().await;
        return Ok(args.conflict_exit_code);
    };

    let child = Command::new(&args.command[0])
        .args(&args.command[1..])
        .envs(held.env())
        .spawn();
    let child = match child {
        Ok(child) => child,
        Err(source) => {
            release_or_warn(held, &what).await;
            target.close().await;
            return Err(CliError::Spawn {
                command: args.command[0].clone(),
                source,
            });
        }
    };

    let supervisor = Supervisor {
        what: &what,
        on_lost: args.on_lost,
        kill_after: args.kill_after,
    };
    let watched = supervisor
        .watch(child, held.lost(), &mut sigint, &mut sigterm)
        .await;
    let (status, lost) = match watched {
        Ok(watched) => watched,
        Err(e) => {
            release_or_warn(held, &what).await;
            target.close().await;
            return Err(CliError::Other(format!(
                "waiting for the command failed: {e}"
            )));
        }
    };
    let code = exit::from_status(status);

    let released = held.release().await;
    target.close().await;
    match released {
        _ if lost => Ok(exit::SOFTWARE),
        Ok(()) => Ok(code),
        Err(e) if e.kind() == ErrorKind::NotHeld => {
            // The loss happened but was not yet noticed (between two
            // renewals, or a fixed lease that ran out at the very end).
            eprintln!(
                "locksmith: {what} was lost before the command finished (it exited with {code}); \
                 another holder may have run concurrently"
            );
            Ok(exit::SOFTWARE)
        }
        Err(e) if e.kind() == ErrorKind::Unconfirmed => {
            // The release's reply was lost and its resend found the lock
            // free: released by the first send, or lost just before. The
            // watchdog saw no loss while the command ran.
            eprintln!(
                "locksmith: warning: the release of {what} is unconfirmed ({e}); \
                 it is not held any more"
            );
            Ok(code)
        }
        Err(e) => {
            // The lease runs out on its own; the command did run under the
            // lock as far as anyone can tell, so its status stands.
            eprintln!(
                "locksmith: warning: could not release {what} ({e}); it expires with its lease"
            );
            Ok(code)
        }
    }
}

/// Releases `held` after the command could not run or be waited on; a
/// release that fails is said (the lock then stays until its lease runs
/// out), as after a command that ran.
async fn release_or_warn(held: Held, what: &str) {
    match held.release().await {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotHeld => {
            eprintln!("locksmith: warning: {what} was lost already ({e})");
        }
        Err(e) if e.kind() == ErrorKind::Unconfirmed => {
            eprintln!(
                "locksmith: warning: the release of {what} is unconfirmed ({e}); \
                 it is not held any more"
            );
        }
        Err(e) => eprintln!(
            "locksmith: warning: could not release {what} ({e}); it expires with its lease"
        ),
    }
}

/// Which lock kind `run` takes.
#[derive(Clone, Copy)]
enum LockKind {
    /// `--lock`: the reentrant lock.
    Plain,
    /// `--fair-lock`.
    Fair,
    /// `--read-lock`.
    Read,
    /// `--write-lock`.
    Write,
}

impl LockKind {
    fn noun(self) -> &'static str {
        match self {
            LockKind::Plain => "lock",
            LockKind::Fair => "fair lock",
            LockKind::Read => "read lock",
            LockKind::Write => "write lock",
        }
    }
}

/// What `run` was asked to hold.
enum Object<'a> {
    /// A lock of some kind.
    Lock(LockKind, &'a str),
    /// A semaphore permit.
    Semaphore(&'a str),
    /// Several plain locks, all or nothing.
    Multi(&'a [String]),
}

/// The one object option given (clap requires exactly one).
fn object(args: &RunArgs) -> Object<'_> {
    match args.lock.as_slice() {
        [] => {}
        [one] => return Object::Lock(LockKind::Plain, one),
        many => return Object::Multi(many),
    }
    let locks = [
        (LockKind::Fair, &args.fair_lock),
        (LockKind::Read, &args.read_lock),
        (LockKind::Write, &args.write_lock),
    ];
    for (kind, name) in locks {
        if let Some(name) = name {
            return Object::Lock(kind, name);
        }
    }
    Object::Semaphore(args.semaphore.as_deref().unwrap_or_default())
}

/// Where the lock lives.
enum Target {
    /// One deployment (--redis).
    Client(Client),
    /// Independent primaries (--redlock).
    Redlock(RedlockNodes),
}

impl Target {
    /// Closes the client (or the Redlock nodes' clients) before exiting,
    /// waiting for what they do in the background: the undo of a wait
    /// cut short by a signal, a release whose reply was lost. A bound that
    /// runs out is reported and otherwise ignored (what was left expires
    /// with its lease).
    async fn close(&self) {
        let closed = match self {
            Target::Client(client) => client.close().await,
            Target::Redlock(nodes) => nodes.close().await,
        };
        if let Err(e) = closed {
            eprintln!("locksmith: warning: background clean-up unfinished at exit ({e})");
        }
    }
}

/// What `run` holds while the command runs.
enum Held {
    /// A Redlock held on a majority.
    Redlock(RedlockGuard),
    /// A lock guard.
    Lock(LockGuard),
    /// A semaphore permit.
    Permit(Permit),
    /// Several locks.
    Multi(MultiGuard),
}

impl Held {
    /// Completes when the lock (any lock, for several) or the permit's
    /// lease is lost.
    fn lost(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        match self {
            Held::Lock(guard) => Box::pin(guard.lost().wait()),
            Held::Permit(permit) => Box::pin(permit.lost().wait()),
            Held::Multi(guard) => Box::pin(guard.lost()),
            Held::Redlock(guard) => Box::pin(guard.lost().wait()),
        }
    }

    /// What the command finds in its environment.
    fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Held::Lock(guard) => vec![
                ("LOCKSMITH_LOCK_NAME", guard.name().to_owned()),
                ("LOCKSMITH_FENCING_TOKEN", guard.fencing_token().to_string()),
            ],
            Held::Redlock(guard) => vec![
                ("LOCKSMITH_LOCK_NAME", guard.name().to_owned()),
                ("LOCKSMITH_FENCING_TOKEN", guard.fencing_token().to_string()),
            ],
            Held::Permit(permit) => vec![
                ("LOCKSMITH_SEMAPHORE_NAME", permit.name().to_owned()),
                ("LOCKSMITH_PERMIT_ID", permit.id().to_owned()),
            ],
            Held::Multi(guard) => {
                let tokens = guard.fencing_tokens();
                let names: Vec<&str> = tokens.iter().map(|(n, _)| *n).collect();
                let values: Vec<String> = tokens.iter().map(|(_, t)| t.to_string()).collect();
                vec![
                    ("LOCKSMITH_LOCK_NAME", names.join(",")),
                    ("LOCKSMITH_FENCING_TOKEN", values.join(",")),
                ]
            }
        }
    }

    async fn release(self) -> locksmith::Result<()> {
        match self {
            Held::Lock(guard) => guard.release().await,
            Held::Permit(permit) => permit.release().await,
            Held::Multi(guard) => guard.release().await,
            Held::Redlock(guard) => guard.release().await,
        }
    }
}

type Acquire<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = locksmith::Result<Option<Held>>> + Send + 'a>,
>;

/// Waits for lock `name` of `kind` as `wait` says.
fn acquire_lock<'a>(
    client: &'a Client,
    kind: LockKind,
    name: &'a str,
    fixed: Option<Duration>,
    wait: Option<Duration>,
) -> Acquire<'a> {
    Box::pin(async move {
        let guard = match kind {
            LockKind::Plain => {
                let mut lock = client.lock(name)?;
                if let Some(lease) = fixed {
                    lock = lock.with_lease(lease)?;
                }
                match wait {
                    None => lock.lock().await.map(Some),
                    Some(wait) if wait.is_zero() => lock.try_lock().await,
                    Some(wait) => lock.try_lock_for(wait).await,
                }
            }
            LockKind::Fair => {
                let mut lock = client.fair_lock(name)?;
                if let Some(lease) = fixed {
                    lock = lock.with_lease(lease)?;
                }
                match wait {
                    None => lock.lock().await.map(Some),
                    Some(wait) if wait.is_zero() => lock.try_lock().await,
                    Some(wait) => lock.try_lock_for(wait).await,
                }
            }
            LockKind::Read | LockKind::Write => {
                let mut lock = client.read_write_lock(name)?;
                if let Some(lease) = fixed {
                    lock = lock.with_lease(lease)?;
                }
                let read = matches!(kind, LockKind::Read);
                match (wait, read) {
                    (None, true) => lock.read().await.map(Some),
                    (None, false) => lock.write().await.map(Some),
                    (Some(w), true) if w.is_zero() => lock.try_read().await,
                    (Some(w), false) if w.is_zero() => lock.try_write().await,
                    (Some(w), true) => lock.try_read_for(w).await,
                    (Some(w), false) => lock.try_write_for(w).await,
                }
            }
        }?;
        Ok(guard.map(Held::Lock))
    })
}

/// Waits for Redlock `name` over `nodes` as `wait` says.
fn acquire_redlock<'a>(
    nodes: &'a RedlockNodes,
    name: &'a str,
    fixed: Option<Duration>,
    wait: Option<Duration>,
) -> Acquire<'a> {
    Box::pin(async move {
        let mut lock = nodes.lock(name)?;
        if let Some(lease) = fixed {
            lock = lock.with_lease(lease)?;
        }
        let guard = match wait {
            None => lock.lock().await.map(Some),
            Some(wait) if wait.is_zero() => lock.try_lock().await,
            Some(wait) => lock.try_lock_for(wait).await,
        }?;
        Ok(guard.map(Held::Redlock))
    })
}

/// Waits for every lock of `names` (a MultiLock) as `wait` says.
fn acquire_multi<'a>(
    client: &'a Client,
    names: &'a [String],
    fixed: Option<Duration>,
    wait: Option<Duration>,
) -> Acquire<'a> {
    Box::pin(async move {
        let mut multi = client.multi_lock(names.iter().cloned())?;
        if let Some(lease) = fixed {
            multi = multi.with_lease(lease)?;
        }
        let guard = match wait {
            None => multi.lock().await.map(Some),
            Some(wait) if wait.is_zero() => multi.try_lock().await,
            Some(wait) => multi.try_lock_for(wait).await,
        }?;
        Ok(guard.map(Held::Multi))
    })
}

/// Sets semaphore `name` to `permits` if it does not exist, then waits for
/// a permit as `wait` says.
fn acquire_permit<'a>(
    client: &'a Client,
    name: &'a str,
    permits: u64,
    fixed: Option<Duration>,
    wait: Option<Duration>,
) -> Acquire<'a> {
    Box::pin(async move {
        let mut semaphore = client.expirable_semaphore(name)?;
        if let Some(lease) = fixed {
            semaphore = semaphore.with_lease(lease)?;
        }
        semaphore.try_set_permits(permits).await?;
        let permit = match wait {
            None => semaphore.acquire().await.map(Some),
            Some(wait) if wait.is_zero() => semaphore.try_acquire().await,
            Some(wait) => semaphore.try_acquire_for(wait).await,
        }?;
        Ok(permit.map(Held::Permit))
    })
}

fn signal_error(e: std::io::Error) -> CliError {
    CliError::Other(format!("cannot install signal handlers: {e}"))
}

/// Watches a running command on behalf of the lock.
struct Supervisor<'a> {
    /// What is held ("lock \"name\""), for messages.
    what: &'a str,
    /// What to do to the command when the lock is lost.
    on_lost: OnLost,
    /// Grace between SIGTERM and SIGKILL.
    kill_after: Duration,
}

impl Supervisor<'_> {
    /// Waits for the command to exit, forwarding signals and acting on a
    /// lost lock. Returns the command's status and whether the lock was
    /// lost meanwhile.
    async fn watch(
        &self,
        mut child: Child,
        lost_signal: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
        sigint: &mut tokio::signal::unix::Signal,
        sigterm: &mut tokio::signal::unix::Signal,
    ) -> std::io::Result<(ExitStatus, bool)> {
        let mut lost_signal = lost_signal;
        let mut lost = false;
        let mut kill_at: Option<Instant> = None;
        loop {
            tokio::select! {
                status = child.wait() => return Ok((status?, lost)),
                _ = &mut lost_signal, if !lost => {
                    lost = true;
                    kill_at = self.lost(&child);
                }
                _ = sigint.recv() => send(&child, Signal::SIGINT),
                _ = sigterm.recv() => send(&child, Signal::SIGTERM),
                _ = sleep_until(kill_at), if kill_at.is_some() => {
                    kill_at = None;
                    eprintln!(
                        "locksmith: command still running {:?} after SIGTERM; sending SIGKILL",
                        self.kill_after
                    );
                    send(&child, Signal::SIGKILL);
                }
            }
        }
    }

    /// Reacts to the loss of the lock; returns when to escalate to SIGKILL.
    fn lost(&self, child: &Child) -> Option<Instant> {
        let pid = child.id().map_or_else(|| "?".into(), |p| p.to_string());
        let what = match self.on_lost {
            OnLost::Term => "sending SIGTERM to the command",
            OnLost::Kill => "sending SIGKILL to the command",
            OnLost::Ignore => "letting the command finish (--on-lost ignore)",
        };
        eprintln!(
            "locksmith: lost {} while the command (pid {pid}) was running \
             (lease expired or deleted); {what}; exit status will be {}",
            self.what,
            exit::SOFTWARE
        );
        match self.on_lost {
            OnLost::Term => {
                send(child, Signal::SIGTERM);
                Some(Instant::now() + self.kill_after)
            }
            OnLost::Kill => {
                send(child, Signal::SIGKILL);
                None
            }
            OnLost::Ignore => None,
        }
    }
}

/// Sends `sig` to the child if it has not been reaped yet.
fn send(child: &Child, sig: Signal) {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        // ESRCH (already exited, not yet reaped) is harmless.
        let _ = kill(Pid::from_raw(pid), sig);
    }
}

/// Sleeps until `at`, or forever when there is nothing to wait for.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
