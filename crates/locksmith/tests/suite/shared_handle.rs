//! One lock handle shared by concurrent tasks, as a service keeps it in
//! its state: the tasks exclude each other (each task is its own actor on
//! the handle's owner), while one task still re-enters its own hold.

use crate::common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use axum::Router;
use common::setup;
use tower::ServiceExt;

/// The service's state: one lock handle for every request, and how many
/// requests were inside the critical section at once.
#[derive(Clone)]
struct AppState {
    lock: locksmith::Lock,
    inside: Arc<AtomicU32>,
    most: Arc<AtomicU32>,
}

/// Takes the shared handle's lock, re-enters it (the same request, the
/// same task), and stays a moment inside.
async fn buy(State(state): State<AppState>) -> Result<String, StatusCode> {
    let fail = |_| StatusCode::INTERNAL_SERVER_ERROR;
    let guard = state.lock.lock().await.map_err(fail)?;
    let now = state.inside.fetch_add(1, Ordering::SeqCst) + 1;
    state.most.fetch_max(now, Ordering::SeqCst);
    let again = tokio::time::timeout(Duration::from_secs(5), state.lock.lock())
        .await
        .map_err(|_| StatusCode::LOOP_DETECTED)?
        .map_err(fail)?;
    tokio::time::sleep(Duration::from_millis(20)).await;
    state.inside.fetch_sub(1, Ordering::SeqCst);
    let token = guard.fencing_token();
    again.release().await.map_err(fail)?;
    guard.release().await.map_err(fail)?;
    Ok(token.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_sharing_the_state_handle_never_overlap() {
    let (_server, client) = setup(Duration::from_secs(10)).await;
    let state = AppState {
        lock: client.lock("shared-state").unwrap(),
        inside: Arc::default(),
        most: Arc::default(),
    };
    let app = Router::new()
        .route("/buy", post(buy))
        .with_state(state.clone());
    let requests: Vec<_> = (0..8)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move {
                let request = Request::post("/buy")
                    .body(axum::body::Body::empty())
                    .unwrap();
                app.oneshot(request).await.unwrap()
            })
        })
        .collect();
    let mut tokens = Vec::new();
    for request in requests {
        let response = tokio::time::timeout(Duration::from_secs(20), request)
            .await
            .expect("every request ends")
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = axum::body::to_bytes(response.into_body(), 64)
            .await
            .unwrap();
        tokens.push(String::from_utf8(body.to_vec()).unwrap());
    }
    assert_eq!(
        state.most.load(Ordering::SeqCst),
        1,
        "two requests were inside at once"
    );
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 8, "each request had a hold of its own");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_task_is_shut_out_until_the_hold_ends() {
    let (_server, client) = setup(Duration::from_secs(10)).await;
    let lock = Arc::new(client.lock("shared-tasks").unwrap());
    let guard = lock.lock().await.unwrap();
    let again = lock.lock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 2, "this task re-enters");
    let other = lock.clone();
    let tried = tokio::spawn(async move { other.try_lock().await.unwrap().is_none() })
        .await
        .unwrap();
    assert!(tried, "another task does not get into this task's hold");
    let other = lock.clone();
    let waiter = tokio::spawn(async move {
        let guard = other.lock().await.unwrap();
        guard.fencing_token()
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "it waits");
    let first = guard.fencing_token();
    again.release().await.unwrap();
    guard.release().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("granted once the hold ended")
        .unwrap();
    assert!(next > first, "a hold of its own: {first} then {next}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fair_lock_and_the_write_side_shut_out_other_tasks_too() {
    let (_server, client) = setup(Duration::from_secs(10)).await;
    let fair = Arc::new(client.fair_lock("shared-fair").unwrap());
    let held = fair.lock().await.unwrap();
    let other = fair.clone();
    let shut_out = tokio::spawn(async move { other.try_lock().await.unwrap().is_none() });
    assert!(shut_out.await.unwrap(), "fair lock");
    held.release().await.unwrap();

    let rw = Arc::new(client.read_write_lock("shared-rw").unwrap());
    let written = rw.write().await.unwrap();
    let reread = rw.read().await.unwrap();
    reread.release().await.unwrap();
    for write in [true, false] {
        let other = rw.clone();
        let shut_out = tokio::spawn(async move {
            if write {
                other.try_write().await.unwrap().is_none()
            } else {
                other.try_read().await.unwrap().is_none()
            }
        });
        assert!(
            shut_out.await.unwrap(),
            "write side, then a read of another task"
        );
    }
    written.release().await.unwrap();
    // Readers of several tasks share the read side as before.
    let read = rw.read().await.unwrap();
    let other = rw.clone();
    let shared =
        tokio::spawn(async move { other.try_read().await.unwrap().map(|g| g.name().to_owned()) });
    assert!(shared.await.unwrap().is_some(), "reads are shared");
    read.release().await.unwrap();
}

/// A MultiLock's all-members call runs in a task of its own: the members'
/// holds are still the calling task's, and a member held by another task
/// through a shared handle shuts the MultiLock out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multilock_sees_the_tasks_of_its_members() {
    let (_server, client) = setup(Duration::from_secs(10)).await;
    let a = client.lock("{shared-multi}a").unwrap();
    let b = client.lock("{shared-multi}b").unwrap();
    let multi = Arc::new(locksmith::MultiLock::new([a.clone().into(), b.clone().into()]).unwrap());

    // Taken in this task: this task re-enters a member.
    let together = multi.lock().await.unwrap();
    let again = tokio::time::timeout(Duration::from_secs(5), a.try_lock())
        .await
        .expect("no wait on this task's own hold")
        .unwrap()
        .expect("this task re-enters its member");
    // Another task does not get into it, through the member or the MultiLock.
    let (other_a, other_multi) = (a.clone(), multi.clone());
    let shut_out = tokio::spawn(async move {
        (
            other_a.try_lock().await.unwrap().is_none(),
            other_multi.try_lock().await.unwrap().is_none(),
        )
    });
    assert_eq!(shut_out.await.unwrap(), (true, true));
    again.release().await.unwrap();
    together.release().await.unwrap();

    // A member held by this task shuts out another task's MultiLock.
    let held = a.lock().await.unwrap();
    let other_multi = multi.clone();
    let shut_out = tokio::spawn(async move { other_multi.try_lock().await.unwrap().is_none() });
    assert!(shut_out.await.unwrap(), "the member is this task's");
    held.release().await.unwrap();
    assert!(!a.is_locked().await.unwrap() && !b.is_locked().await.unwrap());
}

/// A local release that hands the lock to a parked waiter of the shared
/// handle does not make the hold the releasing task's.
#[tokio::test(flavor = "current_thread")]
async fn a_handed_over_hold_is_the_waiters() {
    let (_server, client) = setup(Duration::from_secs(10)).await;
    let shared = client.lock("shared-handoff").unwrap();
    let other = client.lock("shared-handoff").unwrap();
    let held = other.lock().await.unwrap();
    let waiter = {
        let shared = shared.clone();
        tokio::spawn(async move {
            let guard = shared.lock().await.unwrap();
            let again = shared.try_lock().await.unwrap().expect("its own hold");
            again.release().await.unwrap();
            guard
        })
    };
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            client.parked_waiter_count() == 1
        })
        .await
    );
    held.release().await.unwrap();
    assert!(
        shared.try_lock().await.unwrap().is_none(),
        "the releasing task got into the waiter's hold"
    );
    let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(client.local_handoff_count(), 1);
    guard.release().await.unwrap();
}
