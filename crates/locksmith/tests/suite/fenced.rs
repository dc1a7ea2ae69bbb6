//! The fenced store on every topology: a holder that lost its lock while
//! paused is refused once the next holder has written.

use std::time::Duration;

use locksmith::{Error, ErrorKind};

use crate::common::Env;

crate::on_every_topology!(a_paused_holders_write_is_refused_after_the_next_holder_wrote);

async fn a_paused_holders_write_is_refused_after_the_next_holder_wrote(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    let name = env.name("report");
    let store = client.fenced_store(format!("{name}:output")).unwrap();
    assert_eq!(store.read().await.unwrap(), None);

    // A holds with a short fixed lease, writes, and is "paused" past it.
    let a = client
        .lock(name.clone())
        .unwrap()
        .with_lease(Duration::from_millis(200))
        .unwrap()
        .lock()
        .await
        .unwrap();
    store.write_with(&a, b"a-1").await.unwrap();
    store
        .write_with(&a, b"a-2")
        .await
        .expect("the same holder may write again");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(a.is_lost(), "A was told");

    // B takes the lock (a larger token) and writes.
    let b = client.lock(name.clone()).unwrap().lock().await.unwrap();
    assert!(b.fencing_token() > a.fencing_token());
    store.write_with(&b, b"b-1").await.unwrap();

    // A wakes up and writes: refused, nothing changed.
    let err = store.write_with(&a, b"a-late").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StaleToken, "{err}");
    assert!(
        matches!(err, Error::StaleToken { token, highest, .. }
            if token == a.fencing_token() && highest == b.fencing_token()),
        "{err}"
    );
    assert_eq!(
        store.read().await.unwrap(),
        Some((b.fencing_token(), b"b-1".to_vec()))
    );
    b.release().await.unwrap();

    // Tokens are compared as numbers: beyond 2^53 they are refused.
    assert_eq!(
        store.write((1 << 53) + 1, b"x").await.unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );

    // A key of another kind: a clear error.
    let list = env.name("a-list");
    let _: () = redis::cmd("RPUSH")
        .arg(&list)
        .arg("x")
        .query(&mut env.node_for(&list))
        .unwrap();
    let wrong = client.fenced_store(list.clone()).unwrap();
    let err = wrong.write(1, b"x").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongType, "{err}");
    assert!(err.to_string().contains(&list), "{err}");
}
