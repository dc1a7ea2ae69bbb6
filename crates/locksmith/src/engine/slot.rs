//! Grouping calls by cluster slot. On a cluster, script calls and renewals
//! go one call per slot (or per node, see `nodes.rs`); without the
//! `cluster` cargo feature there is no cluster, every key falls in the one
//! group, and [`Slot`] is a stand-in with that single value.

#[cfg(feature = "cluster")]
pub(crate) use redis::cluster_routing::Slot;

/// The one group of a build without the `cluster` feature (see the module
/// docs).
#[cfg(not(feature = "cluster"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Slot;

#[cfg(not(feature = "cluster"))]
impl Slot {
    /// Every key's group.
    pub(crate) fn for_key<K: AsRef<[u8]>>(_key: K) -> Slot {
        Slot
    }
}

/// `items` split by the slot of each one's key: the slots in the order
/// they first appear, each with its items in their order (a batch sent as
/// one call per slot).
pub(crate) fn by_slot<T>(items: Vec<T>, key: impl Fn(&T) -> &str) -> Vec<(Slot, Vec<T>)> {
    let mut groups: Vec<(Slot, Vec<T>)> = Vec::new();
    for item in items {
        let slot = Slot::for_key(key(&item));
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, same)) => same.push(item),
            None => groups.push((slot, vec![item])),
        }
    }
    groups
}

#[cfg(all(test, feature = "cluster"))]
mod tests {
    use super::*;

    #[test]
    fn splits_by_slot_in_order() {
        let groups = by_slot(vec!["{a}1", "{b}1", "{a}2", "{b}2", "{c}"], |k| k);
        let keys: Vec<Vec<&str>> = groups.into_iter().map(|(_, g)| g).collect();
        assert_eq!(
            keys,
            [vec!["{a}1", "{a}2"], vec!["{b}1", "{b}2"], vec!["{c}"]]
        );
    }
}
