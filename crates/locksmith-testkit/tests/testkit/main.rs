//! The test kit's own tests, in one test binary (linked once; its tests
//! run concurrently): real servers, groups, clusters and the fault proxy.

mod cluster;
mod nodes;
mod orphans;
mod proxy;
mod sentinel;
mod server;
mod versions;
