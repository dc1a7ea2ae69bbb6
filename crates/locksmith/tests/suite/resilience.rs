//! Server trouble: a restart under a waiter, and resent commands after a
//! lost reply (the scripts must be idempotent).

use crate::common;

use std::time::Duration;

use common::{client, setup};
use locksmith_testkit::RedisServer;
use redis::Script;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_recovers_when_redis_restarts() {
    let lease = Duration::from_millis(1500);
    let (mut server, holder) = setup(lease).await;
    let waiter_client = client(&server, lease).await;
    let guard = holder.lock("restart").unwrap().lock().await.unwrap();
    let lost = guard.lost();

    let waiter_lock = waiter_client.lock("restart").unwrap();
    let waiter =
        tokio::spawn(async move { waiter_lock.try_lock_for(Duration::from_secs(30)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;

    // No persistence: the restarted server has forgotten the lock.
    server.restart().unwrap();

    let got = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("waiter finishes")
        .unwrap();
    let got = got
        .expect("waiter survives the restart")
        .expect("and acquires");
    tokio::time::timeout(Duration::from_secs(10), lost.wait())
        .await
        .expect("the old holder learns its lock is gone");
    assert!(matches!(
        guard.release().await,
        Err(locksmith::Error::NotHeld { .. })
    ));
    got.release().await.unwrap();
}

fn conn(server: &RedisServer) -> redis::Connection {
    server.connection().unwrap()
}

/// One acquire request of the batch script: (lock, owner, expected count).
type AcquireReq<'a> = (&'a str, &'a str, u32);

/// Runs the acquire script with the given requests in one call.
fn acquire_batch(c: &mut redis::Connection, reqs: &[AcquireReq]) -> Vec<redis::Value> {
    let script = Script::new(locksmith::script_source("lock/reentrant/acquire").unwrap());
    let mut inv = script.prepare_invoke();
    for (name, _, _) in reqs {
        inv.key(*name)
            .key(format!("redisson_lock_token:{{{name}}}"));
    }
    for (_, owner, expected) in reqs {
        inv.arg(10_000).arg(*owner).arg(*expected);
    }
    inv.invoke(c).unwrap()
}

/// Runs the release script for one request: (lock, owner, expected count,
/// successor or "").
fn release_one(
    c: &mut redis::Connection,
    name: &str,
    owner: &str,
    expected: u32,
    successor: &str,
    if_alone: bool,
) -> (i64, i64) {
    let script = Script::new(locksmith::script_source("lock/reentrant/release").unwrap());
    let replies: Vec<(i64, i64)> = script
        .key(name)
        .key(format!("redisson_lock__channel:{{{name}}}"))
        .key(format!("redisson_lock_token:{{{name}}}"))
        .arg(10_000)
        .arg(owner)
        .arg(expected)
        .arg(0)
        .arg(successor)
        .arg(10_000)
        .arg(if if_alone { "1" } else { "0" })
        .arg("p")
        .arg(0)
        .arg(0)
        .invoke(c)
        .unwrap();
    replies[0]
}

fn acquire_one(
    c: &mut redis::Connection,
    name: &str,
    owner: &str,
    expected: u32,
) -> (i64, i64, i64) {
    // Replies of status 2 carry a fourth element (the remaining TTL).
    let reply: Vec<i64> =
        redis::from_redis_value(acquire_batch(c, &[(name, owner, expected)]).remove(0)).unwrap();
    (reply[0], reply[1], reply[2])
}

#[test]
fn resent_acquire_and_release_do_not_double_count() {
    let server = RedisServer::start().unwrap();
    let mut c = conn(&server);
    let owner = "00000000-0000-4000-8000-000000000000:1";
    // An existing counter continues (a new one starts from the clock).
    let _: () = redis::cmd("SET")
        .arg("redisson_lock_token:{idem}")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    let count = |c: &mut redis::Connection| -> Option<i64> {
        redis::cmd("HGET").arg("idem").arg(owner).query(c).unwrap()
    };

    // First grant, then its resend: one hold, one fencing token; the
    // resend says the grant (and its lease) came from an earlier send.
    assert_eq!(acquire_one(&mut c, "idem", owner, 0), (1, 1001, 1));
    assert_eq!(acquire_one(&mut c, "idem", owner, 0), (2, 1001, 1));
    assert_eq!(count(&mut c), Some(1));
    // Reentrant grant and its resend: two holds.
    assert_eq!(acquire_one(&mut c, "idem", owner, 1), (1, 1001, 2));
    assert_eq!(acquire_one(&mut c, "idem", owner, 1), (2, 1001, 2));
    assert_eq!(count(&mut c), Some(2));
    // Release from 2 and its resend: one hold left; the resend changes
    // nothing (not even the lease) and says so.
    assert_eq!(release_one(&mut c, "idem", owner, 2, "", false), (2, 1));
    assert_eq!(release_one(&mut c, "idem", owner, 2, "", false), (4, 1));
    assert_eq!(count(&mut c), Some(1));
    // Final release frees; its resend finds nothing (the client treats a
    // "gone" answer to a resent final release as success).
    assert_eq!(release_one(&mut c, "idem", owner, 1, "", false), (1, 0));
    assert_eq!(release_one(&mut c, "idem", owner, 1, "", false), (0, 0));
    assert_eq!(count(&mut c), None);
    // A count the server does not agree with is reported, not papered over.
    assert_eq!(acquire_one(&mut c, "idem", owner, 3).0, -1);
    // The next grant from free has a larger token.
    assert_eq!(acquire_one(&mut c, "idem", owner, 0), (1, 1002, 1));
}

#[test]
fn handoff_release_is_idempotent_and_issues_a_new_token() {
    let server = RedisServer::start().unwrap();
    let mut c = conn(&server);
    let a = "00000000-0000-4000-8000-000000000000:1";
    let b = "00000000-0000-4000-8000-000000000000:2";
    let _: () = redis::cmd("SET")
        .arg("redisson_lock_token:{ho}")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    assert_eq!(acquire_one(&mut c, "ho", a, 0), (1, 1001, 1));
    // Final release with a successor: b holds once, with the next token.
    assert_eq!(release_one(&mut c, "ho", a, 1, b, false), (3, 1002));
    let holders: Vec<(String, i64)> = redis::cmd("HGETALL").arg("ho").query(&mut c).unwrap();
    assert_eq!(holders, vec![(b.to_owned(), 1)]);
    let ttl: i64 = redis::cmd("PTTL").arg("ho").query(&mut c).unwrap();
    assert!(ttl > 9_000, "successor's lease set, got {ttl}");
    // The resend recognizes the landed hand-off instead of reporting "not
    // held", and changes nothing.
    assert_eq!(release_one(&mut c, "ho", a, 1, b, false), (3, 1002));
    assert_eq!(acquire_one(&mut c, "ho", b, 0), (2, 1002, 1));
    // A release with holds left never hands off.
    assert_eq!(acquire_one(&mut c, "ho", b, 1), (1, 1002, 2));
    assert_eq!(release_one(&mut c, "ho", b, 2, a, false), (2, 1));
    // A non-owner's release hands nothing to anyone.
    assert_eq!(release_one(&mut c, "ho", a, 1, a, false), (0, 0));
    assert_eq!(release_one(&mut c, "ho", b, 1, "", false), (1, 0));

    // Past the streak limit ("if alone"): with only one listener on the
    // channel (the releasing client's own) the hand-off goes ahead ...
    let mut listener = server.connection().unwrap();
    let mut first = listener.as_pubsub();
    first.subscribe("redisson_lock__channel:{ho}").unwrap();
    assert_eq!(acquire_one(&mut c, "ho", a, 0), (1, 1003, 1));
    assert_eq!(release_one(&mut c, "ho", a, 1, b, true), (3, 1004));
    // ... but a second listener (another client waiting) gets a real
    // release and its message.
    let mut other = server.connection().unwrap();
    let mut second = other.as_pubsub();
    second.subscribe("redisson_lock__channel:{ho}").unwrap();
    assert_eq!(release_one(&mut c, "ho", b, 1, a, true), (1, 0));
    second
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let message = second.get_message().unwrap();
    assert_eq!(message.get_payload::<String>().unwrap(), "0");
}

#[test]
fn one_bad_request_in_a_batch_does_not_fail_the_others() {
    let server = RedisServer::start().unwrap();
    let mut c = conn(&server);
    let _: () = redis::cmd("SET").arg("str").arg("x").query(&mut c).unwrap();
    let owner = "00000000-0000-4000-8000-000000000000:7";
    let replies = acquire_batch(
        &mut c,
        &[("one", owner, 0), ("str", owner, 0), ("two", owner, 0)],
    );
    assert_eq!(replies.len(), 3);
    // New counters start from the server's clock in microseconds.
    let first: (i64, i64, i64) = redis::from_redis_value(replies[0].clone()).unwrap();
    assert_eq!((first.0, first.2), (1, 1));
    assert!(first.1 > 1_700_000_000_000_000, "{first:?}");
    let (status, message): (i64, String) = redis::from_redis_value(replies[1].clone()).unwrap();
    assert_eq!(status, -2);
    assert!(message.starts_with("WRONGTYPE"), "{message}");
    let third: (i64, i64, i64) = redis::from_redis_value(replies[2].clone()).unwrap();
    assert_eq!((third.0, third.2), (1, 1));
    assert!(third.1 >= first.1, "{third:?}");
    // The string was left alone.
    let v: String = redis::cmd("GET").arg("str").query(&mut c).unwrap();
    assert_eq!(v, "x");
    // A fencing counter of the wrong type fails the grant with nothing
    // written: no half-granted lock without a token.
    let _: () = redis::cmd("HSET")
        .arg("redisson_lock_token:{three}")
        .arg("f")
        .arg("v")
        .query(&mut c)
        .unwrap();
    let replies = acquire_batch(&mut c, &[("three", owner, 0)]);
    let (status, message): (i64, String) = redis::from_redis_value(replies[0].clone()).unwrap();
    assert_eq!(
        (status, message.starts_with("WRONGTYPE")),
        (-2, true),
        "{message}"
    );
    let exists: i64 = redis::cmd("EXISTS").arg("three").query(&mut c).unwrap();
    assert_eq!(exists, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_after_the_server_loses_its_data() {
    let mut server = RedisServer::start().unwrap();
    let client = locksmith::Client::open(&server.url()).await.unwrap();
    let lock = client.lock("restarted").unwrap();
    let before = lock.lock().await.unwrap();
    let first = before.fencing_token();
    drop(before);
    // Restart without persistence: the lock and its counter are gone.
    server.restart().unwrap();
    let again = loop {
        match lock.try_lock_for(std::time::Duration::from_secs(1)).await {
            Ok(Some(guard)) => break guard,
            Ok(None) => {}
            Err(e) if e.is_connection_error() || e.is_timeout() => {}
            Err(e) => panic!("{e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(
        again.fencing_token() > first,
        "{} after {first}: a new counter starts from the server clock",
        again.fencing_token()
    );
    again.release().await.unwrap();
}
