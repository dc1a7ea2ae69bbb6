# The targets here are exactly what CI and the README run.
CARGO ?= cargo

.PHONY: setup test lint fmt demo bench doc

setup:
	./scripts/setup

lint: setup
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test: lint
	$(CARGO) test --workspace --all-targets
	$(CARGO) test --workspace --doc

fmt:
	$(CARGO) fmt --all

doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps
