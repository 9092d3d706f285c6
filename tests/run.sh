#!/usr/bin/env bash
# `make test`, what CI runs: the tools, the format, clippy and CRD drift checks, and every
# test of the workspace with the real-program suites compiled in.
#
# Arranged for 2 cores, where the run is bound by CPU (docs/development/tests.md):
#   1. The Go tools build (tests/tools/build.sh --defer-previous) runs in the background at
#      nice 10 while cargo checks the format and builds every test, the suites gated on the
#      programs included (KAMAJI_ASSUME_REAL_PROGRAMS=1); the CRD drift check is a unit test.
#   2. clippy -D warnings lints the workspace crates as they build (clippy-driver as the
#      workspace's rustc wrapper), not in a second build of every dependency.
#   3. The end-to-end suites that start a management cluster on real machines run in two
#      lanes side by side (the tests of one suite still one at a time); every other test
#      target, the unit tests and the doc tests run in the second lane after its suites. Two
#      lanes fill the 2 cores: a third (tried on 2026-12-04) made every suite slower and a
#      rotation test time out. The previous minor release's programs (upgrade tests) build
#      meanwhile as an idle session (idle_session below), on CPU the suites leave: the suites
#      that run that version (NEEDS_MINOR) come late in their lanes and wait for it, and lane
#      B runs the short test targets just before its first one (a cold run on 2026-12-06 had
#      lane B wait about 2 minutes there with them queued at its end).
# A suite's output is printed whole when it ends; the run fails if any suite failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo=${CARGO:-cargo}
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-2}
# The real-program suites compile in from the first build, while the tools are still being
# built (kamaji-test-gate): once, not once without them and again with them.
export KAMAJI_ASSUME_REAL_PROGRAMS=1
# cargo builds into a target folder outside the clone, kept between runs on this machine like
# the tools cache (KAMAJI_CARGO_TARGET, else ${XDG_CACHE_HOME:-~/.cache}/kamaji-rs/cargo-target;
# a CARGO_TARGET_DIR already set wins). A fresh clone then reuses every dependency built
# before (about 400 crates, most of the build's CPU) and rebuilds the workspace's own crates:
# their fingerprints name their sources by absolute path, so another clone's are never taken
# for this one's, and the dependencies' by the registry's files and flags, which are the same.
# One run at a time holds the folder, so a second `make test` on the machine waits instead of
# replacing the test binaries the first one is running: the script runs again under flock(1)
# holding the lock (-o: no program the run starts inherits it, so one left running cannot
# keep it).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${KAMAJI_CARGO_TARGET:-${XDG_CACHE_HOME:-$HOME/.cache}/kamaji-rs/cargo-target}}
if [ -z "${KAMAJI_MAKE_TEST_LOCKED:-}" ]; then
    mkdir -p "$CARGO_TARGET_DIR"
    lock="$CARGO_TARGET_DIR/.make-test.lock"
    flock -n "$lock" true ||
        echo "make test: waiting for another make test that uses $CARGO_TARGET_DIR"
    KAMAJI_MAKE_TEST_LOCKED=1 exec flock -o "$lock" "$PWD/tests/run.sh" "$@"
fi

# The heavy suites, balanced by their run times on 2 cores (BENCHMARKS.md).
LANE_A=(fields datastores cases ca_rotation lifecycle clusterctl)
LANE_B=(e2e_main workers konnectivity rotation field_reports upgrades robustness)
# The suites with tests that run PREVIOUS_MINOR_KUBERNETES_VERSION (tests/testenv), and
# `robustness`, whose ten control planes must not start beside that Go build.
NEEDS_MINOR=(ca_rotation lifecycle clusterctl field_reports upgrades robustness)

fail() { echo "make test: $*" >&2; exit 1; }

mkdir -p target
logs=$(mktemp -d)
phase() { echo "make test: $* at $((SECONDS / 60)) min $((SECONDS % 60)) s"; }
# At nice 10: cargo's build, whose tail runs one crate at a time, goes first, and the Go
# builds, which keep every core busy, fill what it leaves.
nice -n 10 tests/tools/build.sh --defer-previous >/dev/null &
tools=$!
$cargo fmt --all -- --check || { kill "$tools" 2>/dev/null; fail "cargo fmt --check failed: run cargo fmt"; }
# clippy -D warnings lints the workspace while its tests build, instead of a second build of
# every dependency in check mode (about 400 CPU-seconds): clippy-driver as the workspace's
# rustc wrapper with `-D warnings` is what `cargo clippy` sets up around `cargo check`
# (RUSTC_WORKSPACE_WRAPPER, CLIPPY_ARGS split on __CLIPPY_HACKERY__); the driver lints and then
# compiles like rustc. Exported for every cargo of the run, so the suites' `cargo test` finds
# the same fingerprints; dependencies are built by plain rustc as always. (A plain `cargo test`
# afterwards rebuilds the workspace crates, not their dependencies.)
RUSTC_WORKSPACE_WRAPPER="$(rustc --print sysroot)/bin/clippy-driver"
[ -x "$RUSTC_WORKSPACE_WRAPPER" ] || fail "no clippy-driver in the toolchain (rustup component add clippy)"
export RUSTC_WORKSPACE_WRAPPER
export CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__
# idle_session CMD...: runs CMD in a session of its own (setsid) whose scheduler autogroup has
# nice 19 (sched(7), "The autogroup feature"; /proc/PID/autogroup). The kernel here groups
# tasks by session and shares the CPU equally between busy groups, so a plain `nice` orders
# only the tasks of one session, while the management programs and every container the suites
# start run in sessions of their own. At autogroup nice 19 (weight 15 against 1024) CMD gets
# what the suites leave idle and never slows them: on 2026-12-04 the previous minor's Go build
# and a separate clippy run at plain nice took about 1,600 of the first 2,600 CPU-seconds of
# the suites (process accounting) and four tenants missed their Available deadline.
idle_session() {
    setsid -w bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null; exec "$@"' idle_session "$@"
}
# On an early failure: the tools build stops with the run.
stop_background() {
    kill "$tools" 2>/dev/null
}
# The CRD drift check is kamaji-api's unit test `crd::tests::committed_crds_match_generated` (the
# `unit` suite below; it renders what `make crds` writes and compares it with config/crd/bases):
# `make crds-check` here ran the crdgen binary, whose build for kamaji-api alone compiled
# k8s-openapi, kube and their dependencies a third time in a cold run (2026-12-07).
# The artifacts' JSON goes to a file (diagnostics are still printed as usual) for the manager's
# path below.
$cargo test --workspace --all-targets --locked --no-run --message-format=json-render-diagnostics \
    >"$logs/build.json" || { stop_background; fail "the tests do not build, or clippy -D warnings failed (see above)"; }
# The manager the end-to-end suites run (KAMAJI_MANAGER_BIN, tests/e2e/src/manager.rs): the one
# this build linked for kamaji-reconciler's own integration tests, as cargo reports it (fresh or
# not). A suite run alone builds its own with `cargo build -p kamaji-reconciler --bin manager`,
# which resolves the dependencies' features for that package alone: here that compiled about 60
# dependencies a second time, 2-3 minutes of a cold run (2026-12-07).
KAMAJI_MANAGER_BIN=$(grep -o '"executable":"[^"]*/manager"' "$logs/build.json" | tail -n 1 | sed 's/^"executable":"//; s/"$//')
[ -x "$KAMAJI_MANAGER_BIN" ] || { stop_background; fail "the test build reported no manager binary"; }
export KAMAJI_MANAGER_BIN
phase "the tests are built and clippy passed"
wait "$tools" || { stop_background; fail "building the tools failed (see the line above)"; }
phase "the tools are built (the previous minor's programs next)"
# The previous minor's programs, as an idle session while the first suites run (a no-op once
# built); the suites that need them wait, and while both lanes wait it gets every core.
(
    if idle_session tests/tools/build.sh >"$logs/minor.log" 2>&1; then touch "$logs/minor.ok"; fi
    phase "the previous minor's programs are built" >"$logs/minor.done"
) &
# wait_built NAME: returns once the deferred build NAME (minor) has ended; fails if
# it failed.
wait_built() {
    while [ ! -f "$logs/$1.done" ]; do sleep 5; done
    [ -f "$logs/$1.ok" ]
}

# Every test target of the workspace (`cargo metadata`), the heavy ones excepted.
mapfile -t all < <($cargo metadata --no-deps --format-version 1 --locked |
    grep -o '"kind":\["test"\],"crate_types":\["bin"\],"name":"[^"]*"' |
    sed 's/.*"name":"\([^"]*\)"/\1/' | sort -u)
rest=()
for t in "${all[@]}"; do
    [[ " ${LANE_A[*]} ${LANE_B[*]} " == *" $t "* ]] || rest+=("$t")
done
for t in "${LANE_A[@]}" "${LANE_B[@]}"; do
    [[ " ${all[*]} " == *" $t "* ]] || fail "lane suite $t is not a test target"
done

# run_suite NAME ARGS...: one cargo test invocation, its output kept and printed when done.
run_suite() {
    local name=$1; shift
    if [[ " ${NEEDS_MINOR[*]} " == *" $name "* ]] && ! wait_built minor; then
        echo "=== $name: FAILED (the previous minor's programs did not build)"
        cat "$logs/minor.log"
        touch "$logs/$name.failed"
        return
    fi
    local start=$SECONDS
    if $cargo test --workspace --locked "$@" >"$logs/$name.log" 2>&1; then
        echo "=== $name: ok ($((SECONDS - start)) s)"
    else
        echo "=== $name: FAILED ($((SECONDS - start)) s)"
        touch "$logs/$name.failed"
    fi
    cat "$logs/$name.log"
}
lane_a() {
    local t
    for t in "${LANE_A[@]}"; do run_suite "$t" --test "$t"; done
}
# The unit tests, the other test targets and the doc tests need neither the previous minor's
# programs nor long: lane B runs them where its suites would otherwise first wait for those
# programs (before its first NEEDS_MINOR suite), not after its last suite.
small_suites() {
    local t
    run_suite unit --lib --bins --examples --benches
    for t in "${rest[@]}"; do run_suite "$t" --test "$t"; done
    run_suite doc --doc
}
lane_b() {
    local t small=false
    for t in "${LANE_B[@]}"; do
        if ! $small && [[ " ${NEEDS_MINOR[*]} " == *" $t "* ]]; then
            small_suites
            small=true
        fi
        run_suite "$t" --test "$t"
    done
    $small || small_suites
}
lane_a &
a=$!
lane_b &
b=$!
wait "$a" "$b"
cat "$logs/minor.done" 2>/dev/null
# Every suite ran (a lane that skipped one, as a loop variable shared between lane B and the
# small suites once made it skip field_reports, fails here instead of passing unnoticed).
for t in "${LANE_A[@]}" "${LANE_B[@]}" "${rest[@]}" unit doc; do
    [ -f "$logs/$t.log" ] || { echo "=== $t: did not run"; touch "$logs/$t.failed"; }
done
failed=$(cd "$logs" && ls -- *.failed 2>/dev/null | sed 's/\.failed$//' | tr '\n' ' ')
rm -rf "$logs"
[ -z "$failed" ] || fail "failed suites: $failed"
echo "make test: every suite passed"
