//! `locksmith run`: hold a lock while a command runs, like `flock(1)` but
//! across machines.
//!
//! The lock is held by this process; the command is a child. The child's
//! exit releases the lock; the lock's loss signals the child. Signals sent
//! to locksmith are forwarded so that `kill <locksmith-pid>` stops the
//! command and the lock is released once it has exited.

use std::pin::pin;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use locksmith::{Client, ErrorKind, LockGuard};

use crate::exit::{self, CliError};
use crate::{OnLost, RunArgs};

/// Runs `args.command` under the lock; returns the exit code.
pub(crate) async fn run(url: &str, args: RunArgs) -> Result<u8, CliError> {
    let mut builder = Client::builder(url);
    if let (Some(lease), false) = (args.lease, args.no_renew) {
        // The watchdog renews the client's lease length, so a renewed lease
        // other than the default is set on the client.
        builder = builder.lease(lease);
    }
    let client = builder.build().await?;
    let mut lock = client.lock(args.lock.as_str())?;
    if let (Some(lease), true) = (args.lease, args.no_renew) {
        lock = lock.with_lease(lease)?;
    }

    // Installed before waiting so that Ctrl-C during a long wait ends the
    // wait cleanly (a grant racing the signal is rolled back) instead of
    // killing the process with a grant possibly in flight.
    let mut sigint = signal(SignalKind::interrupt()).map_err(signal_error)?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(signal_error)?;

    let acquire = async {
        match args.wait {
            None => lock.lock().await.map(Some),
            Some(wait) if wait.is_zero() => lock.try_lock().await,
            Some(wait) => lock.try_lock_for(wait).await,
        }
    };
    let guard = tokio::select! {
        acquired = acquire => acquired?,
        _ = sigint.recv() => return Ok(128 + Signal::SIGINT as u8),
        _ = sigterm.recv() => return Ok(128 + Signal::SIGTERM as u8),
    };
    let Some(guard) = guard else {
        let gave_up = match args.wait {
            Some(wait) if !wait.is_zero() => format!("gave up after {wait:?}"),
            _ => "tried once (--wait 0)".to_owned(),
        };
        eprintln!(
            "locksmith: lock {:?} is held by someone else; {gave_up}",
            args.lock
        );
        return Ok(args.conflict_exit_code);
    };

    let child = Command::new(&args.command[0])
        .args(&args.command[1..])
        .env("LOCKSMITH_LOCK_NAME", &args.lock)
        .env("LOCKSMITH_FENCING_TOKEN", guard.fencing_token().to_string())
        .spawn();
    let child = match child {
        Ok(child) => child,
        Err(source) => {
            let _ = guard.release().await;
            return Err(CliError::Spawn {
                command: args.command[0].clone(),
                source,
            });
        }
    };

    let supervisor = Supervisor {
        name: &args.lock,
        on_lost: args.on_lost,
        kill_after: args.kill_after,
    };
    let (status, lost) = supervisor
        .watch(child, &guard, &mut sigint, &mut sigterm)
        .await
        .map_err(|e| CliError::Other(format!("waiting for the command failed: {e}")))?;
    let code = exit::from_status(status);

    match guard.release().await {
        _ if lost => Ok(exit::SOFTWARE),
        Ok(()) => Ok(code),
        Err(e) if e.kind() == ErrorKind::NotHeld => {
            // The loss happened but was not yet noticed (between two
            // renewals, or a fixed lease that ran out at the very end).
            eprintln!(
                "locksmith: lock {:?} was lost before the command finished (it exited with {code}); \
                 another holder may have run concurrently",
                args.lock
            );
            Ok(exit::SOFTWARE)
        }
        Err(e) => {
            // The lease runs out on its own; the command did run under the
            // lock as far as anyone can tell, so its status stands.
            eprintln!(
                "locksmith: warning: could not release lock {:?} ({e}); it expires with its lease",
                args.lock
            );
            Ok(code)
        }
    }
}

fn signal_error(e: std::io::Error) -> CliError {
    CliError::Other(format!("cannot install signal handlers: {e}"))
}

/// Watches a running command on behalf of the lock.
struct Supervisor<'a> {
    /// Lock name, for messages.
    name: &'a str,
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
        guard: &LockGuard,
        sigint: &mut tokio::signal::unix::Signal,
        sigterm: &mut tokio::signal::unix::Signal,
    ) -> std::io::Result<(ExitStatus, bool)> {
        let mut lost_signal = pin!(guard.lost().wait());
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
            "locksmith: lost lock {:?} while the command (pid {pid}) was running \
             (lease expired or lock deleted); {what}; exit status will be {}",
            self.name,
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
