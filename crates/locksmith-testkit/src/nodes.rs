//! [`RedisNodes`]: N independent servers, the deployment Redlock expects.

use std::io;

use crate::server::RedisServer;

/// `n` independent `redis-server` processes, each on its own free port,
/// sharing nothing (no replication, no cluster). All are killed on drop.
///
/// ```no_run
/// let mut nodes = locksmith_testkit::RedisNodes::start(3)?;
/// let urls = nodes.urls();
/// nodes.node(1).pause()?; // one minority node stops answering
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct RedisNodes {
    /// The servers, in start order; indices are stable for the group's life
    /// so a test can name "node 1" across restarts.
    servers: Vec<RedisServer>,
}

impl RedisNodes {
    /// Starts `n` plain servers.
    ///
    /// # Errors
    /// When any server fails to start; the ones already started are killed.
    pub fn start(n: usize) -> io::Result<RedisNodes> {
        let servers = (0..n)
            .map(|_| RedisServer::start())
            .collect::<io::Result<Vec<_>>>()?;
        Ok(RedisNodes { servers })
    }

    /// How many nodes the group has.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// True for a group of zero nodes.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// `redis://127.0.0.1:<port>` of every node, in index order.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// `127.0.0.1:<port>` of every node, in index order.
    pub fn addrs(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::addr).collect()
    }

    /// Node `i`, to pause, kill or restart it.
    ///
    /// # Panics
    /// When `i >= len()`.
    pub fn node(&mut self, i: usize) -> &mut RedisServer {
        &mut self.servers[i]
    }

    /// All nodes, in index order.
    pub fn iter(&self) -> std::slice::Iter<'_, RedisServer> {
        self.servers.iter()
    }

    /// All nodes, mutably, in index order.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, RedisServer> {
        self.servers.iter_mut()
    }
}

impl<'a> IntoIterator for &'a RedisNodes {
    type Item = &'a RedisServer;
    type IntoIter = std::slice::Iter<'a, RedisServer>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a> IntoIterator for &'a mut RedisNodes {
    type Item = &'a mut RedisServer;
    type IntoIter = std::slice::IterMut<'a, RedisServer>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

impl std::ops::Index<usize> for RedisNodes {
    type Output = RedisServer;

    fn index(&self, i: usize) -> &RedisServer {
        &self.servers[i]
    }
}
