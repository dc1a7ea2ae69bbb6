//! One chaos worker process: loops acquire -> hold (fenced writes where the
//! kind has fencing tokens) -> release on a few shared names until its
//! deadline, recording every step.

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use locksmith::{
    Client, ErrorKind, LockGuard, MultiGuard, Permit, ReadWriteLock, RedlockGuard, RedlockNodes,
    SemaphorePermits,
};

use super::history::{now, Event, Mode, ReleaseOutcome, WriteOutcome, CANCELLED};

/// Arguments of the hidden `locksmith-lab chaos-worker` command.
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
    /// Deliberately broken primitive, each kind its own way (see
    /// [`Kind`]), to show the checker catches it.
    #[arg(long)]
    pub(crate) broken: bool,
    /// Which primitive the names are (with `mixed`, by name).
    #[arg(long, value_enum, default_value_t = Kind::Lock)]
    pub(crate) kind: Kind,
    /// Permits of each semaphore name.
    #[arg(long, default_value_t = 2)]
    pub(crate) permits: u64,
    /// The Redlock nodes' URLs, comma-separated (`--kind redlock`).
    #[arg(long, value_delimiter = ',')]
    pub(crate) redlock: Vec<String>,
}

/// The primitives a chaos run can hold. With `--broken` each misbehaves in
/// its own way: the lock and the MultiLock give the lock back on the server
/// right after the grant while the worker goes on as the holder; the fair
/// lock's name is taken with the plain lock (no queue: waiters overtake);
/// a read-write writer takes a read hold and acts as the writer; the
/// semaphores give every permit back twice; a latch count-down lands twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Kind {
    /// The reentrant lock.
    Lock,
    /// The fair lock (first come, first served).
    Fair,
    /// The read-write lock's write hold only.
    Write,
    /// The read-write lock: reads and writes, some writes downgraded to a
    /// read before their release.
    ReadWrite,
    /// The counting semaphore (no lease: a killed holder's permits stay
    /// taken until the nemesis gives them back).
    Semaphore,
    /// The permit semaphore (permits with leases).
    Permit,
    /// A MultiLock over two reentrant locks, against plain holders of its
    /// members.
    Multi,
    /// A count-down latch of count 2, re-armed when open: each visit arms
    /// it if needed, then counts down (two visits in three) or waits for it
    /// to open (at most lease + 500 ms).
    Latch,
    /// Every name one of the above, by its position: lock, fair,
    /// read-write, semaphore, permit, multi, latch, lock, ...
    Mixed,
    /// Redlock over five independent servers (`--topology redlock` only).
    Redlock,
}

/// The kinds `mixed` cycles through, by name position.
const MIXED: [Kind; 7] = [
    Kind::Lock,
    Kind::Fair,
    Kind::ReadWrite,
    Kind::Semaphore,
    Kind::Permit,
    Kind::Multi,
    Kind::Latch,
];

/// The count a chaos latch is armed with.
pub(crate) const LATCH_COUNT: u64 = 2;

impl Kind {
    /// The kind of the `index`-th name.
    pub(crate) fn of_name(self, index: usize) -> Kind {
        match self {
            Kind::Mixed => MIXED[index % MIXED.len()],
            kind => kind,
        }
    }

    /// The checker's view of a name of this kind: its resource kind and
    /// capacity (holders at once; readers do not count).
    pub(crate) fn resource(self, permits: u64) -> (&'static str, u64) {
        match self {
            Kind::Semaphore => ("semaphore", permits),
            Kind::Permit => ("permit-semaphore", permits),
            Kind::ReadWrite | Kind::Write => ("read-write", 1),
            Kind::Fair => ("fair-lock", 1),
            Kind::Latch => ("latch", LATCH_COUNT),
            Kind::Lock | Kind::Multi | Kind::Mixed => ("lock", 1),
            Kind::Redlock => ("redlock", 1),
        }
    }

    /// Whether holds of this kind carry fencing tokens (and write to the
    /// fenced store).
    fn fenced(self) -> bool {
        !matches!(self, Kind::Semaphore | Kind::Permit | Kind::Latch)
    }
}

/// The MultiLock partner of name `index`: the next other name that is a
/// plain lock or a MultiLock member.
fn partner(kind: Kind, names: usize, index: usize) -> Option<usize> {
    (1..names)
        .map(|d| (index + d) % names)
        .find(|&j| matches!(kind.of_name(j), Kind::Lock | Kind::Multi))
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
    let mut worker = Worker {
        client,
        resource,
        args,
        rec,
        seeded: HashSet::new(),
        seq: 0,
        rw: None,
        redlock: None,
    };
    if worker.args.kind == Kind::Redlock {
        worker.redlock = Some(redlock_nodes(&worker.args).await?);
    }
    let deadline = tokio::time::Instant::now() + worker.args.duration;
    let mut round: u64 = 0;
    // Visits per name: what a visit does (read or write, MultiLock or
    // plain lock, count down or wait) alternates per name, not per round,
    // which would fix it for good when the names are a multiple of it.
    let mut visits = vec![0u64; worker.args.names.len()];
    while tokio::time::Instant::now() < deadline {
        round += 1;
        // Workers start on different names (by slot), then cycle.
        let slot: usize = worker.args.name.bytes().map(usize::from).sum();
        let index = (round as usize + slot) % worker.args.names.len();
        visits[index] += 1;
        worker.hold_once(index, visits[index] + slot as u64).await;
    }
    worker.rec.record(Event::Exit {
        t: now(),
        p: worker.rec.p.clone(),
    });
    Ok(())
}

/// Connects to the Redlock nodes, retrying while a majority cannot be
/// reached (a worker started during a fault waits for it to heal).
async fn redlock_nodes(args: &WorkerArgs) -> Result<RedlockNodes, String> {
    let deadline = tokio::time::Instant::now() + args.duration;
    loop {
        let builders = args.redlock.iter().map(|url| {
            Client::builder(url.clone())
                .lease(args.lease)
                .command_timeout(Duration::from_millis(500))
                .connect_timeout(Duration::from_secs(1))
                .recheck_interval(Duration::from_millis(200))
        });
        match RedlockNodes::connect_with(builders).await {
            // A per-node timeout with room for a loaded machine.
            Ok(nodes) => {
                return nodes
                    .with_node_timeout(Duration::from_millis(200))
                    .map_err(|e| e.to_string())
            }
            Err(e) if e.kind() == ErrorKind::NoQuorum && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// What a worker holds.
enum Taken {
    /// A lock's hold (reentrant, fair, read or write).
    Guard(LockGuard),
    /// A MultiLock's members.
    Multi(MultiGuard),
    /// Counting-semaphore permits.
    Permits(SemaphorePermits),
    /// A permit-semaphore permit.
    Permit(Permit),
    /// A Redlock hold.
    Redlock(RedlockGuard),
}

impl Taken {
    /// The holder's view of how much of its lease is left (`None`: the
    /// hold has no lease).
    fn remaining(&self) -> Option<Duration> {
        match self {
            Taken::Guard(g) => Some(g.remaining_lease()),
            Taken::Multi(g) => g.guards().iter().map(LockGuard::remaining_lease).min(),
            Taken::Permits(_) => None,
            Taken::Permit(p) => Some(p.remaining_lease()),
            Taken::Redlock(g) => Some(g.remaining_lease()),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Taken::Guard(g) => g.is_lost(),
            Taken::Multi(g) => g.is_lost(),
            Taken::Permits(_) => false,
            Taken::Permit(p) => p.is_lost(),
            Taken::Redlock(g) => g.is_lost(),
        }
    }

    /// A future that ends when the lease is lost (never for no lease).
    fn lost(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        match self {
            Taken::Guard(g) => {
                let signal = g.lost();
                Box::pin(async move { signal.wait().await })
            }
            Taken::Multi(g) => Box::pin(g.lost()),
            Taken::Permits(_) => Box::pin(std::future::pending()),
            Taken::Permit(p) => {
                let signal = p.lost();
                Box::pin(async move { signal.wait().await })
            }
            Taken::Redlock(g) => {
                let signal = g.lost();
                Box::pin(async move { signal.wait().await })
            }
        }
    }

    async fn release(self) -> locksmith::Result<()> {
        match self {
            Taken::Guard(g) => g.release().await,
            Taken::Multi(g) => g.release().await,
            Taken::Permits(p) => p.release().await,
            Taken::Permit(p) => p.release().await,
            Taken::Redlock(g) => g.release().await,
        }
    }
}

/// Records `taken`'s lost signal for each of `records` (lock, token) the
/// moment it fires; abort the task when the hold ends.
fn watch(
    rec: &Recorder,
    taken: &Taken,
    records: Vec<(String, u64)>,
) -> tokio::task::JoinHandle<()> {
    let lost = taken.lost();
    let rec = rec.clone();
    tokio::spawn(async move {
        lost.await;
        let t = now();
        for (lock, token) in records {
            rec.record(Event::Lost {
                t,
                p: rec.p.clone(),
                lock,
                token,
                source: "signal".into(),
            });
        }
    })
}

/// One recorded hold of one name (a MultiLock has one per member).
struct Part {
    lock: String,
    token: u64,
    fenced: bool,
}

struct Worker {
    client: Client,
    resource: Client,
    args: WorkerArgs,
    rec: Recorder,
    /// Semaphore names whose permits this process has set (again after a
    /// timeout: a restarted server forgets them).
    seeded: HashSet<String>,
    /// Ids of holds without fencing tokens, unique in this process.
    seq: u64,
    /// The read-write lock of the write hold now held, for a downgrade.
    rw: Option<ReadWriteLock>,
    /// The Redlock nodes (`--kind redlock`).
    redlock: Option<RedlockNodes>,
}

impl Worker {
    fn p(&self) -> String {
        self.rec.p.clone()
    }

    /// Sets a semaphore's permits unless set (the first time, and after a
    /// timeout, which a restart that wiped them causes).
    async fn seed(&mut self, name: &str, kind: Kind) {
        if self.seeded.contains(name) {
            return;
        }
        let permits = self.args.permits;
        let set = match kind {
            Kind::Semaphore => match self.client.semaphore(name) {
                Ok(s) => s.try_set_permits(permits).await,
                Err(e) => Err(e),
            },
            _ => match self.client.expirable_semaphore(name) {
                Ok(s) => s.try_set_permits(permits).await,
                Err(e) => Err(e),
            },
        };
        if set.is_ok() {
            self.seeded.insert(name.to_owned());
        }
    }

    /// Acquires name `index` as its kind wants; answers the hold, its
    /// recorded parts and their mode.
    async fn acquire(
        &mut self,
        index: usize,
        round: u64,
        permits: u64,
        partner: Option<usize>,
    ) -> Result<Option<(Taken, Vec<Part>, Mode)>, locksmith::Error> {
        let names = &self.args.names;
        let name = names[index].clone();
        let kind = self.args.kind.of_name(index);
        // Every wait ends within the lease, so a worker that starts one just
        // after a heal (on a name a killed waiter or holder still blocks)
        // has room for another visit inside the recovery window
        // (lease + 1 s).
        let wait = self.args.lease;
        let c = &self.client;
        let guard = |g: Option<LockGuard>| {
            g.map(|g| {
                let part = Part {
                    lock: name.clone(),
                    token: g.fencing_token(),
                    fenced: true,
                };
                (Taken::Guard(g), vec![part])
            })
        };
        let seq = {
            self.seq += 1;
            self.seq
        };
        let unfenced = |lock: &str| Part {
            lock: lock.to_owned(),
            token: seq,
            fenced: false,
        };
        let taken = match kind {
            // Broken, the fair lock's name is taken with the plain lock:
            // exclusive still, but first come is no longer first served.
            Kind::Fair if self.args.broken => guard(c.lock(&name)?.try_lock_for(wait).await?),
            // A killed waiter delays the queue by its give-up time: the
            // lease here, not the default 5 s.
            Kind::Fair => guard(
                c.fair_lock(&name)?
                    .with_wait_timeout(self.args.lease)?
                    .try_lock_for(wait)
                    .await?,
            ),
            Kind::Write => guard(c.read_write_lock(&name)?.try_write_for(wait).await?),
            Kind::ReadWrite => {
                // Every third visit a reader; with `--broken` a "writer"
                // takes a read hold and acts as the writer.
                let lock = c.read_write_lock(&name)?;
                let reads = round.is_multiple_of(3);
                let g = if reads || self.args.broken {
                    lock.try_read_for(wait).await?
                } else {
                    lock.try_write_for(wait).await?
                };
                let mode = if reads { Mode::Read } else { Mode::Write };
                if !reads {
                    self.rw = Some(lock);
                }
                return Ok(guard(g).map(|(t, parts)| (t, parts, mode)));
            }
            Kind::Semaphore => {
                self.seed(&name, kind).await;
                let sem = self.client.semaphore(&name)?;
                return Ok(sem
                    .try_acquire_for(permits, wait)
                    .await?
                    .map(|p| (Taken::Permits(p), vec![unfenced(&name)], Mode::Exclusive)));
            }
            Kind::Permit => {
                self.seed(&name, kind).await;
                let sem = self.client.expirable_semaphore(&name)?;
                return Ok(sem
                    .try_acquire_for(wait)
                    .await?
                    .map(|p| (Taken::Permit(p), vec![unfenced(&name)], Mode::Exclusive)));
            }
            Kind::Multi => match partner {
                // Every other visit the MultiLock, else a plain lock of the
                // member, which the MultiLock must exclude.
                Some(j) => {
                    let multi = c.multi_lock([name.clone(), names[j].clone()])?;
                    multi.try_lock_for(wait).await?.map(|g| {
                        let parts = g
                            .fencing_tokens()
                            .into_iter()
                            .map(|(lock, token)| Part {
                                lock: lock.to_owned(),
                                token,
                                fenced: true,
                            })
                            .collect();
                        (Taken::Multi(g), parts)
                    })
                }
                None => guard(c.lock(&name)?.try_lock_for(wait).await?),
            },
            Kind::Redlock => {
                let Some(nodes) = &self.redlock else {
                    return Err(locksmith::Error::InvalidArgument(
                        "no Redlock nodes given".into(),
                    ));
                };
                // Redlock's tokens are not strictly increasing (see
                // docs/safety.md): recorded unfenced, written all the same.
                return Ok(nodes.lock(&name)?.try_lock_for(wait).await?.map(|g| {
                    let part = Part {
                        lock: name.clone(),
                        token: g.fencing_token(),
                        fenced: false,
                    };
                    (Taken::Redlock(g), vec![part], Mode::Exclusive)
                }));
            }
            Kind::Lock | Kind::Mixed | Kind::Latch => {
                guard(c.lock(&name)?.try_lock_for(wait).await?)
            }
        };
        Ok(taken.map(|(t, parts)| (t, parts, Mode::Exclusive)))
    }

    /// One visit of a latch name: arm it if it is not, then count down
    /// (two visits in three) or wait for it to open. With `--broken` a
    /// count-down lands twice, as a resent one would.
    async fn latch_once(&mut self, name: &str, round: u64) {
        let p = self.p();
        let latch = match self.client.count_down_latch(name) {
            Ok(latch) => latch,
            Err(e) => {
                eprintln!("chaos worker: {e}");
                return;
            }
        };
        let invoked = now();
        let set = latch.try_set_count(LATCH_COUNT).await;
        self.rec.record(Event::LatchArm {
            invoked,
            t: now(),
            p: p.clone(),
            lock: name.to_owned(),
            set: set.as_ref().ok().copied(),
        });
        if set.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            return;
        }
        if !round.is_multiple_of(3) {
            let invoked = now();
            let left = latch.count_down().await;
            if self.args.broken {
                // Broken: the count-down lands twice (as a resent one
                // would), recorded once.
                let _ = latch.count_down().await;
            }
            self.rec.record(Event::CountDown {
                invoked,
                t: now(),
                p: p.clone(),
                lock: name.to_owned(),
                left: left.ok(),
            });
        } else {
            let invoked = now();
            let opened = latch.wait_for(self.args.lease).await;
            self.rec.record(Event::LatchWait {
                invoked,
                t: now(),
                p,
                lock: name.to_owned(),
                opened: opened.ok(),
            });
        }
    }

    /// One acquire -> hold -> release cycle on name `index`, its `round`-th
    /// visit (offset by the worker's slot).
    async fn hold_once(&mut self, index: usize, round: u64) {
        let p = self.p();
        let name = self.args.names[index].clone();
        let kind = self.args.kind.of_name(index);
        if kind == Kind::Latch {
            self.latch_once(&name, round).await;
            return;
        }
        // Counting-semaphore holds take one or two permits.
        let permits = match kind {
            Kind::Semaphore => 1 + round % self.args.permits.clamp(1, 2),
            _ => 1,
        };
        // Every other visit of a MultiLock name takes the MultiLock with its
        // partner; each member's acquire is on record.
        let partner = match kind {
            Kind::Multi if round.is_multiple_of(2) => {
                partner(self.args.kind, self.args.names.len(), index)
            }
            _ => None,
        };
        let asked: Vec<String> = std::iter::once(name.clone())
            .chain(partner.map(|j| self.args.names[j].clone()))
            .collect();
        for lock in &asked {
            self.rec.record(Event::AcquireInvoke {
                t: now(),
                p: p.clone(),
                lock: lock.clone(),
                permits,
            });
        }
        let failed = |rec: &Recorder, error: String| {
            let t = now();
            for lock in &asked {
                rec.record(Event::AcquireFail {
                    t,
                    p: p.clone(),
                    lock: lock.clone(),
                    error: error.clone(),
                });
            }
        };
        // Every fifth visit the acquire is dropped after a few
        // milliseconds, granted or not: a dropped acquire must leave
        // nothing held (no permit lost, no lock held by nobody).
        let cancel = round % 5 == 2;
        let acquiring = self.acquire(index, round, permits, partner);
        let acquired = if cancel {
            let after = Duration::from_millis(rand::random_range(1..40));
            match tokio::time::timeout(after, acquiring).await {
                Ok(acquired) => acquired,
                Err(_) => {
                    failed(&self.rec, CANCELLED.into());
                    return;
                }
            }
        } else {
            acquiring.await
        };
        let (taken, parts, mode) = match acquired {
            Ok(Some(taken)) => taken,
            Ok(None) => {
                failed(&self.rec, "not granted within the wait".into());
                // A restart may have wiped a semaphore's permits.
                self.seeded.remove(&name);
                return;
            }
            Err(e) => {
                failed(&self.rec, e.to_string());
                self.seeded.remove(&name);
                tokio::time::sleep(Duration::from_millis(50)).await;
                return;
            }
        };
        // One clock reading for the grant and its lease view: a grant whose
        // lease was already over when it arrived records a view ending at the
        // grant itself (the checker tells such a grant by that).
        let granted = now();
        let view = |t: u64, left: Option<Duration>| {
            left.map_or(u64::MAX, |left| t + left.as_nanos() as u64)
        };
        let valid_until = view(granted, taken.remaining());
        for part in &parts {
            self.rec.record(Event::AcquireOk {
                t: granted,
                p: p.clone(),
                lock: part.lock.clone(),
                token: part.token,
                valid_until,
                mode,
                permits,
                fenced: part.fenced,
                downgrade: false,
            });
        }
        // The broken exclusive kinds: the server's hold is given back now;
        // the worker goes on as the holder.
        // (A MultiLock name's plain rounds stay correct: the MultiLock is
        // what is broken, against them.)
        let early = match kind {
            Kind::Multi => matches!(taken, Taken::Multi(_)),
            _ => !matches!(kind, Kind::ReadWrite | Kind::Fair),
        };
        let taken = if self.args.broken && kind.fenced() && early {
            let _ = taken.release().await;
            None
        } else {
            Some(taken)
        };
        // The lost signal, recorded the moment it fires.
        let watcher = taken.as_ref().map(|taken| {
            let records = parts.iter().map(|q| (q.lock.clone(), q.token)).collect();
            watch(&self.rec, taken, records)
        });
        let noticed = |rec: &Recorder| {
            let t = now();
            for part in &parts {
                rec.record(Event::Lost {
                    t,
                    p: p.clone(),
                    lock: part.lock.clone(),
                    token: part.token,
                    source: "poll".into(),
                });
            }
        };
        let stores: Vec<_> = parts
            .iter()
            .filter(|q| q.fenced || kind == Kind::Redlock)
            .map(|q| {
                (
                    q.lock.clone(),
                    q.token,
                    self.resource
                        .fenced_store(format!("chaos-store:{}", q.lock)),
                )
            })
            .collect();
        // The same lease view as the grant's for a broken hold (nothing is
        // renewed any more).
        let left = |taken: &Option<Taken>, t: u64| match taken {
            Some(taken) => view(t, taken.remaining()),
            None => valid_until,
        };
        for i in 0..3u32 {
            // One reading of the lease decides both the record and the write.
            let t0 = now();
            let until = left(&taken, t0);
            if until <= t0 {
                noticed(&self.rec);
                break;
            }
            for part in &parts {
                self.rec.record(Event::Valid {
                    t: t0,
                    p: p.clone(),
                    lock: part.lock.clone(),
                    token: part.token,
                    valid_until: until,
                });
            }
            // Readers only read; the fenced kinds' holders write.
            if mode != Mode::Read {
                for (lock, token, store) in &stores {
                    let outcome = match store {
                        Ok(store) => {
                            match store.write(*token, format!("{p}:{i}").as_bytes()).await {
                                Ok(()) => WriteOutcome::Accepted,
                                Err(e) if e.kind() == ErrorKind::StaleToken => WriteOutcome::Stale,
                                Err(_) => WriteOutcome::Error,
                            }
                        }
                        Err(_) => WriteOutcome::Error,
                    };
                    self.rec.record(Event::Write {
                        invoked: t0,
                        t: now(),
                        p: p.clone(),
                        lock: lock.clone(),
                        token: *token,
                        outcome,
                    });
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // A downgrade (every fourth write of a read-write lock): a read hold
        // taken while the write hold is held, kept past the write's release.
        let downgrade = match (&taken, kind, mode) {
            (Some(Taken::Guard(_)), Kind::ReadWrite, Mode::Write) if round % 4 == 1 => {
                self.downgrade(&name).await
            }
            _ => None,
        };
        // A loss noticed now is on record before the release is sent (the
        // watcher may not have run yet; the checker keeps the first record).
        if taken.as_ref().is_some_and(Taken::is_lost) {
            noticed(&self.rec);
        }
        let outcome = self.release(&parts, taken, kind, permits, &name).await;
        // (A signal recorded after the release was sent, as some kinds fire
        // theirs when a release begins or ends, is no loss: the checker
        // counts only those before.)
        if let Some(w) = watcher {
            w.abort();
        }
        self.rw = None;
        self.record_release(&parts, outcome);
        if let Some((read, token, watcher)) = downgrade {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let part = Part {
                lock: name.clone(),
                token,
                fenced: true,
            };
            let part = std::slice::from_ref(&part);
            let outcome = self.release(part, Some(read), kind, 1, &name).await;
            watcher.abort();
            self.record_release(part, outcome);
        }
    }

    /// A downgrade: the write holder takes a read hold of its own (the
    /// same lock object, so the same owner), recorded as a read hold that
    /// may overlap its own write, and kept past the write's release.
    async fn downgrade(&mut self, name: &str) -> Option<(Taken, u64, tokio::task::JoinHandle<()>)> {
        let lock = self.rw.take()?;
        let p = self.p();
        self.rec.record(Event::AcquireInvoke {
            t: now(),
            p: p.clone(),
            lock: name.to_owned(),
            permits: 1,
        });
        match lock.try_read().await {
            Ok(Some(read)) => {
                let t = now();
                let token = read.fencing_token();
                self.rec.record(Event::AcquireOk {
                    t,
                    p,
                    lock: name.to_owned(),
                    token,
                    valid_until: t + read.remaining_lease().as_nanos() as u64,
                    mode: Mode::Read,
                    permits: 1,
                    fenced: true,
                    downgrade: true,
                });
                let read = Taken::Guard(read);
                let watcher = watch(&self.rec, &read, vec![(name.to_owned(), token)]);
                Some((read, token, watcher))
            }
            result => {
                self.rec.record(Event::AcquireFail {
                    t: now(),
                    p,
                    lock: name.to_owned(),
                    error: match result {
                        Err(e) => e.to_string(),
                        _ => "a downgrade's read hold was refused".into(),
                    },
                });
                None
            }
        }
    }

    /// Releases (or, broken, misreleases) what is held; answers the outcome
    /// to record.
    async fn release(
        &self,
        parts: &[Part],
        taken: Option<Taken>,
        kind: Kind,
        permits: u64,
        name: &str,
    ) -> ReleaseOutcome {
        let p = self.p();
        for part in parts {
            self.rec.record(Event::ReleaseInvoke {
                t: now(),
                p: p.clone(),
                lock: part.lock.clone(),
                token: part.token,
            });
        }
        let Some(taken) = taken else {
            // Broken: given back at the grant already.
            return ReleaseOutcome::Ok;
        };
        if self.args.broken_release {
            // Skips the owner check: deletes whoever holds the lock now (each
            // lock kind keeps its holders in the hash at the lock's name).
            let result: locksmith::Result<i64> = redis::cmd("DEL")
                .arg(name)
                .query_async(&mut self.client.connection())
                .await
                .map_err(locksmith::Error::Redis);
            drop(taken);
            return match result {
                Ok(_) => ReleaseOutcome::Ok,
                Err(_) => ReleaseOutcome::Error,
            };
        }
        let result = taken.release().await;
        if self.args.broken && result.is_ok() {
            // Broken semaphores give every permit back twice.
            let extra = i64::try_from(permits).unwrap_or(1);
            let _ = match kind {
                Kind::Semaphore => match self.client.semaphore(name) {
                    Ok(s) => s.add_permits(extra).await.map(drop),
                    Err(e) => Err(e),
                },
                Kind::Permit => match self.client.expirable_semaphore(name) {
                    Ok(s) => s.add_permits(extra).await.map(drop),
                    Err(e) => Err(e),
                },
                _ => Ok(()),
            };
        }
        match result {
            Ok(()) => ReleaseOutcome::Ok,
            Err(e) if e.kind() == ErrorKind::NotHeld => ReleaseOutcome::NotHeld,
            Err(_) => ReleaseOutcome::Error,
        }
    }

    fn record_release(&self, parts: &[Part], outcome: ReleaseOutcome) {
        let t = now();
        for part in parts {
            self.rec.record(Event::ReleaseDone {
                t,
                p: self.p(),
                lock: part.lock.clone(),
                token: part.token,
                outcome,
            });
        }
    }
}
