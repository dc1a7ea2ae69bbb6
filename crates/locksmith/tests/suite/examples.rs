//! Every example in `examples/` runs against a testkit server (the
//! examples' `run` functions, included here, so CI runs exactly the code
//! users read).

#[path = "../../examples/expirable_semaphore.rs"]
mod expirable_semaphore;
#[path = "../../examples/fair_lock.rs"]
mod fair_lock;
#[path = "../../examples/fenced_write.rs"]
mod fenced_write;
#[path = "../../examples/id_generator.rs"]
mod id_generator;
#[path = "../../examples/latch.rs"]
mod latch;
#[path = "../../examples/lock.rs"]
mod lock;
#[path = "../../examples/multi_lock.rs"]
mod multi_lock;
#[path = "../../examples/read_write_lock.rs"]
mod read_write_lock;
#[path = "../../examples/redlock.rs"]
mod redlock;
#[path = "../../examples/semaphore.rs"]
mod semaphore;
#[path = "../../examples/simple_lock.rs"]
mod simple_lock;

#[cfg(feature = "blocking")]
#[path = "../../examples/blocking.rs"]
mod blocking;

use locksmith_testkit::{RedisNodes, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_runs() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    lock::run(&url).await.expect("lock");
    simple_lock::run(&url).await.expect("simple_lock");
    fair_lock::run(&url).await.expect("fair_lock");
    read_write_lock::run(&url).await.expect("read_write_lock");
    semaphore::run(&url).await.expect("semaphore");
    expirable_semaphore::run(&url)
        .await
        .expect("expirable_semaphore");
    latch::run(&url).await.expect("latch");
    multi_lock::run(&url).await.expect("multi_lock");
    fenced_write::run(&url).await.expect("fenced_write");
    id_generator::run(&url).await.expect("id_generator");
    let nodes = RedisNodes::start(3).unwrap();
    redlock::run(&nodes.urls()).await.expect("redlock");
}

#[cfg(feature = "blocking")]
#[test]
fn the_blocking_example_runs() {
    let server = RedisServer::start().unwrap();
    blocking::run(&server.url()).expect("blocking");
}
