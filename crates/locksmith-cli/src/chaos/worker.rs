//! One chaos worker process: loops acquire -> fenced writes -> release on a
//! few shared lock names until its deadline, recording every step.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use locksmith::{Client, ErrorKind};

use super::history::{now, Event, ReleaseOutcome, WriteOutcome};

/// Arguments of the hidden `locksmith chaos-worker` command.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WorkerArgs {
    /// Lock server URL (through this worker's fault proxy).
    #[arg(long)]
    pub(crate) redis: String,
    /// The fenced stores' server (the protected resource), reached directly.
    #[arg(long)]
    pub(crate) resource: String,
    /// Lock names, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub(crate) names: Vec<String>,
    /// Lock lease (watchdog-renewed).
    #[arg(long, value_parser = crate::duration::parse_nonzero)]
    pub(crate) lease: Duration,
    /// Stop starting new holds after this long.
    #[arg(long, value_parser = crate::duration::parse_nonzero)]
    pub(crate) duration: Duration,
    /// This process's name in the history.
    #[arg(long)]
    pub(crate) name: String,
    /// History file (JSON lines, appended).
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// Deliberately broken release: delete the lock whoever holds it
    /// (skips the owner check), to show the checker catches it.
    #[arg(long)]
    pub(crate) broken_release: bool,
    /// Which exclusive lock the names are (with `mixed`, by name).
    #[arg(long, value_enum, default_value_t = Kind::Lock)]
    pub(crate) kind: Kind,
}

/// The exclusive locks a chaos run can hold: each grants one holder at a
/// time a fencing token, so the checker's exclusion and fencing rules hold
/// for all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Kind {
    /// The reentrant lock.
    Lock,
    /// The fair lock (first come, first served).
    Fair,
    /// The read-write lock's write hold.
    Write,
    /// Every name one of the above, by its position: lock, fair, write,
    /// lock, ...
    Mixed,
}

impl Kind {
    /// The kind of the `index`-th name.
    pub(crate) fn of_name(self, index: usize) -> Kind {
        match self {
            Kind::Mixed => [Kind::Lock, Kind::Fair, Kind::Write][index % 3],
            kind => kind,
        }
    }
}

/// Appends events to the history file, one flushed line each, so a
/// SIGKILL loses at most the line being written.
#[derive(Clone)]
struct Recorder {
    p: String,
    file: Arc<Mutex<std::fs::File>>,
}

impl Recorder {
    fn record(&self, event: Event) {
        if let Ok(mut line) = serde_json::to_string(&event) {
            line.push('\n');
            let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
            let _ = file.write_all(line.as_bytes());
        }
    }
}

/// Runs the worker loop; returns when the duration is over.
pub(crate) async fn run(args: WorkerArgs) -> Result<(), String> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.out)
        .map_err(|e| format!("cannot open {}: {e}", args.out.display()))?;
    let rec = Recorder {
        p: args.name.clone(),
        file: Arc::new(Mutex::new(file)),
    };
    // Short timeouts: a black-holed client gives up quickly and comes back
    // quickly once the network heals.
    let client = Client::builder(args.redis.clone())
        .lease(args.lease)
        .command_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_secs(2))
        .recheck_interval(Duration::from_millis(200))
        .build()
        .await
        .map_err(|e| e.to_string())?;
    let resource = Client::open(&args.resource)
        .await
        .map_err(|e| e.to_string())?;
    rec.record(Event::Start {
        t: now(),
        p: rec.p.clone(),
        client: client.id().hyphenated().to_string(),
    });
    let deadline = tokio::time::Instant::now() + args.duration;
    let mut round: u64 = 0;
    while tokio::time::Instant::now() < deadline {
        round += 1;
        // Workers start on different names (by slot), then cycle.
        let slot: usize = args.name.bytes().map(usize::from).sum();
        let index = (round as usize + slot) % args.names.len();
        let kind = args.kind.of_name(index);
        hold_once(&client, &resource, &args.names[index], kind, &args, &rec).await;
    }
    rec.record(Event::Exit {
        t: now(),
        p: rec.p.clone(),
    });
    Ok(())
}

/// One acquire -> writes -> release cycle on `name`.
async fn hold_once(
    client: &Client,
    resource: &Client,
    name: &str,
    kind: Kind,
    args: &WorkerArgs,
    rec: &Recorder,
) {
    let p = rec.p.clone();
    rec.record(Event::AcquireInvoke {
        t: now(),
        p: p.clone(),
        lock: name.to_owned(),
    });
    let wait = args.lease * 2;
    let acquired = match kind {
        Kind::Fair => match client.fair_lock(name) {
            Ok(lock) => lock.try_lock_for(wait).await,
            Err(e) => Err(e),
        },
        Kind::Write => match client.read_write_lock(name) {
            Ok(lock) => lock.try_write_for(wait).await,
            Err(e) => Err(e),
        },
        Kind::Lock | Kind::Mixed => match client.lock(name) {
            Ok(lock) => lock.try_lock_for(wait).await,
            Err(e) => Err(e),
        },
    };
    let guard = match acquired {
        Ok(Some(guard)) => guard,
        Ok(None) => {
            rec.record(Event::AcquireFail {
                t: now(),
                p,
                lock: name.to_owned(),
                error: "not granted within the wait".into(),
            });
            return;
        }
        Err(e) => {
            rec.record(Event::AcquireFail {
                t: now(),
                p,
                lock: name.to_owned(),
                error: e.to_string(),
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
            return;
        }
    };
    let token = guard.fencing_token();
    // One clock reading for the grant and its lease view: a grant whose
    // lease was already over when it arrived records a view ending at the
    // grant itself (the checker tells such a grant by that).
    let granted = now();
    rec.record(Event::AcquireOk {
        t: granted,
        p: p.clone(),
        lock: name.to_owned(),
        token,
        valid_until: granted + guard.remaining_lease().as_nanos() as u64,
    });
    // The lost signal, recorded the moment it fires.
    let watcher = {
        let (lost, rec, p, lock) = (guard.lost(), rec.clone(), p.clone(), name.to_owned());
        tokio::spawn(async move {
            lost.wait().await;
            rec.record(Event::Lost {
                t: now(),
                p,
                lock,
                token,
                source: "signal".into(),
            });
        })
    };
    let store = resource.fenced_store(format!("chaos-store:{name}"));
    let noticed = || {
        rec.record(Event::Lost {
            t: now(),
            p: p.clone(),
            lock: name.to_owned(),
            token,
            source: "poll".into(),
        })
    };
    for i in 0..3u32 {
        // One reading of the lease decides both the record and the write.
        let t0 = now();
        let left = guard.remaining_lease();
        if left.is_zero() {
            noticed();
            break;
        }
        rec.record(Event::Valid {
            t: t0,
            p: p.clone(),
            lock: name.to_owned(),
            token,
            valid_until: t0 + left.as_nanos() as u64,
        });
        let invoked = t0;
        let outcome = match &store {
            Ok(store) => match store.write(token, format!("{p}:{i}").as_bytes()).await {
                Ok(()) => WriteOutcome::Accepted,
                Err(e) if e.kind() == ErrorKind::StaleToken => WriteOutcome::Stale,
                Err(_) => WriteOutcome::Error,
            },
            Err(_) => WriteOutcome::Error,
        };
        rec.record(Event::Write {
            invoked,
            t: now(),
            p: p.clone(),
            lock: name.to_owned(),
            token,
            outcome,
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A loss noticed now is on record before the release is sent (the
    // watcher may not have run yet; the checker keeps the first record).
    if guard.is_lost() {
        noticed();
    }
    rec.record(Event::ReleaseInvoke {
        t: now(),
        p: p.clone(),
        lock: name.to_owned(),
        token,
    });
    let outcome = if args.broken_release {
        // Skips the owner check: deletes whoever holds the lock now (each
        // kind keeps its holders in the hash at the lock's name).
        let result: locksmith::Result<i64> = redis::cmd("DEL")
            .arg(name)
            .query_async(&mut client.connection())
            .await
            .map_err(locksmith::Error::Redis);
        drop(guard);
        match result {
            Ok(_) => ReleaseOutcome::Ok,
            Err(_) => ReleaseOutcome::Error,
        }
    } else {
        match guard.release().await {
            Ok(()) => ReleaseOutcome::Ok,
            Err(e) if e.kind() == ErrorKind::NotHeld => ReleaseOutcome::NotHeld,
            Err(_) => ReleaseOutcome::Error,
        }
    };
    watcher.abort();
    rec.record(Event::ReleaseDone {
        t: now(),
        p,
        lock: name.to_owned(),
        token,
        outcome,
    });
}
