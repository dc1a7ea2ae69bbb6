//! `locksmith run --lock NAME --redlock URL,URL,URL`, through the built
//! binary: held on every node while CMD runs, excluded across processes,
//! still works with a minority down, refuses a majority down and bad node
//! lists.

use crate::common;

use std::time::Instant;

use common::{finish, is_locked, locksmith, run};
use locksmith_testkit::RedisNodes;

#[test]
fn holds_on_the_nodes_while_the_command_runs_and_excludes_others() {
    let nodes = RedisNodes::start(3).unwrap();
    let list = nodes.urls().join(",");
    let first = nodes.iter().next().unwrap();
    // Room for every node on a loaded machine (the default 50 ms per node
    // is not what this test is about).
    let redlock = ["--redlock", &list, "--node-timeout", "1s"];
    let gate = common::Gate::new();
    let script = gate.script("echo \"$LOCKSMITH_FENCING_TOKEN\"", "");
    let mut holder = locksmith(first)
        .args(["run", "--lock", "nightly"])
        .args(redlock)
        .args(["--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    let started = Instant::now();
    gate.wait_running(&mut holder);
    // Held on a majority, which is what Redlock grants on: on a loaded
    // machine one node's answer can miss the node timeout, and the grant
    // goes ahead on the other two.
    assert!(nodes.iter().filter(|n| is_locked(n, "nightly")).count() >= 2);
    let busy = run(
        first,
        &[
            &["run", "--lock", "nightly"][..],
            &redlock,
            &["--wait", "0", "--", "true"],
        ]
        .concat(),
    );
    assert_eq!(busy.code, Some(75), "{busy:?}");
    assert!(busy.stderr.contains("Redlock \"nightly\""), "{busy:?}");
    gate.open();
    let out = finish(holder, started);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.trim().parse::<u64>().unwrap() >= 1, "{out:?}");
    assert!(nodes.iter().all(|n| !is_locked(n, "nightly")), "released");
    // The next one gets it.
    let again = run(
        first,
        &[
            &["run", "--lock", "nightly"][..],
            &redlock,
            &["--wait", "5s", "--", "true"],
        ]
        .concat(),
    );
    assert_eq!(again.code, Some(0), "{again:?}");
}

#[test]
fn a_minority_down_is_fine_a_majority_down_is_unavailable() {
    let mut nodes = RedisNodes::start(3).unwrap();
    let list = nodes.urls().join(",");
    nodes.node(2).kill();
    // Room for the live nodes on a loaded machine (the default 50 ms per
    // node is not what this test is about; the count below needs the live
    // node's answer in time).
    let job = [
        "run",
        "--lock",
        "job",
        "--redlock",
        &list,
        "--node-timeout",
        "1s",
        "--",
        "true",
    ];
    let ok = run(nodes.iter().next().unwrap(), &job);
    assert_eq!(ok.code, Some(0), "{ok:?}");
    nodes.node(1).kill();
    let down = run(nodes.iter().next().unwrap(), &job);
    assert_eq!(down.code, Some(69), "{down:?}");
    assert!(down.stderr.contains("1 of 3 nodes answered"), "{down:?}");
}

#[test]
fn bad_node_lists_are_usage_errors() {
    let nodes = RedisNodes::start(3).unwrap();
    let urls = nodes.urls();
    let first = nodes.iter().next().unwrap();
    let two = format!("{},{}", urls[0], urls[1]);
    let twice = format!("{},{},{}", urls[0], urls[1], urls[0]);
    for (list, says) in [(two.as_str(), "at least 3"), (twice.as_str(), "twice")] {
        let out = run(
            first,
            &["run", "--lock", "x", "--redlock", list, "--", "true"],
        );
        assert_eq!(out.code, Some(64), "{out:?}");
        assert!(out.stderr.contains(says), "{out:?}");
    }
    let list = urls.join(",");
    let out = run(
        first,
        &[
            "run",
            "--semaphore",
            "s",
            "--permits",
            "2",
            "--redlock",
            &list,
            "--",
            "true",
        ],
    );
    assert_eq!(
        out.code,
        Some(64),
        "--redlock does not go with --semaphore: {out:?}"
    );
    assert!(out.stderr.contains("cannot be used with"), "{out:?}");
    let out = run(
        first,
        &[
            "run",
            "--lock",
            "a",
            "--lock",
            "b",
            "--redlock",
            &list,
            "--",
            "true",
        ],
    );
    assert_eq!(out.code, Some(64), "{out:?}");
    assert!(nodes.iter().all(|n| !is_locked(n, "a")));
}
