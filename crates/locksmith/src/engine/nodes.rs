//! Which cluster node serves which slot, as this client last saw it: what
//! lets script calls bound for one node travel together (one round trip,
//! one `WAIT`) although their keys live in different slots.
//!
//! The view only groups calls. redis-rs still routes every call itself
//! (a group goes to the node redis-rs has for its first call's slot), so a
//! stale view never sends a call to the wrong place: a call the node does
//! not serve is answered `MOVED` or `ASK`, which proves it did not run, and
//! is sent again on its own. The view is loaded on first use (calls go by
//! slot until then), reloaded after a `MOVED` and at most every
//! [`REFRESH_EVERY`] while in use.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock, RwLock};
use std::time::Duration;

use crate::engine::slot::Slot;
use redis::Value;
use tokio::time::Instant;

/// How old a view may get while calls use it before it is reloaded (in
/// the background; calls go on with the old one meanwhile).
pub(crate) const REFRESH_EVERY: Duration = Duration::from_secs(5);

/// The least time between two reloads after `MOVED` answers (a resharding
/// answers many at once).
pub(crate) const REFRESH_AFTER_MOVED: Duration = Duration::from_millis(100);

/// The slots in a cluster.
const SLOTS: u16 = 16384;

/// The client's view of the cluster's primaries (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct NodeMap {
    /// The last view loaded; `None` before the first.
    view: RwLock<Option<Arc<View>>>,
    /// True while a reload is under way (one at a time).
    loading: AtomicBool,
}

/// One loaded view.
#[derive(Debug)]
struct View {
    /// Per slot, the index of its primary in `nodes`.
    node_of: HashMap<Slot, u16>,
    /// The primaries, as `host:port`.
    nodes: Vec<Arc<str>>,
    /// When it was loaded.
    at: Instant,
}

impl NodeMap {
    /// The primary serving `slot` in the current view, if known.
    pub(crate) fn node_of(&self, slot: Slot) -> Option<Arc<str>> {
        let view = self.view.read().unwrap_or_else(|e| e.into_inner());
        let view = view.as_ref()?;
        let index = *view.node_of.get(&slot)?;
        view.nodes.get(usize::from(index)).cloned()
    }

    /// True when there is no view yet, or it is older than `age`.
    pub(crate) fn older_than(&self, age: Duration) -> bool {
        let view = self.view.read().unwrap_or_else(|e| e.into_inner());
        view.as_ref().is_none_or(|v| v.at.elapsed() >= age)
    }

    /// Claims the one reload allowed at a time; false when one is under way.
    pub(crate) fn start_loading(&self) -> bool {
        !self.loading.swap(true, Ordering::AcqRel)
    }

    /// Ends a reload: stores the view read from a `CLUSTER SLOTS` reply
    /// (a reply it cannot read leaves the old view). Answers whether it
    /// stored one.
    pub(crate) fn loaded(&self, reply: Option<Value>) -> bool {
        let view = reply.and_then(parse);
        let stored = view.is_some();
        if let Some(view) = view {
            *self.view.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(view));
        }
        self.loading.store(false, Ordering::Release);
        stored
    }
}

/// Whether the cluster runs one batch call carrying the requests of
/// several slots (a script flagged `allow-cross-slot-keys`: Redis 7 and
/// later), learnt on first use; and the probe key of every slot those
/// calls read to tell a slot this node serves whole (see `across.lua`).
#[derive(Debug)]
pub(crate) struct Across {
    /// [`UNKNOWN`], [`YES`] or [`NO`].
    state: AtomicU8,
    /// While [`UNKNOWN`]: no attempt to find out before this (an attempt
    /// that did not get through waits [`RETRY_ACROSS`] for the next).
    next_try: Mutex<Option<Instant>>,
    /// The client's key prefix, which every probe key carries right after
    /// its opening brace (so ACL key patterns that admit the client's
    /// auxiliary keys, `~*{<prefix>*`, admit its probes too).
    prefix: String,
    /// The probe keys, made on first use.
    probes: OnceLock<Arc<Probes>>,
}

/// How long after a failed attempt to find out whether the cluster runs
/// cross-slot batch calls the next one is made (calls go per slot
/// meanwhile).
pub(crate) const RETRY_ACROSS: Duration = Duration::from_secs(5);

/// Not known yet: the next call that would carry several slots finds out.
pub(crate) const UNKNOWN: u8 = 0;
/// The cluster runs cross-slot batch calls.
pub(crate) const YES: u8 = 1;
/// It does not (Redis 6): several slots' requests go as one call per
/// slot, pipelined.
pub(crate) const NO: u8 = 2;

/// Per slot, a key of that slot that never exists: a read of it fails
/// unless the node serves the whole slot.
pub(crate) type Probes = HashMap<Slot, Box<str>>;

impl Across {
    /// Unknown yet, for a client whose names start with `prefix`.
    pub(crate) fn new(prefix: &str) -> Across {
        Across {
            state: AtomicU8::new(UNKNOWN),
            next_try: Mutex::new(None),
            prefix: prefix.to_owned(),
            probes: OnceLock::new(),
        }
    }

    /// [`UNKNOWN`], [`YES`] or [`NO`].
    pub(crate) fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// Records what the cluster answered.
    pub(crate) fn set(&self, state: u8) {
        self.state.store(state, Ordering::Release);
    }

    /// Claims an attempt to find out, unless one failed less than
    /// [`RETRY_ACROSS`] ago (or another is under way).
    pub(crate) fn try_now(&self) -> bool {
        let mut next = self.next_try.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if next.is_some_and(|at| now < at) {
            return false;
        }
        // Until this attempt ends, others go per slot.
        *next = Some(now + RETRY_ACROSS);
        true
    }

    /// The attempt ended without an answer: the next one may be made
    /// [`RETRY_ACROSS`] from now.
    pub(crate) fn failed_now(&self) {
        *self.next_try.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(Instant::now() + RETRY_ACROSS);
    }

    /// Every slot's probe key.
    pub(crate) fn probes(&self) -> &Arc<Probes> {
        self.probes.get_or_init(|| probe_keys(&self.prefix))
    }
}

/// The probe keys of every slot for `prefix`: `{<prefix>locksmith-probe-N}`
/// with the least N that falls in the slot. Made once per prefix and
/// process (about 170,000 hashes).
fn probe_keys(prefix: &str) -> Arc<Probes> {
    static MADE: LazyLock<Mutex<HashMap<String, Arc<Probes>>>> = LazyLock::new(Mutex::default);
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(probes) = made.get(prefix) {
        return probes.clone();
    }
    let mut probes = Probes::with_capacity(usize::from(SLOTS));
    let mut key = String::new();
    let mut n: u64 = 0;
    while probes.len() < usize::from(SLOTS) {
        use std::fmt::Write;
        key.clear();
        let _ = write!(key, "{{{prefix}locksmith-probe-{n}}}");
        probes
            .entry(Slot::for_key(&key))
            .or_insert_with(|| key.as_str().into());
        n += 1;
    }
    let probes = Arc::new(probes);
    made.insert(prefix.to_owned(), probes.clone());
    probes
}

/// Reads a `CLUSTER SLOTS` reply: `[[start, end, [host, port, ...],
/// replicas...], ...]`.
fn parse(reply: Value) -> Option<View> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    let mut nodes: Vec<Arc<str>> = Vec::new();
    let mut node_of = HashMap::with_capacity(usize::from(SLOTS));
    for range in ranges {
        let Value::Array(range) = range else {
            return None;
        };
        let [Value::Int(start), Value::Int(end), Value::Array(primary), ..] = range.as_slice()
        else {
            return None;
        };
        let host = match primary.first()? {
            Value::BulkString(host) => String::from_utf8_lossy(host).into_owned(),
            Value::SimpleString(host) => host.clone(),
            _ => return None,
        };
        let Value::Int(port) = primary.get(1)? else {
            return None;
        };
        let name: Arc<str> = format!("{host}:{port}").into();
        let index = match nodes.iter().position(|n| *n == name) {
            Some(i) => i,
            None => {
                nodes.push(name);
                nodes.len() - 1
            }
        };
        let index = u16::try_from(index).ok()?;
        let (start, end) = (u16::try_from(*start).ok()?, u16::try_from(*end).ok()?);
        for slot in start..=end.min(SLOTS - 1) {
            node_of.insert(Slot::new(slot)?, index);
        }
    }
    Some(View {
        node_of,
        nodes,
        at: Instant::now(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn every_slot_has_a_probe_key_of_its_own() {
        let started = std::time::Instant::now();
        let probes = probe_keys("app1:");
        let took = started.elapsed();
        assert_eq!(probes.len(), usize::from(SLOTS));
        for (slot, key) in probes.iter() {
            assert_eq!(Slot::for_key(&**key), *slot);
            assert!(key.starts_with("{app1:locksmith-probe-") && key.ends_with('}'));
        }
        // Made once per prefix.
        assert!(Arc::ptr_eq(&probes, &probe_keys("app1:")));
        let plain = probe_keys("");
        assert!(plain.values().all(|k| k.starts_with("{locksmith-probe-")));
        eprintln!("probe keys made in {took:?}");
    }

    #[test]
    fn reads_cluster_slots() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(8000),
                node("127.0.0.1", 7000),
            ]),
            Value::Array(vec![
                Value::Int(8001),
                Value::Int(16383),
                node("127.0.0.1", 7001),
                node("127.0.0.1", 7004),
            ]),
        ]);
        let map = NodeMap::default();
        assert!(map.older_than(Duration::from_secs(3600)));
        assert!(map.start_loading());
        assert!(!map.start_loading(), "one reload at a time");
        assert!(map.loaded(Some(reply)));
        assert!(map.start_loading(), "free again");
        assert!(!map.older_than(Duration::from_secs(3600)));
        let of = |slot| map.node_of(Slot::new(slot).unwrap()).unwrap();
        assert_eq!(&*of(0), "127.0.0.1:7000");
        assert_eq!(&*of(8000), "127.0.0.1:7000");
        assert_eq!(&*of(8001), "127.0.0.1:7001");
        assert_eq!(&*of(16383), "127.0.0.1:7001");
        // A reply it cannot read keeps the view.
        assert!(!map.loaded(Some(Value::Int(3))));
        assert_eq!(&*of(0), "127.0.0.1:7000");
    }
}
