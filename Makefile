# kamaji-rs — see README.md.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo
VERSION ?= v0.1.0
OUT ?= out

.PHONY: tools tools-demo host-limits check test fmt-check clippy crds crds-check deny demo release components bench bench-sim

## tools: build the real programs the tests run (etcd, etcdctl; kube-apiserver,
## -controller-manager, -scheduler, kubeadm, kubectl, kubelet, kube-proxy, and the previous
## minor release's kube-apiserver, -controller-manager, -scheduler, kubeadm, kubelet and
## kube-proxy; the CAPI core manager, CABPK and clusterctl; containerd, runc, the CNI plugins,
## CoreDNS, the konnectivity server and agent, kine, pause, netcheck; nft from Debian packages;
## the Gateway API's TLSRoute CRD) from Go modules into
## ${KAMAJI_TOOLS_CACHE:-${XDG_CACHE_HOME:-~/.cache}/kamaji-rs/tools} (once), and install
## PostgreSQL 15 and MariaDB 10.11 when absent (tests/tools/sql-servers.sh, as root;
## docs/development/test-environment.md).
tools:
	@tests/tools/build.sh >/dev/null

## tools-demo: only the groups `make demo` runs (tests/tools/build.sh --demo: etcd, Kubernetes,
## CAPI, the machines' containerd, runc, CNI plugins, pause, nft and CoreDNS; not the previous
## minor release, kine, konnectivity, netcheck, kwok, the SQL servers or the Gateway API
## CRDs). A later `make tools` builds the rest.
tools-demo:
	@tests/tools/build.sh --demo >/dev/null

## host-limits: raise the kernel's per-user inotify limits the machines share (root; one line
## when it changes anything, never lowers them; docs/development/real-machines.md).
host-limits:
	@tests/host-limits.sh

## check: the everyday loop (seconds warm, docs/development/tests.md; budget 3 minutes): format
## check, clippy -D warnings, CRD drift, cargo deny (make deny), and every test that needs
## neither the built programs nor root. The real-program suites compile to nothing here
## (KAMAJI_SKIP_REAL_PROGRAMS=1; the build says which).
check: export KAMAJI_SKIP_REAL_PROGRAMS = 1
check: fmt-check clippy crds-check deny
	RUST_TEST_THREADS=2 $(CARGO) test --workspace --all-targets --locked
	$(CARGO) test --workspace --doc --locked

## test: what CI runs (tests/run.sh): the programs (make tools, built while cargo compiles the
## tests), the format and CRD drift checks, clippy -D warnings on the workspace crates as the
## tests build (clippy-driver as the workspace's rustc wrapper), then every test, the
## real-program suites included, the end-to-end suites in two lanes side by side (end-to-end
## tests of one binary run one at a time). Not built on `check`, so the two share no build
## with the real-program cfg flipped.
test: host-limits
	CARGO=$(CARGO) tests/run.sh

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

## deny: cargo deny check against deny.toml (tests/deny.sh): licenses, bans, sources, and
## advisories when the RustSec database can be fetched or a copy of it is on disk (one line
## says when they are skipped). Needs `cargo install cargo-deny --locked` once
## (docs/development/tools-and-supply-chain.md).
deny:
	@CARGO=$(CARGO) tests/deny.sh

## crds: regenerate config/crd/bases from crates/api.
crds:
	$(CARGO) run -q --locked -p kamaji-api --bin crdgen -- config/crd/bases

## crds-check: fail when the committed CRDs differ from the generated ones.
crds-check: crds
	git diff --exit-code -- config/crd

## demo: a management cluster on a real machine + CAPI + kamaji-rs + a tenant control plane
## that accepts a kubeadm join discovery, and a worker joined through a MachineDeployment
## (root needed for the machines). KEEP=1 keeps it up. Builds only the tools it runs
## (make tools-demo).
demo: tools-demo host-limits
	$(CARGO) build -q --locked -p kamaji-reconciler --bin manager
	$(CARGO) run -q --locked -p kamaji-e2e --example demo

## release: $(OUT)/control-plane-components.yaml + metadata.yaml + the cluster templates for
## `clusterctl init --control-plane kamaji` from a local repository (`make components`), and
## the manager as an OCI image tar, $(OUT)/manager-image.tar, named $(IMAGE) (docs/install.md).
IMAGE ?= ghcr.io/kamaji-rs/manager:$(VERSION)
release: crds components
	$(CARGO) build -q --release --locked -p kamaji-reconciler --bin manager
	$(CARGO) run -q --release --locked -p kamaji-machine --bin manager-image -- \
	    --binary "$${CARGO_TARGET_DIR:-target}/release/manager" --reference $(IMAGE) \
	    --out $(OUT)/manager-image.tar

## components: the clusterctl artifacts alone, no build (what the clusterctl init test installs
## from its local repository): the CRDs, RBAC and manager manifests as one components file
## (variables stay as ${VAR:=default}), metadata.yaml and templates/.
components:
	mkdir -p $(OUT)
	{ for f in config/crd/bases/*.yaml config/rbac/*.yaml config/manager/*.yaml; do \
	    case "$$f" in */kustomization.yaml) continue;; esac; echo '---'; cat "$$f"; done; } | sed 's|ghcr.io/kamaji-rs/manager:v0.1.0|$(IMAGE)|' \
	    > $(OUT)/control-plane-components.yaml
	cp metadata.yaml $(OUT)/metadata.yaml
	cp templates/*.yaml $(OUT)/
	@echo "wrote $(OUT)/control-plane-components.yaml and $(OUT)/metadata.yaml"

## bench: the scale benchmark (20 tenants at once); prints times and the manager's peak RSS.
bench: tools host-limits
	$(CARGO) build -q --release --locked -p kamaji-reconciler --bin manager
	$(CARGO) run -q --release --locked -p kamaji-e2e --example scale

## bench-sim: the simulated scale benchmark (TENANTS=100 at once, their pods on kwok's fake
## Nodes): provisioning time, the manager's CPU, requests and memory per tenant, idle CPU,
## restart. TENANTS, REPLICAS, NODES, IDLE_SECONDS (default 300), RESTARTS (default 1, each
## measured on its own); SHARDS=2: two watch-filter values with two leader-elected manager
## replicas each split the tenants, and a leader is killed.
bench-sim: tools
	$(CARGO) build -q --release --locked -p kamaji-reconciler --bin manager
	$(CARGO) run -q --release --locked -p kamaji-e2e --example scale_sim
