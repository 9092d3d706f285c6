#!/usr/bin/env bash
# `make test`, what CI runs: the tools, the format, clippy and CRD drift checks, and every
# test of the workspace with the real-program suites compiled in.
#
# Arranged for 2 cores (README, "Tests"):
#   1. The Go tools build (tests/tools/build.sh) runs in the background while cargo checks
#      the format and compiles every dependency for clippy and for the tests.
#   2. Once the programs are there, the suites gated on them compile (only the test crates
#      rebuild), clippy -D warnings and the CRD drift check run over everything.
#   3. The end-to-end suites that start a management cluster on real machines run in two
#      lanes side by side (the tests of one suite still one at a time); every other test
#      target, the unit tests and the doc tests run in the first lane after its suites.
# A suite's output is printed whole when it ends; the run fails if any suite failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo=${CARGO:-cargo}
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-2}

# The heavy suites, balanced by their run times on 2 cores (README).
LANE_A=(field_reports lifecycle)
LANE_B=(cases workers robustness e2e_main)

fail() { echo "make test: $*" >&2; exit 1; }

mkdir -p target
tests/tools/build.sh >/dev/null &
tools=$!
$cargo fmt --all -- --check || { kill "$tools" 2>/dev/null; fail "cargo fmt --check failed: run cargo fmt"; }
# Warm-up builds while Go runs (their warnings about skipped suites are expected here).
$cargo clippy --workspace --all-targets --locked -q >/dev/null 2>&1
$cargo test --workspace --all-targets --locked --no-run -q >/dev/null 2>&1
wait "$tools" || fail "building the tools failed (see the line above)"

$cargo clippy --workspace --all-targets --locked -- -D warnings || fail "clippy failed"
make -s crds-check || fail "the committed CRDs differ from the generated ones: run make crds"
$cargo test --workspace --all-targets --locked --no-run || fail "the tests do not build"

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

logs=$(mktemp -d)
# run_suite NAME ARGS...: one cargo test invocation, its output kept and printed when done.
run_suite() {
    local name=$1; shift
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
    for t in "${LANE_A[@]}"; do run_suite "$t" --test "$t"; done
    run_suite unit --lib --bins --examples --benches
    for t in "${rest[@]}"; do run_suite "$t" --test "$t"; done
    run_suite doc --doc
}
lane_b() {
    for t in "${LANE_B[@]}"; do run_suite "$t" --test "$t"; done
}
lane_a &
a=$!
lane_b &
b=$!
wait "$a" "$b"
failed=$(cd "$logs" && ls -- *.failed 2>/dev/null | sed 's/\.failed$//' | tr '\n' ' ')
rm -rf "$logs"
[ -z "$failed" ] || fail "failed suites: $failed"
echo "make test: every suite passed"
