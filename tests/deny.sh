#!/usr/bin/env bash
# `make check`'s supply-chain step: `cargo deny check` against deny.toml
# (docs/development/tools-and-supply-chain.md).
#
#   licenses, bans, sources  always: they read Cargo.lock and the crates' manifests only.
#   advisories               against the RustSec database (a git repository on GitHub) in
#                            $CARGO_HOME/advisory-dbs: fetched first; where it cannot be
#                            fetched (no network, or only the package registries), checked
#                            offline against the copy an earlier fetch left there, and where
#                            there is none, skipped with one line saying so.
#
# Without cargo-deny it fails with one line naming the install command: installing it here
# would compile for minutes inside a loop whose budget is 3 minutes.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo=${CARGO:-cargo}
fail() { echo "make check: $*" >&2; exit 1; }

$cargo deny --version >/dev/null 2>&1 ||
    fail "cargo-deny is not installed: run \`cargo install cargo-deny --locked\` once"

$cargo deny --locked check licenses bans sources ||
    fail "cargo deny check licenses bans sources failed (see above; the policy is deny.toml)"

# The crates.io index for the yanked check: best effort (the check falls back on cargo's copy).
timeout 60 $cargo deny fetch index >/dev/null 2>&1
fetch_log=$(mktemp)
trap 'rm -f "$fetch_log"' EXIT
if timeout 60 $cargo deny fetch db >"$fetch_log" 2>&1; then
    $cargo deny --offline --locked check advisories ||
        fail "cargo deny check advisories failed (see above; ignore an advisory in deny.toml with a reason)"
    exit 0
fi
dbs=${CARGO_HOME:-$HOME/.cargo}/advisory-dbs
db=$(find "$dbs" -mindepth 2 -maxdepth 2 -name .git -printf '%h\n' 2>/dev/null | head -n1)
# git's own line names the cause (`unable to access …: Could not resolve host: github.com`).
cause=$(grep -m1 '^fatal: ' "$fetch_log" | sed 's/^fatal: *//')
[ -n "$cause" ] || cause=$(grep -m1 'ERROR' "$fetch_log" | sed 's/^.*\[ERROR\] *//')
if [ -n "$db" ]; then
    echo "cargo deny: the advisory database could not be fetched (${cause:-see cargo deny fetch db}); checking against the copy in $db of $(git -C "$db" log -1 --format=%cs 2>/dev/null || echo '?')"
    $cargo deny --offline --locked check advisories ||
        fail "cargo deny check advisories failed (see above; ignore an advisory in deny.toml with a reason)"
else
    echo "cargo deny: advisories skipped: no advisory database could be fetched (${cause:-see cargo deny fetch db}) and none is in $dbs"
fi
