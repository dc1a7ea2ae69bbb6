//! Spawning children that cannot outlive the test process.
//!
//! Linux delivers the parent-death signal when the *thread* that forked the
//! child exits, so children are spawned from one dedicated thread that lives
//! as long as the process. `setpriv --pdeathsig KILL` sets the signal before
//! exec'ing the real program, which keeps this crate free of `unsafe`.

use std::io;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

type Request = (Command, mpsc::Sender<io::Result<Child>>);

/// The channel to the spawner thread, created on first use.
fn spawner() -> &'static Mutex<mpsc::Sender<Request>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("testkit-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawn testkit spawner thread");
        Mutex::new(tx)
    })
}

/// Spawns `program args...` so that it is killed when this process dies.
pub(crate) fn spawn_guarded(
    program: &str,
    args: &[String],
    configure: impl FnOnce(&mut Command),
) -> io::Result<Child> {
    let mut cmd = Command::new("setpriv");
    cmd.arg("--pdeathsig")
        .arg("KILL")
        .arg("--")
        .arg(program)
        .args(args);
    configure(&mut cmd);
    let (tx, rx) = mpsc::channel();
    spawner()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, tx))
        .map_err(|_| io::Error::other("testkit spawner thread is gone"))?;
    rx.recv()
        .map_err(|_| io::Error::other("testkit spawner thread is gone"))?
}

/// Finds a loopback port that is free right now.
pub(crate) fn free_port() -> io::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}
