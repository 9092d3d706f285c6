# kamaji-rs — see README.md.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo

.PHONY: tools test lint fmt-check clippy unit crds crds-check

## tools: build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubeadm,
## kubectl and the CAPI core manager from Go modules into ~/.cache/kamaji-rs/tools (once).
tools:
	@tests/tools/build.sh >/dev/null

## test: everything CI runs: tools, format check, clippy -D warnings, all tests.
test: tools fmt-check clippy
	$(CARGO) test --workspace --all-targets --locked
	$(CARGO) test --workspace --doc --locked

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
