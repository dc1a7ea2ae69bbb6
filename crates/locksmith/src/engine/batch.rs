//! Request coalescing: concurrent calls of one script from many tasks of a
//! [`Client`](crate::Client) travel as one script call.
//!
//! Redis spends more time entering a Lua script than running the few
//! commands a lock operation needs, so a client with many tasks locking at
//! once would spend the server's time mostly on script entry. A
//! [`Batcher`] owns one script whose KEYS and ARGV are a list of
//! independent requests, each of a fixed shape, and which answers with one
//! reply per request (a request's error affects only its own reply).
//!
//! There is no batching task and no timer. A caller queues its request;
//! if fewer than [`MAX_IN_FLIGHT`] calls are outstanding (one per node on
//! a cluster, see [`MAX_IN_FLIGHT_PER_NODE`]) it takes the call's place,
//! and, when the queue's last call carried more than one request (callers
//! come in company), lets the tasks already ready to run on its thread go
//! first (one pass of the run queue, no timer: the callers a batch's reply
//! woke together queue their next requests in that pass, and they travel
//! together instead of the first alone and the rest in the call after it).
//! After a lone call there is no pass: a lone caller, such as a waiter
//! woken by a release message, sends at once (the pass cost such a hand-off
//! about 20 µs, a tenth of it, for batches that would stay of one). Then it
//! sends the queue: inline when the queue holds only its own request (the
//! uncontended case spawns no task of its own), from a spawned task when it
//! carries other callers' requests (so cancelling one caller cannot strand
//! the others). Otherwise the request waits, and when the next call
//! completes, a task takes its place and sends what queued meanwhile (up
//! to [`MAX_BATCH`] requests), after the same pass when that queue or the
//! last call held more than one request (the callers that call's reply woke,
//! and the other tasks ready to run, queue their next requests first; on
//! a multi-thread runtime, where the woken callers are spread over the
//! workers, this is what keeps a call from carrying only the few that
//! queued before the reply). Batches thus grow with the load by
//! themselves, and a lone request never waits for company (on a runtime
//! with nothing else ready the pass ends at once; on a busy one it waits
//! one turn of the run queue). A caller dropped during a pass has its
//! request withdrawn, as one dropped while queued. When no task can send
//! the queue (its runtime shut down), the queue waits for another call
//! that is out, or, with none, its requests fail unsent (see
//! `Shared::give_back`).
//!
//! A batch goes to one server, so all of its keys must live there: fine on
//! a single Redis or behind Sentinel. On a Redis Cluster a [`Batcher`]
//! keeps one queue per primary (by the client's view of the slots, see
//! `engine::nodes`; per slot while a slot's primary is not known). A
//! script's declared keys must share one hash slot, so a batch holding
//! several slots goes, on Redis 7 and later, as one call of the script's
//! cross-slot variant (`across.lua`, flagged `allow-cross-slot-keys`): no
//! declared keys, every key passed as an argument, the call sent to the
//! node the connection has for the first slot, and each slot checked by a
//! probe key before its requests run, so a slot the node does not serve
//! whole (a stale view, a migration) runs none of its requests and they
//! are sent again as calls of their own. Where the
//! cluster refuses that script (Redis 6), a batch goes as one call per
//! slot, all pipelined to the node in one round trip with one `WAIT` after
//! them (`Lua::run_pipelined`). A call answered `MOVED` or `ASK` (the slot
//! moved) is sent again on its own, and the cluster connection takes it to
//! the new owner; that answer proves the call did not run. A call whose
//! reply was lost is resent only for scripts idempotent per request; the
//! others (marked `once` in the catalogue) are sent at most once (see
//! `Lua::run`).
//!
//! Semantics per request are those of the one-request script: the script
//! runs atomically, each request is evaluated in queue order, and a call
//! that fails as a whole (timeout, dropped connection) fails every request
//! in it, each caller then deciding on its own whether to resend.
//!
//! Cancellation: a request whose caller went away before its call was sent
//! is dropped, not sent. A caller that must undo its request if it lands
//! (the undo of a cancelled acquire, `engine::undo`) passes a [`Tracker`] and
//! waits on [`Tracked::settled`] before undoing: it resolves once the
//! request can no longer reach Redis ahead of the undo (its call completed
//! or failed, or it was dropped unsent), so the undo is never overtaken by
//! the request it undoes. A caller whose undo depends on what the request
//! did (it gives back only what the request actually took)
//! uses [`Batcher::call_undoable`] instead: if the caller goes away after
//! the request was sent, its undo runs with the request's reply as soon as
//! that reply arrives.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use redis::{FromRedisValue, RedisError, RedisResult, Value};
use tokio::sync::oneshot;

use crate::engine::conn::Acks;
use crate::engine::lua::Lua;
#[cfg(feature = "cluster")]
use crate::engine::nodes;
use crate::engine::slot;
use crate::engine::slot::Slot;
use crate::engine::task::Tasks;
#[cfg(feature = "cluster")]
use crate::engine::topology::ClusterConn;
use crate::engine::topology::{Conn, Destination};

/// Calls one batcher keeps outstanding before it holds requests back to
/// grow the next batch (one server, or Sentinel's primary): two, so the
/// server has the next call at hand when one completes.
pub(crate) const MAX_IN_FLIGHT: usize = 2;

/// The same per node of a cluster: one. The nodes together already have
/// several calls in hand, and every call a node takes costs it a script
/// entry, which weighs more than the few commands of a request: one call
/// out per node makes the batches twice as large. (Measured with 64 tasks
/// on three primaries: 9% more pairs per second than with two, where on
/// one server one instead of two costs 23%.)
const MAX_IN_FLIGHT_PER_NODE: usize = 1;

/// Most requests in one call; bounds how long one call keeps the server
/// busy.
pub(crate) const MAX_BATCH: usize = 128;

/// One argument of a request, written straight into the script call's
/// command buffer (no copy of its own on the way).
#[derive(Debug, Clone)]
pub(crate) enum Arg {
    /// Text shared with the primitive it belongs to (a key, an owner id).
    Text(Arc<str>),
    /// A number, formatted as it is written.
    Int(u64),
    /// A constant.
    Static(&'static str),
}

impl Arg {
    fn write(&self, cmd: &mut redis::Cmd) {
        match self {
            Arg::Text(text) => cmd.arg(&**text),
            Arg::Int(n) => cmd.arg(*n),
            Arg::Static(text) => cmd.arg(*text),
        };
    }
}

/// What one request sends: its KEYS, then its ARGV, in the script's
/// per-request order. Cheap to clone, so a resend costs no copy.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    /// KEYS then ARGV.
    parts: Arc<[Arg]>,
    /// How many of `parts` are KEYS.
    keys: usize,
}

impl Call {
    /// A request with `keys` KEYS followed by its ARGV, all in `parts`.
    pub(crate) fn new(keys: usize, parts: impl Into<Arc<[Arg]>>) -> Call {
        let parts = parts.into();
        debug_assert!(keys <= parts.len());
        Call { parts, keys }
    }

    fn keys(&self) -> &[Arg] {
        &self.parts[..self.keys]
    }

    /// The first key, which decides the request's slot (all of its keys
    /// share it).
    fn first_key(&self) -> &str {
        match self.parts.first() {
            Some(Arg::Text(text)) => text,
            Some(Arg::Static(text)) => text,
            _ => "",
        }
    }

    fn args(&self) -> &[Arg] {
        &self.parts[self.keys..]
    }
}

/// One queued request.
struct Request {
    /// Tells the request from the others of its queue (see
    /// [`next_request_id`]).
    id: u64,
    /// What it sends.
    call: Call,
    /// Where the reply goes; a closed receiver (cancelled caller) means the
    /// request is dropped if it has not been sent yet.
    reply: oneshot::Sender<RedisResult<(Value, Option<u32>)>>,
    /// Dropped with the request: tells a [`Tracked`] the request is settled.
    _tracker: Option<Tracker>,
    /// Run with the reply if its caller went away after the request was
    /// sent (see [`Batcher::call_undoable`]).
    undo: Option<Undo>,
}

/// An undo shared by a request and its caller: whichever side finds the
/// reply unclaimed runs it, exactly once.
type Undo = Arc<Mutex<Option<Box<dyn FnOnce(Option<Value>) + Send>>>>;

fn run_undo(undo: &Undo, reply: Option<Value>) {
    let undo = undo.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(undo) = undo {
        undo(reply);
    }
}

/// The caller's end of a request's reply. Dropped before the reply was
/// read, it hands an arrived reply to the request's undo (a reply still
/// on its way goes to the undo from the sending side).
struct Answer {
    /// Where the reply arrives.
    rx: oneshot::Receiver<RedisResult<(Value, Option<u32>)>>,
    /// The undo, until the reply was read.
    undo: Option<Undo>,
}

impl Drop for Answer {
    fn drop(&mut self) {
        if let Some(undo) = self.undo.take() {
            // After close() a send fails and the sender runs the undo; a
            // reply already delivered is taken here.
            self.rx.close();
            match self.rx.try_recv() {
                Ok(Ok((reply, _))) => run_undo(&undo, Some(reply)),
                // The call failed as a whole: the outcome is unknown.
                Ok(Err(_)) => run_undo(&undo, None),
                Err(_) => {}
            }
        }
    }
}

/// Held by a queued request; its drop settles the matching [`Tracked`].
pub(crate) struct Tracker(#[allow(dead_code)] oneshot::Sender<()>);

/// Resolves once the tracked request is settled (see the module docs).
#[derive(Debug)]
pub(crate) struct Tracked(oneshot::Receiver<()>);

/// A tracker and its [`Tracked`] end.
pub(crate) fn tracker() -> (Tracker, Tracked) {
    let (tx, rx) = oneshot::channel();
    (Tracker(tx), Tracked(rx))
}

impl Tracked {
    /// Waits until the request can no longer reach Redis ahead of anything
    /// sent after this returns (on the same connection).
    pub(crate) async fn settled(self) {
        let _ = self.0.await;
    }
}

/// The queue and the count of outstanding calls, under one lock.
#[derive(Default)]
struct Queue {
    /// Requests waiting for the next call.
    pending: Vec<Request>,
    /// Calls sent and not yet answered.
    in_flight: usize,
    /// The last call taken from this queue carried more than one request:
    /// callers come in company, and the next sender lets the tasks ready
    /// to run queue theirs first.
    company: bool,
}

/// Coalesces calls of one batch script: one queue for a single server or
/// Sentinel, one per hash slot on a cluster.
pub(crate) struct Batcher {
    /// The queue of a non-cluster connection (and the template per-node
    /// queues are made from).
    shared: Arc<Shared>,
    /// Per-node queues on a cluster (per slot while a slot's node is not
    /// known); `None` elsewhere.
    queues: Option<Mutex<HashMap<Destination, Arc<Shared>>>>,
}

/// The parts of a [`Batcher`] that outlive a caller.
struct Shared {
    /// The batch script.
    script: &'static LazyLock<Lua>,
    /// The connection calls go out on (shared with the client).
    conn: Conn,
    /// Waiting requests and outstanding calls.
    queue: Mutex<Queue>,
    /// Replica acknowledgement each call waits for, if any.
    acks: Acks,
    /// The client's background work: calls sent for others, undos.
    tasks: Tasks,
}

impl std::fmt::Debug for Batcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let queue = self.shared.lock();
        f.debug_struct("Batcher")
            .field("pending", &queue.pending.len())
            .field("in_flight", &queue.in_flight)
            .finish_non_exhaustive()
    }
}

impl Batcher {
    /// A batcher for `script`, sending on `conn`; calls it sends on
    /// behalf of several callers are tracked in `tasks`.
    pub(crate) fn new(
        script: &'static LazyLock<Lua>,
        conn: Conn,
        acks: Acks,
        tasks: Tasks,
    ) -> Self {
        let queues = conn.is_cluster().then(|| Mutex::new(HashMap::new()));
        Batcher {
            shared: Arc::new(Shared {
                script,
                conn,
                queue: Mutex::new(Queue::default()),
                acks,
                tasks,
            }),
            queues,
        }
    }

    /// The client's background work, for undos of this batcher's requests.
    pub(crate) fn tasks(&self) -> &Tasks {
        &self.shared.tasks
    }

    /// The queue `call` belongs in: on a cluster, its node's (its slot's
    /// while the node is not known).
    fn queue_for(&self, call: &Call) -> Arc<Shared> {
        let Some(queues) = &self.queues else {
            return self.shared.clone();
        };
        let destination = self.shared.conn.destination_of(call.first_key());
        queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(destination)
            .or_insert_with(|| {
                Arc::new(Shared {
                    script: self.shared.script,
                    conn: self.shared.conn.clone(),
                    queue: Mutex::new(Queue::default()),
                    acks: self.shared.acks,
                    tasks: self.shared.tasks.clone(),
                })
            })
            .clone()
    }

    /// Queues one request and waits for its reply. The reply is the
    /// request's own element of the script's answer, converted to `T`; an
    /// error reply for this request alone comes back as `Err`. Also answers
    /// how many replicas acknowledged the call's writes when the batcher
    /// waits for them (`WAIT`, see [`Acks`]); `None` when it does not.
    /// `tracker`, if given, is dropped once the request is settled.
    ///
    /// Cancel safety: dropping the future before the request was sent
    /// withdraws it; after, the call goes on and only the reply is lost.
    pub(crate) async fn call<T: FromRedisValue>(
        &self,
        call: Call,
        tracker: Option<Tracker>,
    ) -> RedisResult<(T, Option<u32>)> {
        self.queue(call, tracker, None).await
    }

    /// As [`Batcher::call`], for a request whose effect must be undone if
    /// its caller goes away: when the future is dropped after the request
    /// was sent, `undo` runs once the call is over (on the sending task;
    /// spawn anything that waits), with `Some(raw reply)`, or `None` when
    /// the call failed as a whole and the outcome is unknown. It does not
    /// run when the caller read the answer or when the request was
    /// withdrawn unsent.
    ///
    /// Cancel safety: as above, with the undo covering a sent request.
    pub(crate) async fn call_undoable<T: FromRedisValue>(
        &self,
        call: Call,
        undo: impl FnOnce(Option<Value>) + Send + 'static,
    ) -> RedisResult<(T, Option<u32>)> {
        let undo: Undo = Arc::new(Mutex::new(Some(Box::new(undo))));
        self.queue(call, None, Some(undo)).await
    }

    async fn queue<T: FromRedisValue>(
        &self,
        call: Call,
        tracker: Option<Tracker>,
        undo: Option<Undo>,
    ) -> RedisResult<(T, Option<u32>)> {
        // The place of a call this caller takes, if it takes one. Declared
        // before the answer so that, dropped while the tasks ready to run
        // go first, the answer goes first: the guard then finds this
        // caller's request withdrawn, not to be sent (see `Outstanding`).
        #[allow(unused_assignments)] // read by its drop
        let mut place: Option<Outstanding> = None;
        let (reply, rx) = oneshot::channel();
        let mut answer = Answer {
            rx,
            undo: undo.clone(),
        };
        let shared = self.queue_for(&call);
        let id = next_request_id();
        let (sends, company) = {
            let mut queue = shared.lock();
            queue.pending.push(Request {
                id,
                call,
                reply,
                _tracker: tracker,
                undo,
            });
            let free = queue.in_flight < shared.max_in_flight();
            if free {
                queue.in_flight += 1;
            }
            (free, queue.company)
        };
        if sends {
            // The call's place is ours; the guard frees it (and sends what
            // queued meanwhile) however this future ends.
            place = Some(Outstanding(shared.clone()));
            // With callers coming in company, the tasks ready to run go
            // first: those woken by the same reply as this caller queue
            // their next requests now, and they travel in this call
            // instead of the next one.
            if company {
                behind_ready_tasks().await;
            }
            let batch = take_batch(&mut shared.lock());
            let slot = place.take();
            if batch.is_empty() {
                // A call that completed meanwhile took our request along.
                drop(slot);
            } else if batch.len() == 1 && batch[0].id == id && batch[0].undo.is_none() {
                // Only our own request (another call may have taken it
                // meanwhile, and left someone else's alone in the queue):
                // send it from this task. If this future is dropped
                // mid-call, only our reply is lost.
                // Boxed: the send's state (the script call, its WAIT) is
                // most of this future, and every layer above a call (the
                // acquire, the span, the caller) would otherwise hold it
                // and copy it each time it is moved.
                Box::pin(shared.send(batch)).await;
                drop(slot);
            } else {
                // Other callers' requests, or an undo that must see the
                // reply even if this future is dropped: a task sends.
                let tasks = shared.tasks.clone();
                tasks.spawn(async move {
                    shared.send(batch).await;
                    drop(slot);
                });
            }
        }
        let received = (&mut answer.rx).await;
        // The reply (or the news that none will come) is ours: disarm.
        answer.undo = None;
        let (value, acked) = received.map_err(|_| gone())??;
        if let Value::Array(items) = &value {
            if let [Value::Int(FAILED), message] = items.as_slice() {
                return Err(request_error(message));
            }
        }
        Ok((redis::from_redis_value(value)?, acked))
    }
}

/// A number no other request of this process has had.
fn next_request_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Lets every task that is ready to run on this runtime thread run before
/// the caller goes on: the caller wakes itself and yields, which puts it
/// at the back of the run queue (without waiting for the I/O driver, as
/// `tokio::task::yield_now` does). A reply carrying many callers' answers
/// wakes them all at once; without this, the first to ask again would
/// send its request alone and all the others would wait for that call to
/// complete. With nothing else ready it returns at once (on the
/// multi-thread runtime a parked worker may be woken and take the caller
/// over), so a lone request still never waits for company. Tasks waiting
/// in the runtime's shared queue may not all run first, and a caller
/// awaited directly by `block_on` (not as a task) is polled again at once:
/// their batches are then what they were without the pass.
async fn behind_ready_tasks() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await;
}

/// Status a batch script answers, with the error message, for a request
/// that failed on its own. (Nested error replies would fail the whole
/// reply in redis-rs, and with it every request of the batch.)
const FAILED: i64 = -2;

/// The error of one failed request, keeping the server's error code
/// (`WRONGTYPE`, ...) as the code.
fn request_error(message: &Value) -> RedisError {
    let text = match message {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => format!("{other:?}"),
    };
    let (code, detail) = text.split_once(' ').unwrap_or((text.as_str(), ""));
    redis::make_extension_error(code.to_owned(), Some(detail.to_owned()))
}

/// Up to [`MAX_BATCH`] requests from the front of the queue, leaving out
/// (and dropping) those whose caller went away; a batch taken records
/// whether it has company (an empty one, a sender whose request an earlier
/// call carried, says nothing about the load).
fn take_batch(queue: &mut Queue) -> Vec<Request> {
    let pending = &mut queue.pending;
    pending.retain(|request| !request.reply.is_closed());
    let batch: Vec<Request> = if pending.len() <= MAX_BATCH {
        std::mem::take(pending)
    } else {
        pending.drain(..MAX_BATCH).collect()
    };
    if !batch.is_empty() {
        queue.company = batch.len() > 1;
    }
    batch
}

/// An outstanding call. Dropping it (the call completed, or its sender was
/// cancelled) frees its place, or, when requests queued meanwhile, hands
/// the place to a task that sends them, after one pass of the run queue
/// when more than one queued or the last call carried more than one (as a
/// caller taking a free place does, see [`Batcher::call`]): the
/// callers the completed call's reply woke, and any other task ready to
/// run, queue their next requests first, and they travel in that call.
/// Where no task can run (no runtime on this thread, or a runtime that
/// shuts down and drops the task unrun), the place is given back instead
/// (see [`Shared::give_back`]).
struct Outstanding(Arc<Shared>);

impl Drop for Outstanding {
    fn drop(&mut self) {
        let company = {
            let mut queue = self.0.lock();
            queue.in_flight -= 1;
            // Requests whose caller went away are not sent.
            queue.pending.retain(|request| !request.reply.is_closed());
            if queue.pending.is_empty() {
                return;
            }
            queue.in_flight += 1;
            queue.company || queue.pending.len() > 1
        };
        if tokio::runtime::Handle::try_current().is_err() {
            // No runtime on this thread: no task can send the queue.
            self.0.give_back();
            return;
        }
        // Made here, not inside the task: a task its runtime drops unrun
        // (shutting down) drops the hand-off with it.
        let handoff = Handoff(Some(self.0.clone()));
        self.0.tasks.detach(
            "sending queued requests",
            "their callers fail",
            async move {
                let mut handoff = handoff;
                if company {
                    behind_ready_tasks().await;
                }
                let Some(shared) = handoff.0.take() else {
                    return;
                };
                let slot = Outstanding(shared.clone());
                let batch = take_batch(&mut shared.lock());
                // Empty if every caller went away meanwhile, or a call
                // that took the queue first carried it: a caller that
                // found the other free place (one server), or the other
                // place's hand-off.
                if !batch.is_empty() {
                    shared.send(batch).await;
                }
                drop(slot);
            },
        );
    }
}

/// The place a completed call hands on, held by the task that sends the
/// queue until that task takes it (and holds it as an [`Outstanding`]).
/// Dropped before (the runtime shut down and dropped the task unrun, or
/// during its pass), it gives the place back ([`Shared::give_back`])
/// without handing it on again: that would only spawn into the same
/// closing runtime.
struct Handoff(Option<Arc<Shared>>);

impl Drop for Handoff {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            shared.give_back();
        }
    }
}

/// The error a request gets when its reply was dropped: unsent (its queue
/// given back, see [`Shared::give_back`]) or mid-send (the task sending its
/// call dropped with its runtime).
fn gone() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::BrokenPipe,
        "the batched call carrying this request was abandoned",
    ))
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Frees a place no task can send the queue from (see
    /// [`Outstanding`]). Never spawns. While another call is out, the
    /// queue stays: that call's place looks at it when it is freed (and a
    /// request queued later on another runtime sharing the client is sent
    /// there). With none out, nobody would send it: every queued request
    /// fails (its caller sees its reply dropped, a connection error; the
    /// request was never sent).
    fn give_back(&self) {
        let abandoned = {
            let mut queue = self.lock();
            queue.in_flight -= 1;
            if queue.in_flight > 0 {
                Vec::new()
            } else {
                std::mem::take(&mut queue.pending)
            }
        };
        drop(abandoned);
    }

    /// Calls this queue keeps outstanding before requests wait to grow the
    /// next batch.
    fn max_in_flight(&self) -> usize {
        if self.conn.is_cluster() {
            MAX_IN_FLIGHT_PER_NODE
        } else {
            MAX_IN_FLIGHT
        }
    }

    /// Sends `batch`: one script call; on a cluster, where a call's
    /// declared keys must share one slot, see [`Shared::send_by_slot`].
    async fn send(self: &Arc<Self>, batch: Vec<Request>) {
        metrics::histogram!("locksmith_batch_size").record(batch.len() as f64);
        if self.conn.is_cluster() {
            // Boxed: the pipelined path's future is large, and every
            // caller's future holds this one (a lone request is sent
            // inline), so it would make every call's future larger.
            Box::pin(self.send_by_slot(batch)).await;
        } else {
            self.send_one(batch).await;
        }
    }

    /// [`Shared::send`] on a cluster. Requests of one slot go as one call.
    /// Requests of several slots (all bound for one node by the client's
    /// view) go as one call of the script's cross-slot variant where the
    /// cluster runs it ([`Shared::send_across`]), else as one call per slot,
    /// pipelined.
    async fn send_by_slot(self: &Arc<Self>, batch: Vec<Request>) {
        let mut by_slot = slot::by_slot(batch, |request| request.call.first_key());
        if by_slot.len() == 1 {
            let (_, batch) = by_slot.remove(0);
            return self.send_one(batch).await;
        }
        #[cfg(feature = "cluster")]
        if let (Some(across), Some(cluster)) = (self.script.across(), self.conn.cluster()) {
            if cluster.crosses_slots(across).await {
                return self.send_across(across, cluster, by_slot).await;
            }
        }
        self.send_pipelined(by_slot).await;
    }

    /// One call per slot, pipelined to their node with one `WAIT` after
    /// them all ([`Lua::run_pipelined`]).
    async fn send_pipelined(&self, mut by_slot: Vec<(Slot, Vec<Request>)>) {
        if by_slot.len() == 1 {
            let (_, batch) = by_slot.remove(0);
            return self.send_one(batch).await;
        }
        let calls = by_slot
            .iter()
            .map(|(slot, requests)| (*slot, self.command(requests)))
            .collect();
        let replies = self
            .script
            .run_pipelined(&self.conn, calls, self.acks)
            .await;
        for ((_, requests), reply) in by_slot.into_iter().zip(replies) {
            deliver(requests, reply, false);
        }
    }

    /// Several slots' requests in one call of `across`, the script's
    /// cross-slot variant (see `across.lua`): no declared keys, every key
    /// in ARGV with each slot's probe key, the call sent to the node
    /// redis-rs has for the first slot, once, as one call would be
    /// ([`Lua::run_at`]: at most once for a script that is not idempotent,
    /// one `WAIT`). The requests of a slot the node turned out not to
    /// serve whole did not run: they go again as calls of their own slot
    /// (which follow the cluster's redirects), after a reload of the view;
    /// so does the whole batch if the node proved the call did not run.
    /// Those go from a task of their own, so that the node's queue, which
    /// keeps one call out, is not held up by a slot being migrated.
    #[cfg(feature = "cluster")]
    async fn send_across(
        self: &Arc<Self>,
        across: &Lua,
        cluster: &ClusterConn,
        by_slot: Vec<(Slot, Vec<Request>)>,
    ) {
        let (Some(cmd), Some(&(first, _))) = (
            across_command(across, cluster.probes(), &by_slot),
            by_slot.first(),
        ) else {
            return self.send_pipelined(by_slot).await;
        };
        let batch: Vec<Request> = by_slot
            .into_iter()
            .flat_map(|(_, requests)| requests)
            .collect();
        let again = match across.run_at(cluster, first, &cmd, self.acks).await {
            Some(reply) => {
                let again = deliver(batch, reply, true);
                if !again.is_empty() {
                    metrics::counter!("locksmith_cross_slot_resends_total")
                        .increment(again.len() as u64);
                    cluster.moved();
                }
                again
            }
            None => batch,
        };
        // A request whose caller went away did not run: nothing to send
        // (as for a request dropped unsent, see `take_batch`).
        let again: Vec<Request> = again
            .into_iter()
            .filter(|request| !request.reply.is_closed())
            .collect();
        if !again.is_empty() {
            let shared = self.clone();
            self.tasks.spawn(async move {
                let by_slot = slot::by_slot(again, |request| request.call.first_key());
                shared.send_pipelined(by_slot).await;
            });
        }
    }

    /// The `EVALSHA` of `batch`, built in one buffer straight from the
    /// requests' arguments.
    fn command(&self, batch: &[Request]) -> redis::Cmd {
        let keys: usize = batch.iter().map(|r| r.call.keys).sum();
        let mut cmd = self.script.evalsha(keys);
        for request in batch {
            for key in request.call.keys() {
                key.write(&mut cmd);
            }
        }
        for request in batch {
            for arg in request.call.args() {
                arg.write(&mut cmd);
            }
        }
        cmd
    }

    /// One script call for `batch`; hands every request its reply.
    ///
    /// The call is run by [`Lua::run`] (which reloads the script on
    /// `NOSCRIPT` and never resends a script that is not idempotent).
    async fn send_one(&self, batch: Vec<Request>) {
        let cmd = self.command(&batch);
        let reply = self.script.run(&self.conn, &cmd, self.acks).await;
        deliver(batch, reply, false);
    }
}

/// Hands every request of `batch` its element of the script's `reply`.
/// For a cross-slot call (`across`), a request answered [`NOT_RUN`] gets
/// nothing: it comes back, to be sent again.
fn deliver(
    batch: Vec<Request>,
    reply: RedisResult<(Value, Option<u32>)>,
    across: bool,
) -> Vec<Request> {
    let mut again = Vec::new();
    let reply =
        reply.and_then(|(value, acked)| Ok((redis::from_redis_value::<Vec<Value>>(value)?, acked)));
    match reply {
        Ok((replies, acked)) if replies.len() == batch.len() => {
            for (request, reply) in batch.into_iter().zip(replies) {
                if across && not_run(&reply) {
                    again.push(request);
                    continue;
                }
                if let Err(Ok((reply, _))) = request.reply.send(Ok((reply, acked))) {
                    if let Some(undo) = &request.undo {
                        run_undo(undo, Some(reply));
                    }
                }
            }
        }
        Ok((replies, _)) => {
            let err = RedisError::from(std::io::Error::other(format!(
                "batch script answered {} replies for {} requests",
                replies.len(),
                batch.len()
            )));
            fail(batch, &err);
        }
        Err(err) => fail(batch, &err),
    }
    again
}

/// Fails every request of `batch` with `err`; an undo whose caller went
/// away runs without a reply (the outcome is unknown).
fn fail(batch: Vec<Request>, err: &RedisError) {
    for request in batch {
        if request.reply.send(Err(err.clone())).is_err() {
            if let Some(undo) = &request.undo {
                run_undo(undo, None);
            }
        }
    }
}

/// What `across.lua` answers for a request of a slot the node does not
/// serve whole: `{-10, message}`, the request did not run.
const NOT_RUN: i64 = -10;

fn not_run(reply: &Value) -> bool {
    matches!(reply, Value::Array(items) if matches!(items.as_slice(), [Value::Int(NOT_RUN), _]))
}

/// The call of `across` (see `across.lua`) for several slots' requests:
/// no KEYS; ARGV every request's arguments, then every request's keys,
/// then each slot's probe key and request count, then how many slots
/// there are. `None` if a slot has no probe key (the table covers every
/// slot, see `nodes::Across`).
#[cfg(feature = "cluster")]
fn across_command(
    across: &Lua,
    probes: &nodes::Probes,
    by_slot: &[(Slot, Vec<Request>)],
) -> Option<redis::Cmd> {
    let mut cmd = across.evalsha(0);
    let requests = || by_slot.iter().flat_map(|(_, requests)| requests);
    for request in requests() {
        for arg in request.call.args() {
            arg.write(&mut cmd);
        }
    }
    for request in requests() {
        for key in request.call.keys() {
            key.write(&mut cmd);
        }
    }
    for (slot, requests) in by_slot {
        cmd.arg(&**probes.get(slot)?).arg(requests.len());
    }
    cmd.arg(by_slot.len());
    Some(cmd)
}
