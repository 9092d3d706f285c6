#!/usr/bin/env bash
# Installs the SQL servers the PostgreSQL and MySQL DataStore tests start as local processes
# (kamaji-testenv's `sql` module): PostgreSQL 15 (postgres, initdb, psql) and MariaDB 10.11
# (mariadbd, mariadb-install-db, mariadb), from the Debian packages, only when their programs
# are absent. `tests/tools/build.sh` (`make tools`) runs it; it can also run alone, as root.
#
# The packages' services are never started: a /usr/sbin/policy-rc.d that exits 101 (what
# invoke-rc.d honours) is in place while apt-get installs, and a server process the packages'
# scripts started anyway is stopped by its pid. The tests run their own servers, each with a
# fresh data directory under the test's temporary folder; the packages' default clusters in
# /var/lib are left alone, unused.
#
# Not root and something missing: one warning line, and success. The suites that start the
# servers (kamaji-testenv's sql_servers, kamaji-e2e's datastores) are not skipped then:
# kamaji-test-gate looks for the built programs and root only, so they are built and fail,
# naming this script. Root and the installation failing: one line naming the cause, exit 1.
set -uo pipefail

die() { echo "make tools: $*" >&2; exit 1; }

postgres_bin() {
    local dir
    for dir in /usr/lib/postgresql/15/bin /usr/lib/postgresql/*/bin; do
        if [ -x "$dir/postgres" ] && [ -x "$dir/initdb" ] && [ -x "$dir/psql" ]; then
            echo "$dir"
            return 0
        fi
    done
    return 1
}
mariadb_present() {
    { [ -x /usr/sbin/mariadbd ] || command -v mariadbd >/dev/null 2>&1; } &&
        command -v mariadb-install-db >/dev/null 2>&1 && command -v mariadb >/dev/null 2>&1
}

packages=()
postgres_bin >/dev/null || packages+=(postgresql-15)
mariadb_present || packages+=(mariadb-server mariadb-client)
[ ${#packages[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then
    echo "make tools: warning: ${packages[*]} not installed and not root: the SQL DataStore tests will fail until tests/tools/sql-servers.sh runs as root" >&2
    exit 0
fi
command -v apt-get >/dev/null 2>&1 || die "no apt-get on PATH (Debian packages ${packages[*]} are needed for the SQL DataStore tests)"

cache=${KAMAJI_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kamaji-rs/tools}
mkdir -p "$cache" || die "cannot create the tools cache $cache"
# One installation at a time (two `make tools` at once would save and restore each other's
# policy-rc.d, and apt-get refuses a second run): a second waits, then finds the programs.
lock="$cache/sql-servers.lock"
exec {lock_fd}>>"$lock" || die "cannot open the lock $lock"
if ! flock -n "$lock_fd"; then
    echo "waiting for another installation of ${packages[*]} (it holds $lock)" >&2
    flock "$lock_fd" || die "cannot take the lock $lock"
fi
packages=()
postgres_bin >/dev/null || packages+=(postgresql-15)
mariadb_present || packages+=(mariadb-server mariadb-client)
[ ${#packages[@]} -eq 0 ] && exit 0
log="$cache/sql-servers.log"
echo "installing ${packages[*]} (first time on this machine; log: $log)" >&2

# Server processes running before the installation are not ours to stop.
server_pids() {
    local p exe
    for p in /proc/[0-9]*; do
        exe=$(readlink "$p/exe" 2>/dev/null) || continue
        case "$exe" in
            */mariadbd | */mysqld | */mariadbd\ \(deleted\) | /usr/lib/postgresql/*/bin/postgres) echo "${p#/proc/}" ;;
        esac
    done
}
before=" $(server_pids | tr '\n' ' ') "

policy=/usr/sbin/policy-rc.d
saved=""
if [ -e "$policy" ]; then
    saved=$(mktemp) && cp -p "$policy" "$saved" || die "cannot save $policy"
fi
restore_policy() {
    if [ -n "$saved" ]; then mv -f "$saved" "$policy"; else rm -f "$policy"; fi
}
trap restore_policy EXIT
printf '#!/bin/sh\n# kamaji-rs tests/tools/sql-servers.sh: no service starts while it installs.\nexit 101\n' >"$policy" &&
    chmod 755 "$policy" || die "cannot write $policy"

# Without the lock's descriptor: a server the packages' scripts leave running must not hold it.
install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${packages[@]}" >>"$log" 2>&1 {lock_fd}>&-
}
: >"$log"
if ! install; then
    # The package lists may be missing or stale: refresh them once.
    apt-get update >>"$log" 2>&1 {lock_fd}>&-
    install || die "installing ${packages[*]} failed: $(grep -m1 -E '^E:' "$log" || tail -n1 "$log") (full log: $log)"
fi

# Whatever server the packages' scripts started despite the policy, stopped by its pid.
for pid in $(server_pids); do
    [[ $before == *" $pid "* ]] && continue
    echo "stopping $(readlink "/proc/$pid/exe" 2>/dev/null) (pid $pid) started by the installation" >>"$log"
    kill "$pid" 2>/dev/null
done
for _ in $(seq 50); do
    left=""
    for pid in $(server_pids); do [[ $before == *" $pid "* ]] || left+=" $pid"; done
    [ -z "$left" ] && break
    sleep 0.2
done
for pid in $left; do kill -9 "$pid" 2>/dev/null; done

postgres_bin >/dev/null || die "after installing ${packages[*]}: no postgres, initdb and psql under /usr/lib/postgresql/*/bin (full log: $log)"
mariadb_present || die "after installing ${packages[*]}: no mariadbd, mariadb-install-db and mariadb (full log: $log)"
echo "installed ${packages[*]}" >&2
