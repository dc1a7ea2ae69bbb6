# The targets here are exactly what CI and the README run.
CARGO ?= cargo

.PHONY: setup test lint fmt demo bench bench-topologies bench-family bench-redlock bench-multi bench-peers chaos doc

setup:
	./scripts/setup

# Every lint, one after another (what `make test` runs beside the tests).
lint: setup
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p seckill --lib --bins -- -D warnings
	./scripts/check-lean-service
	./scripts/check-msrv
	./scripts/check-features
	$(CARGO) publish --workspace --dry-run --locked --allow-dirty

# Formatting first (instant), then scripts/run-tests: every test binary
# built once and run concurrently (a few test threads each; the service's
# load tests at a lower priority; the chaos runs that must pass, and the
# library's close tests, alone after the rest), while the other lane runs
# clippy, the
# lean-service check, the trybuild cases (which build in a target folder
# of their own, so not inside the concurrent run) and the doc tests on the
# CPU the waiting tests leave. See docs/contributing.md.
# The workspace pass lints locksmith with `blocking` and seckill with
# `demo` (their tests turn them on); the seckill pass lints both without.
# check-features: the library builds with no default features and with
# each feature alone. check-msrv: no locked dependency of a published crate needs a newer Rust
# than our rust-version. The publish dry run packages the published crates
# and builds each from its packaged files (the library, the macros, the
# CLI; the test kit, the lab and the service are not published).
test: setup
	$(CARGO) fmt --all --check
	./scripts/run-tests --threads 2 --threads-for suite=4 --threads-for cli=4 --threads-for lab=2 \
	  --nice-for service=5 --skip ui::misuse_fails_to_compile \
	  --alone lab=chaos_alone:: --alone suite=close:: \
	  --lane '$(CARGO) clippy --workspace --all-targets -- -D warnings' \
	  --lane '$(CARGO) clippy -p seckill --lib --bins -- -D warnings' \
	  --lane './scripts/check-lean-service' \
	  --lane './scripts/check-msrv' \
	  --lane './scripts/check-features' \
	  --lane '$(CARGO) publish --workspace --dry-run --locked --allow-dirty' \
	  --lane '$(CARGO) test -p redis-locksmith-macros --test macros -- ui::misuse_fails_to_compile' \
	  --lane '$(CARGO) test --workspace --doc'

# The flash-sale experiment: every strategy on 2 instances, 2,000 buyers
# for 500 items; prints the table and writes results/seckill-demo.{json,svg}.
demo: setup
	$(CARGO) run --release -p seckill --features demo -- demo

fmt:
	$(CARGO) fmt --all

doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --features redis-locksmith/blocking

bench: setup
	$(CARGO) run --release -p locksmith-lab -- bench

# locksmith's phases on a single server, Sentinel and a Cluster side by
# side, and the cost of replica acknowledgement (WAIT).
bench-topologies: setup
	$(CARGO) run --release -p locksmith-lab -- bench --topologies

# The fair lock, semaphore and latch beside the plain lock, on a Redis it
# starts itself.
bench-family: setup
	$(CARGO) run --release -p locksmith-lab -- bench --family

# Redlock on 5 servers (locksmith and rslock) beside the 1-server lock.
bench-redlock: setup
	$(CARGO) run --release -p locksmith-lab -- bench --redlock

# locksmith beside rslock, redis-py and python-redis-lock on one Redis.
bench-peers: setup
	$(CARGO) run --release -p locksmith-lab -- bench --peers --duration 2s --json target/bench-peers.json --svg target/bench-peers.svg

# MultiLock of 4 locks on a single server and a cluster (one slot vs spread).
bench-multi: setup
	$(CARGO) run --release -p locksmith-lab -- bench --multi

# The chaos suite, long form (12 minutes): 6 minutes under every
# single-server fault, 1 without the data-losing restart (so the
# semaphores' permits are accounted for), then 2 behind Sentinel and 2 on
# a Cluster with failovers, each with seven names: a reentrant lock, a fair
# lock, a read-write lock (reads, writes, downgrades), a counting
# semaphore, a permit semaphore, a MultiLock over two locks and a
# count-down latch; then 1 of Redlock on five servers, a minority and a
# majority of them paused and killed; figures as JSON in target/chaos/.
chaos: setup
	mkdir -p target/chaos
	$(CARGO) run --release -p locksmith-lab -- chaos --kind mixed --names 7 --duration 6m --json target/chaos/single.json --history target/chaos/single.jsonl
	$(CARGO) run --release -p locksmith-lab -- chaos --kind mixed --names 7 --faults kill,cut,pause,black-hole,latency --duration 1m --json target/chaos/single-kept.json --history target/chaos/single-kept.jsonl
	$(CARGO) run --release -p locksmith-lab -- chaos --kind mixed --names 7 --topology sentinel --duration 2m --json target/chaos/sentinel.json --history target/chaos/sentinel.jsonl
	$(CARGO) run --release -p locksmith-lab -- chaos --kind mixed --names 7 --topology cluster --duration 2m --json target/chaos/cluster.json --history target/chaos/cluster.jsonl
	$(CARGO) run --release -p locksmith-lab -- chaos --kind redlock --topology redlock --duration 1m --json target/chaos/redlock.json --history target/chaos/redlock.jsonl
