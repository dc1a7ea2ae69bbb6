# The targets here are exactly what CI and the README run.
CARGO ?= cargo

.PHONY: setup servers test test-servers lint fmt demo bench bench-topologies bench-servers bench-family bench-redlock bench-multi bench-peers chaos chaos-valkey doc

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
	./scripts/publish-dry-run

# Formatting first (instant), then scripts/run-tests: every test binary
# built once and run concurrently (a few test threads each; the service's
# load tests at a lower priority; the chaos runs that must pass, and the
# library's close tests, alone after the rest), while the other lane runs
# clippy, the
# lean-service check, the trybuild cases (which build in a target folder
# of their own, so not inside the concurrent run), the doc tests and
# `make doc` (rustdoc with warnings as errors: a broken intra-doc link
# fails here) on the CPU the waiting tests leave. See docs/contributing.md.
# The workspace pass lints locksmith with `blocking` and seckill with
# `demo` (their tests turn them on); the seckill pass lints both without.
# check-features: the library builds with no default features and with
# each feature alone. check-msrv: no locked dependency of a published crate needs a newer Rust
# than our rust-version. The publish dry run packages the published crates
# and builds each from its packaged files (the library, the macros, the
# CLI; the test kit, the lab and the service are not published).
#
# Beside the rest, once the service's tests are done (they run at a lower
# priority and time their database pool), the library suite's
# cross-version slice runs on each of the other servers the test kit
# knows (scripts/servers installs them), one after another:
# every primitive's single-server tests (over TLS, as the documented
# minimal ACL user), the simple lock, ids and Redlock, one Sentinel
# failover, one Cluster hand-off, and a Cluster's fallbacks where it lacks
# sharded pub/sub (and, on Redis 6.0, scripts across slots, said at
# connect). Left out: the tests of short leases the watchdog must renew
# in time (watchdog_*, each_read_hold_*), which beside the whole run lose
# leases to a starved CPU (the main run keeps them). `make test-servers` runs the whole
# suite on each. See docs/topologies.md, "Server versions".
SERVER_SLICE = ::single:: simple:: ids::an_exhausted_day_is_a_clear_error \
  redlock::a_majority_grants_and_release_frees_every_node \
  redlock::a_waiter_gets_the_lock_when_the_holder_releases \
  topology::sentinel_failover_moves_the_lock_and_its_waiters_to_the_new_primary \
  handoff::cluster::release_hands_the_lock_to_a_parked_local_waiter \
  replica_acks::a_cluster_without_sharded_pubsub_notifies_classically \
  --skip watchdog_ --skip each_read_hold_keeps_its_own_lease
OTHER_SERVERS = valkey8 redis6 redis8

# The other servers (Valkey 8, Redis 6.0, Redis 8) from Debian's archive
# into .servers/: what test, test-servers, bench-servers and chaos-valkey
# need beside setup's packages (quiet and near-instant once there).
servers: setup
	./scripts/servers

test: setup servers
	$(CARGO) fmt --all --check
	./scripts/run-tests --threads 2 --threads-for suite=4 --threads-for cli=4 --threads-for lab=2 \
	  --nice-for service=5 --skip ui::misuse_fails_to_compile \
	  --alone lab=chaos_alone:: --alone suite=close:: \
	  $(foreach s,$(OTHER_SERVERS),--variant 'suite|LOCKSMITH_TEST_SERVER=$(s)|$(SERVER_SLICE)') \
	  --variants-after service \
	  --variant 'lab|LOCKSMITH_TEST_SERVER=valkey8|chaos::a_broken_lock_kind_is_caught' \
	  --lane '$(CARGO) clippy --workspace --all-targets -- -D warnings' \
	  --lane '$(CARGO) clippy -p seckill --lib --bins -- -D warnings' \
	  --lane './scripts/check-lean-service' \
	  --lane './scripts/check-msrv' \
	  --lane './scripts/check-features' \
	  --lane './scripts/publish-dry-run' \
	  --lane '$(CARGO) test -p redis-locksmith-macros --test macros -- ui::misuse_fails_to_compile' \
	  --lane '$(CARGO) test --workspace --doc' \
	  --lane '$(MAKE) --no-print-directory doc'

# The library's whole suite, the test kit's tests and the CLI's (every
# subcommand against real servers) on each server the test kit knows: the system's Redis 7.0, then Valkey 8, Redis 6.0 and
# Redis 8 (installed by scripts/servers into .servers/), one after another,
# each as `make test` runs the suite (its close tests alone at the end).
# Every server runs; the target fails at the end if any failed.
test-servers: setup servers
	@failed=""; for s in redis7 $(OTHER_SERVERS); do \
	  echo "== test-servers: $$s"; \
	  LOCKSMITH_TEST_SERVER=$$s ./scripts/run-tests --threads 2 --threads-for suite=4 \
	    --alone suite=close:: -- -p redis-locksmith -p locksmith-testkit -p redis-locksmith-cli --tests \
	    || failed="$$failed $$s"; \
	done; \
	if [ -n "$$failed" ]; then echo "test-servers: failed on$$failed"; exit 1; fi; \
	echo "test-servers: green on redis7 $(OTHER_SERVERS)"

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

# The lock phases on each server the test kit knows (Redis 7.0, Valkey 8,
# Redis 6.0, Redis 8), one after another, with each one's ratios to Redis
# 7.0 and to its own ceiling (redis-benchmark firing the acquire script).
bench-servers: setup servers
	$(CARGO) run --release -p locksmith-lab -- bench --servers --json target/bench-servers.json

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

# The shorter form of the chaos suite on Valkey 8: the whole family under
# every single-server fault, then on a Cluster, 2 minutes each.
chaos-valkey: setup servers
	mkdir -p target/chaos
	LOCKSMITH_TEST_SERVER=valkey8 $(CARGO) run --release -p locksmith-lab -- chaos --kind mixed --names 7 --duration 2m --json target/chaos/valkey8-single.json --history target/chaos/valkey8-single.jsonl
	LOCKSMITH_TEST_SERVER=valkey8 $(CARGO) run --release -p locksmith-lab -- chaos --kind mixed --names 7 --topology cluster --duration 2m --json target/chaos/valkey8-cluster.json --history target/chaos/valkey8-cluster.jsonl
