//! The lab's tests, in one test binary: each module drives the built
//! `locksmith-lab` binary, which starts its own servers.

mod bench_output;
mod chaos;
mod chaos_alone;
mod documented_benches;
