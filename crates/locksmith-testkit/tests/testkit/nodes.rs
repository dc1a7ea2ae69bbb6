//! Independent nodes for Redlock: separate processes, separate data.

use locksmith_testkit::RedisNodes;

#[test]
fn nodes_are_independent() {
    let mut nodes = RedisNodes::start(3).expect("start nodes");
    assert_eq!(nodes.len(), 3);
    let urls = nodes.urls();
    assert_eq!(urls.len(), 3);
    let mut distinct = urls.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "three addresses: {urls:?}");

    let mut first = nodes[0].connection().unwrap();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut first)
        .unwrap();
    for node in nodes.iter().skip(1) {
        let mut conn = node.connection().unwrap();
        let v: Option<String> = redis::cmd("GET").arg("k").query(&mut conn).unwrap();
        assert_eq!(v, None, "nothing is shared between nodes");
    }

    nodes.node(1).kill();
    assert!(nodes[1].pid().is_none());
    assert!(nodes[0].connection().is_ok() && nodes[2].connection().is_ok());
    nodes.node(1).restart().unwrap();
    assert_eq!(nodes.urls(), urls, "restart keeps the address");
    let pids: Vec<_> = nodes.iter().map(|n| n.pid()).collect();
    assert!(pids.iter().all(Option::is_some));
}
