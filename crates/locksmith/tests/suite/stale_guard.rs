//! A guard releases only the hold it was granted. An owner holds twice
//! (`g1`, `g1b`), the hold is lost (a fixed lease runs out), `g1b`'s
//! release answers `NotHeld` and the owner starts afresh; the same handle
//! takes the lock again (`g2`). The stale `g1` must answer `NotHeld` too,
//! and `g2` stay held and exclusive: before guards knew their episode,
//! `g1`'s release freed `g2`'s hold, answered `Ok`, and let another client
//! in while `g2` looked held.

use std::time::Duration;

use locksmith::{Client, ErrorKind, FairLock, Lock, ReadWriteLock};

use crate::common::Env;

crate::on_every_topology!(
    a_stale_lock_guard_leaves_the_next_hold_alone,
    a_stale_fair_lock_guard_leaves_the_next_hold_alone,
    a_stale_write_guard_leaves_the_next_hold_alone,
);

/// The lease of the holds that are lost.
const SHORT: Duration = Duration::from_millis(300);
/// The lease of the next hold: it outlasts the checks on any machine.
const LONG: Duration = Duration::from_secs(30);

/// One kind's steps: `$make(client, name)` a handle, `$take` its acquire,
/// `$try` its non-waiting acquire.
macro_rules! stale_guard_leaves_the_next_hold_alone {
    ($env:ident, $make:expr, $take:ident, $try:ident) => {{
        let client = $env.client(LONG).await;
        let other = $env.client(LONG).await;
        let name = $env.name("stale");
        let handle = $make(&client, &name);
        let short = handle.with_lease(SHORT).unwrap();
        let g1 = short.$take().await.unwrap();
        let g1b = short.$take().await.unwrap();
        // The lease runs out on the server: the hold is lost.
        tokio::time::sleep(SHORT * 3).await;
        let err = g1b.release().await.expect_err("the hold was lost");
        assert_eq!(err.kind(), ErrorKind::NotHeld, "{err}");
        // The same owner takes the lock again: a new episode.
        let g2 = handle.with_lease(LONG).unwrap().$take().await.unwrap();
        let err = g1
            .release()
            .await
            .expect_err("a guard of the lost hold releases nothing");
        assert_eq!(err.kind(), ErrorKind::NotHeld, "{err}");
        assert!(!g2.is_lost(), "the new hold is untouched");
        let rival = $make(&other, &name);
        assert!(
            rival.$try().await.unwrap().is_none(),
            "the new hold still excludes another client"
        );
        g2.release().await.unwrap();
        let next = rival.$try().await.unwrap().expect("free after its release");
        next.release().await.unwrap();
    }};
}

async fn a_stale_lock_guard_leaves_the_next_hold_alone(env: Env) {
    stale_guard_leaves_the_next_hold_alone!(
        env,
        |c: &Client, n: &str| -> Lock { c.lock(n).unwrap() },
        lock,
        try_lock
    );
}

async fn a_stale_fair_lock_guard_leaves_the_next_hold_alone(env: Env) {
    stale_guard_leaves_the_next_hold_alone!(
        env,
        |c: &Client, n: &str| -> FairLock { c.fair_lock(n).unwrap() },
        lock,
        try_lock
    );
}

async fn a_stale_write_guard_leaves_the_next_hold_alone(env: Env) {
    stale_guard_leaves_the_next_hold_alone!(
        env,
        |c: &Client, n: &str| -> ReadWriteLock { c.read_write_lock(n).unwrap() },
        write,
        try_write
    );
}
