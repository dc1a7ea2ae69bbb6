//! The blocking facade: same semantics as the async API, no runtime of
//! the caller's, refused inside an async runtime, guards release on drop.
#![cfg(feature = "blocking")]

use std::time::Duration;

use locksmith::blocking::Client;
use locksmith::ErrorKind;
use locksmith_testkit::RedisServer;

#[test]
fn locks_exclude_across_threads_and_release_on_drop() {
    let server = RedisServer::start().unwrap();
    let client = Client::open(&server.url()).unwrap();
    let guard = client.lock("b:lock").unwrap().lock().unwrap();
    assert!(guard.fencing_token() > 0);
    let other = client.clone();
    let blocked = std::thread::spawn(move || {
        other
            .lock("b:lock")
            .unwrap()
            .try_lock_for(Duration::from_millis(200))
            .unwrap()
            .is_none()
    });
    assert!(blocked.join().unwrap(), "held by the first guard");
    // Dropped, not released: the release happens in the background.
    drop(guard);
    let next = client
        .lock("b:lock")
        .unwrap()
        .try_lock_for(Duration::from_secs(5))
        .unwrap()
        .expect("freed by the dropped guard");
    next.release().unwrap();
    // Every kind.
    let r1 = client.read_lock("b:rw").unwrap().lock().unwrap();
    let r2 = client.read_lock("b:rw").unwrap().lock().unwrap();
    assert!(client
        .write_lock("b:rw")
        .unwrap()
        .try_lock()
        .unwrap()
        .is_none());
    r1.release().unwrap();
    r2.release().unwrap();
    let f = client.fair_lock("b:fair").unwrap().lock().unwrap();
    f.release().unwrap();
    let pool = client.semaphore("b:pool").unwrap();
    pool.try_set_permits(1).unwrap();
    let p = pool.acquire(1).unwrap();
    assert!(pool
        .try_acquire_for(1, Duration::from_millis(50))
        .unwrap()
        .is_none());
    p.release().unwrap();
    assert_eq!(pool.available().unwrap(), 1);
    // Simple lock, MultiLock, permits.
    let simple = client.simple_lock("b:simple").unwrap().lock().unwrap();
    assert!(client
        .simple_lock("b:simple")
        .unwrap()
        .try_lock()
        .unwrap()
        .is_none());
    simple.release().unwrap();
    let both = client
        .multi_lock(["{b}:x", "{b}:y"])
        .unwrap()
        .lock()
        .unwrap();
    assert_eq!(both.fencing_tokens().len(), 2);
    assert!(client
        .multi_lock(["{b}:y"])
        .unwrap()
        .try_lock_for(Duration::from_millis(50))
        .unwrap()
        .is_none());
    drop(both); // released before the drop returns
    assert!(client.lock("{b}:x").unwrap().try_lock().unwrap().is_some());
    let permits = client.expirable_semaphore("b:permits").unwrap();
    permits.try_set_permits(1).unwrap();
    let permit = permits.acquire().unwrap();
    assert_eq!(permit.id().len(), 32);
    assert!(permits
        .try_acquire_for(Duration::from_millis(50))
        .unwrap()
        .is_none());
    drop(permit);
    assert_eq!(permits.available().unwrap(), 1);
}

#[test]
fn a_guard_dropped_as_the_program_ends_leaves_nothing_held() {
    let server = RedisServer::start().unwrap();
    {
        let client = Client::open(&server.url()).unwrap();
        let guard = client.lock("b:end").unwrap().lock().unwrap();
        // The client goes first, then the guard (the end of a `main`).
        drop(client);
        drop(guard);
    }
    let mut conn = server.connection().unwrap();
    let held: bool = redis::cmd("EXISTS").arg("b:end").query(&mut conn).unwrap();
    assert!(!held, "released before the drop returned");
}

#[test]
fn errors_are_the_async_api_errors() {
    let server = RedisServer::start().unwrap();
    let client = Client::open(&server.url()).unwrap();
    assert_eq!(
        client.lock("").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let guard = client
        .lock("b:short")
        .unwrap()
        .with_lease(Duration::from_millis(100))
        .unwrap()
        .lock()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(guard.is_lost());
    assert_eq!(guard.release().unwrap_err().kind(), ErrorKind::NotHeld);
    let err = Client::open("redis://127.0.0.1:1").unwrap_err();
    assert!(err.is_connection_error() || err.is_timeout(), "{err}");
}

#[tokio::test]
async fn inside_an_async_runtime_it_is_refused_not_deadlocked() {
    let err = Client::open("redis://127.0.0.1:1").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("async"), "{err}");
}

#[test]
fn close_refuses_new_acquires_and_reports_held_locks_lost() {
    let server = RedisServer::start().unwrap();
    let client = Client::open(&server.url()).unwrap();
    let guard = client.lock("b:close").unwrap().lock().unwrap();
    client.close().unwrap();
    assert!(guard.is_lost(), "a lock held at close reports lost");
    let err = client.lock("b:other").unwrap().try_lock().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed, "{err}");
    guard.release().unwrap();
    let mut conn = server.connection().unwrap();
    let held: bool = redis::cmd("EXISTS")
        .arg("b:close")
        .query(&mut conn)
        .unwrap();
    assert!(!held, "a release after close still frees the lock");
}

#[test]
fn guards_and_permits_extend_a_fixed_lease() {
    let server = RedisServer::start().unwrap();
    let client = Client::open(&server.url()).unwrap();
    // A fixed lease that outlasts the calls up to each extend on a loaded
    // machine.
    let short = Duration::from_secs(3);
    let guard = client
        .lock("b:extend")
        .unwrap()
        .with_lease(short)
        .unwrap()
        .lock()
        .unwrap();
    guard.extend(Duration::from_secs(20)).unwrap();
    assert!(guard.remaining_lease() > Duration::from_secs(15));
    std::thread::sleep(short + Duration::from_millis(200));
    assert!(!guard.is_lost());
    guard.release().unwrap();

    let sem = client.expirable_semaphore("b:extend-permits").unwrap();
    assert!(sem.try_set_permits(1).unwrap());
    let permit = sem.with_lease(short).unwrap().acquire().unwrap();
    permit.extend(Duration::from_secs(20)).unwrap();
    std::thread::sleep(short + Duration::from_millis(200));
    assert_eq!(sem.available().unwrap(), 0, "still taken");
    permit.release().unwrap();
    let watchdog = client.lock("b:extend-watchdog").unwrap().lock().unwrap();
    assert_eq!(
        watchdog.extend(Duration::from_secs(5)).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn threads_sharing_one_handle_exclude_each_other() {
    let server = RedisServer::start().unwrap();
    let client = Client::open(&server.url()).unwrap();
    let lock = client.lock("b:shared-handle").unwrap();
    let guard = lock.lock().unwrap();
    let again = lock.lock().unwrap();
    let other = lock.clone();
    let shut_out = std::thread::spawn(move || other.try_lock().unwrap().is_none());
    assert!(
        shut_out.join().unwrap(),
        "another thread does not get into this thread's hold"
    );
    again.release().unwrap();
    guard.release().unwrap();
    let other = lock.clone();
    let took = std::thread::spawn(move || other.try_lock().unwrap().map(|g| g.release()).is_some());
    assert!(took.join().unwrap(), "free once the hold ended");
}
