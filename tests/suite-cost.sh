#!/usr/bin/env bash
# tests/suite-cost.sh SUITE...: runs each end-to-end suite alone (`cargo test -p kamaji-e2e
# --test SUITE`, its tests one at a time as in `make test`) and prints its wall time, the CPU
# the whole machine spent meanwhile (every process the suite started included, containers and
# their shims too, which the test process does not reap) and how many management API servers
# (environments) it started. Run it on an otherwise idle machine with the tests built (the per-suite table in
# BENCHMARKS.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo=${CARGO:-cargo}
export KAMAJI_ASSUME_REAL_PROGRAMS=1 RUST_TEST_THREADS=${RUST_TEST_THREADS:-2}
# busy: the jiffies every CPU spent outside idle and iowait (proc(5), /proc/stat `cpu`).
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
# A management API server (one per environment) runs from the tools cache; the tenants' run
# from their images.
management_apiserver='kamaji-rs/tools/bin-[^/ ]*/kube-apiserver '
$cargo test -q -p kamaji-e2e --locked --no-run >/dev/null 2>&1
hz=$(getconf CLK_TCK)
printf '%-16s %8s %12s %6s\n' suite wall_s cpu_s envs
for suite in "$@"; do
    seen=$(mktemp)
    ( while sleep 1; do pgrep -f -- "$management_apiserver" >>"$seen" || true; done ) &
    watcher=$!
    start=$SECONDS
    before=$(busy)
    status=ok
    $cargo test -q -p kamaji-e2e --locked --test "$suite" >"/tmp/suite-cost-$suite.log" 2>&1 || status=FAILED
    after=$(busy)
    kill "$watcher" 2>/dev/null || true
    envs=$(sort -u "$seen" | wc -l)
    rm -f "$seen"
    printf '%-16s %8d %12d %6d %s\n' "$suite" $((SECONDS - start)) $(((after - before) / hz)) "$envs" "$status"
done
