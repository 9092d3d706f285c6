#!/usr/bin/env bash
# The one host setting the real machines need (docs/development/real-machines.md): they share this
# kernel and with it the per-user inotify limits, which a real machine would have to itself.
# Raises fs.inotify.max_user_instances and max_user_watches where they are lower, says so in
# one line, and never lowers them. The figures are kamaji_machine::machine's
# INOTIFY_MAX_USER_INSTANCES and INOTIFY_MAX_USER_WATCHES.
set -euo pipefail
raise() {
    local name=$1 wanted=$2 path=/proc/sys/fs/inotify/$1 current
    current=$(cat "$path")
    if [ "$current" -lt "$wanted" ]; then
        echo "$wanted" > "$path" ||
            { echo "host-limits: cannot raise fs.inotify.$name from $current to $wanted (needs root)" >&2; exit 1; }
        echo "host-limits: raised fs.inotify.$name from $current to $wanted (the machines share this kernel)"
    fi
}
raise max_user_instances 8192
raise max_user_watches 524288
