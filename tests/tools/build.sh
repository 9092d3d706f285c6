#!/usr/bin/env bash
# Builds the real Kubernetes, etcd and Cluster API programs that the tests run,
# from the Go module proxy, into a per-machine cache outside the repository.
#
#   tests/tools/build.sh                    build what is missing, print the bin directory
#   tests/tools/build.sh --defer-previous   the same without building the previous minor
#                                           release's programs (k8s-minor): the bin directory
#                                           links them where a later plain run puts them, so
#                                           only tests of that version wait for it
#   tests/tools/build.sh --only G1,G2,...   build only the named groups (see ALL_GROUPS below)
#   tests/tools/build.sh --demo             build only the groups `make demo` runs (DEMO_GROUPS)
#
# Cache: ${KAMAJI_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kamaji-rs/tools}/<group>-<version>-<hash>/
# keyed by the pinned version and a hash of the group's go.mod/go.sum, so a
# second run rebuilds nothing and a pin change builds afresh. The bin directory,
# <cache>/bin-<hash>/, links every group that is complete in the cache (the ones
# built by this run and any built before; under --defer-previous also the previous
# minor's, by name), and its path is written to target/tools-bin for the Rust test
# environment (which also honours $KAMAJI_TOOLS_BIN). So `--demo` on a new machine
# gives a bin directory of the demo's groups only, and a later plain run builds the
# rest and writes a bin directory of everything; `--demo` after a plain run builds
# nothing and keeps the full bin directory.
#
# It also installs PostgreSQL 15 and MariaDB 10.11 from the Debian packages when their
# programs are absent (tests/tools/sql-servers.sh; the SQL DataStore tests start them):
# the group sql-servers.
#
# On failure it prints one line naming the cause; the full log stays on disk.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${KAMAJI_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kamaji-rs/tools}

K8S_VERSION=v1.36.3
# The previous minor release, for upgrades (the minor upgrade, a topology upgrade with a
# worker of that release, backing a stuck upgrade out): its control plane, kubeadm, kubelet
# and kube-proxy.
K8S_MINOR_VERSION=v1.35.4
ETCD_VERSION=v3.6.16
CAPI_VERSION=v1.14.2
# The test machines (shared/reference/real-machines.md): container runtime, CNI, CoreDNS.
CONTAINERD_VERSION=v2.4.2
RUNC_VERSION=v1.5.3
CNI_VERSION=v1.10.0
# kubeadm v1.36's constants.CoreDNSVersion.
COREDNS_VERSION=v1.14.2
# konnectivity (addons.konnectivity): the apiserver-network-proxy release of Kubernetes v1.36.
KONNECTIVITY_VERSION=v0.36.0
# The Gateway API whose TLSRoute CRD (standard channel, v1) network.gateway's route is.
GATEWAY_API_VERSION=v1.6.3
# kine, the etcd API over SQL beside the tenants' kube-apiservers on PostgreSQL and MySQL
# DataStores (its image: kamaji-machine's KINE_IMAGE).
KINE_VERSION=v0.17.5
# kwok, the kubelets of the simulated scale benchmark's fake Nodes (make bench-sim and its
# smoke run in the lifecycle suite): pods bound to them become Running and Ready without
# processes.
KWOK_VERSION=v0.8.0

die() { echo "make tools: $*" >&2; exit 1; }

# Every group, in the order the bin directory is assembled; all of them by default.
ALL_GROUPS="etcd k8s k8s-minor kine capi containerd runc cni coredns konnectivity netcheck kwok pause nft gateway-api sql-servers"
# What `make demo` runs (tests/e2e/examples/demo.rs: an Env with worker machines and without
# the images only tests run): the management cluster (etcd; k8s: kube-apiserver,
# -controller-manager, -scheduler, kubectl), CAPI core and CABPK (capi, with its CRDs and
# webhooks), the datastore (etcd), the management and worker machines (containerd, runc, cni,
# pause; k8s: kubelet, kube-proxy, kubeadm; nft for the kube-proxy image; coredns on the
# workers). Not: the previous minor release, kine, konnectivity, netcheck, kwok, the SQL
# servers, the Gateway API CRDs.
DEMO_GROUPS="etcd k8s capi containerd runc cni coredns pause nft"

defer_previous=false
selected=$ALL_GROUPS
while [ $# -gt 0 ]; do
    case "$1" in
        --defer-previous) defer_previous=true ;;
        --demo) selected=$DEMO_GROUPS ;;
        --only=*) selected=${1#--only=} ;;
        --only)
            [ $# -ge 2 ] || die "--only needs a comma-separated list of groups (of: $ALL_GROUPS)"
            selected=$2
            shift
            ;;
        *) die "unknown argument $1 (expected --defer-previous, --demo or --only GROUP,...)" ;;
    esac
    shift
done
selected=" ${selected//,/ } "
for group in $selected; do
    [[ " $ALL_GROUPS " == *" $group "* ]] || die "unknown group $group (groups: $ALL_GROUPS)"
done
[ -n "${selected// /}" ] || die "--only names no group (groups: $ALL_GROUPS)"
# Under --defer-previous the previous minor's group is never built, only linked by name.
$defer_previous && selected=${selected/ k8s-minor / }
wanted() { [[ $selected == *" $1 "* ]]; }

# Go builds every group but pause, nft and sql-servers.
if [ -n "$(echo "$selected" | tr ' ' '\n' | grep -v -x -E 'pause|nft|sql-servers|')" ]; then
    command -v go >/dev/null 2>&1 || die "no Go toolchain on PATH (install Go >= 1.26.8 and retry)"
fi
command -v flock >/dev/null 2>&1 || die "no flock on PATH (util-linux)"
mkdir -p "$cache" || die "cannot create the tools cache $cache"

# lock NAME: takes the lock file $cache/NAME.lock (flock(1)), held on the caller's
# `local lock_fd` until unlock or the process ends (also killed): two builds on one machine
# (two worktrees, `make tools` beside `make test`) never build one group at once. The
# second waits, saying so, and then finds the first's .complete; a lock left by a killed
# build is released with its process, and its half-built folder is removed by the next.
lock() {
    local file="$cache/$1.lock"
    exec {lock_fd}>>"$file" || die "cannot open the lock $file"
    if ! flock -n "$lock_fd"; then
        echo "waiting for another build of $1 (it holds $file)" >&2
        flock "$lock_fd" || die "cannot take the lock $file"
    fi
}
unlock() { exec {lock_fd}>&-; }

hash_of() { cat "$1/go.mod" "$1"/go.sum "$1"/*.go 2>/dev/null | sha256sum | cut -c1-12; }
# dir_of GROUP VERSION: the group's cache directory (known before it is built).
dir_of() { echo "$cache/$1-$2-$(hash_of "$here/$1")"; }
# debs_dir_of NAME PACKAGE...: the cache directory of debs NAME PACKAGE....
debs_dir_of() { local name=$1; shift; echo "$cache/debs-$name-$(echo "$*" | sha256sum | cut -c1-12)"; }
# nft and its libraries for the kube-proxy image (nftables mode; real-machines.md §2, §5.4).
NFT_DEBS=(nftables libnftables1 libmnl0 libnftnl11 libjansson4 libxtables12 libgmp10 libedit2 libbsd0 libmd0 libtinfo6)
# The sandbox's pause process: a small static C program.
pause_dir="$cache/pause-$(sha256sum "$here/pause/pause.c" | cut -c1-12)"
# group_dir GROUP: the cache directory of a built group (not gateway-api, sql-servers).
group_dir() {
    case $1 in
        etcd) dir_of etcd "$ETCD_VERSION" ;;
        k8s) dir_of k8s "$K8S_VERSION" ;;
        k8s-minor) dir_of k8s-minor "$K8S_MINOR_VERSION" ;;
        kine) dir_of kine "$KINE_VERSION" ;;
        capi) dir_of capi "$CAPI_VERSION" ;;
        containerd) dir_of containerd "$CONTAINERD_VERSION" ;;
        runc) dir_of runc "$RUNC_VERSION" ;;
        cni) dir_of cni "$CNI_VERSION" ;;
        coredns) dir_of coredns "$COREDNS_VERSION" ;;
        konnectivity) dir_of konnectivity "$KONNECTIVITY_VERSION" ;;
        netcheck) dir_of netcheck v0 ;;
        kwok) dir_of kwok "$KWOK_VERSION" ;;
        pause) echo "$pause_dir" ;;
        nft) debs_dir_of nft "${NFT_DEBS[@]}" ;;
        *) return 1 ;;
    esac
}

# build GROUP VERSION LDFLAGS OUT=PKG...
# Static (CGO_ENABLED=0) unless TOOL_CGO=1; TOOL_TAGS are Go build tags.
build() {
    local group=$1 version=$2 ldflags=$3; shift 3
    local dir lock_fd
    dir=$(dir_of "$group" "$version")
    if [ -f "$dir/.complete" ]; then return 0; fi
    # Also over the log, which is named by the group and version only.
    lock "$group-$version"
    if [ -f "$dir/.complete" ]; then unlock; return 0; fi
    # Built in a folder of its own and moved into place whole, .complete included: the
    # group's folder is either absent or complete, never half written.
    local work="$dir.building"
    rm -rf "$dir" "$work" && mkdir -p "$work/bin" || die "cannot create $work"
    local log="$cache/$group-$version.log"
    echo "building $group $version (first time on this machine; log: $log)" >&2
    local start=$SECONDS pair pkgs=() names=()
    for pair in "$@"; do pkgs+=("${pair#*=}"); names+=("${pair%%=*}"); done
    : >"$log"
    # One `go build` for the whole group: its programs compile and link side by side. The
    # linker drops DWARF (-w in every group's ldflags), so the compiler does not make it
    # either (-dwarf=false: about 15 % less CPU on a cold Go build cache).
    if ! (cd "$here/$group" && CGO_ENABLED=${TOOL_CGO:-0} go build -gcflags "all=-dwarf=false" -tags "${TOOL_TAGS:-}" -ldflags "$ldflags" -o "$work/out/" "${pkgs[@]}") >>"$log" 2>&1; then
        local cause
        # The first line that states a cause (not go's progress lines), else the last line.
        cause=$(grep -v -E '^go: (downloading|finding|extracting)' "$log" | grep -m1 -E 'disabled|cannot find|not found|no such host|connection refused|dial tcp|: 4[0-9][0-9] |error|failed|invalid' \
            || grep -v -E '^go: (downloading|finding|extracting)' "$log" | tail -n1)
        local fetching
        fetching=$(grep -E '^go: downloading ' "$log" | tail -n1 | sed 's/^go: downloading //')
        [ -n "$fetching" ] && cause="$cause (while downloading $fetching)"
        rm -rf "$work"
        die "building ${names[*]} ($group $version) failed: ${cause:-see $log} (full log: $log)"
    fi
    # Go names each program after the last element of its package path (the one before a
    # major-version suffix such as /v3); the cache names it as the tests do.
    for pair in "$@"; do
        local pkg=${pair#*=} base
        base=${pkg##*/}
        if [[ $base =~ ^v[0-9]+$ ]]; then base=${pkg%/*}; base=${base##*/}; fi
        mv "$work/out/$base" "$work/bin/${pair%%=*}" || die "building $group $version: go wrote no $base for ${pair%%=*}"
    done
    rmdir "$work/out" && touch "$work/.complete" && mv -T "$work" "$dir" || die "cannot move $work to $dir"
    unlock
    echo "built $group $version in $((SECONDS - start))s" >&2
}

# debs NAME PACKAGE...: Debian packages fetched with `apt-get download` and unpacked with
# `dpkg -x` into a cached root; nothing is installed on the machine. Prints the root's parent.
debs() {
    local name=$1 dir lock_fd
    dir=$(debs_dir_of "$@")
    shift
    if [ -f "$dir/.complete" ]; then echo "$dir"; return 0; fi
    lock "debs-$name"
    if [ -f "$dir/.complete" ]; then unlock; echo "$dir"; return 0; fi
    local work="$dir.building"
    rm -rf "$dir" "$work" && mkdir -p "$work/deb" "$work/root" || die "cannot create $work"
    local log="$cache/debs-$name.log"
    command -v apt-get >/dev/null 2>&1 || die "no apt-get on PATH (Debian packages $* are needed)"
    if ! (cd "$work/deb" && apt-get download "$@") >"$log" 2>&1; then
        rm -rf "$work"
        die "downloading Debian packages $* failed: $(grep -m1 -E '^E:' "$log" || tail -n1 "$log") (run apt-get update once; full log: $log)"
    fi
    local deb
    for deb in "$work"/deb/*.deb; do dpkg -x "$deb" "$work/root" || die "unpacking $deb failed"; done
    touch "$work/.complete" && mv -T "$work" "$dir" || die "cannot move $work to $dir"
    unlock
    echo "$dir"
}

now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
# Version stamps as kubernetes/kubernetes:hack/lib/version.sh sets them.
k8s_ldflags_for() {
    local version=$1 minor=${1#v1.} flags="-s -w" pkg
    minor=${minor%%.*}
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        flags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
        flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$now -X $pkg.gitCommit=0000000000000000000000000000000000000000"
    done
    echo "$flags"
}
k8s_ldflags=$(k8s_ldflags_for "$K8S_VERSION")

# etcd first, alone: it is the smallest group, so a Go proxy that cannot be reached is named
# within seconds. Then two independent chains of groups build side by side: one Go build
# leaves a core idle while it links, and the chains share nothing but the Go caches (which
# allow that). Each chain builds the selected groups of its own; the first failure in either
# chain stops both, and its one line is printed.
results=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$results"' EXIT
if wanted etcd; then
    build etcd "$ETCD_VERSION" "-s -w" etcd=go.etcd.io/etcd/server/v3 etcdctl=go.etcd.io/etcd/etcdctl/v3 || exit 1
fi
chain_kubernetes() {
    if wanted k8s; then
        build k8s "$K8S_VERSION" "$k8s_ldflags" \
            kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
            kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
            kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler \
            kubeadm=k8s.io/kubernetes/cmd/kubeadm \
            kubectl=k8s.io/kubernetes/cmd/kubectl \
            kubelet=k8s.io/kubernetes/cmd/kubelet \
            kube-proxy=k8s.io/kubernetes/cmd/kube-proxy || exit 1
    fi
    # kine here, not in chain_others: the two chains then take about as long.
    if wanted kine; then
        build kine "$KINE_VERSION" "-s -w -X github.com/k3s-io/kine/pkg/version.Version=$KINE_VERSION" \
            kine=github.com/k3s-io/kine || exit 1
    fi
    if wanted k8s-minor; then
        build k8s-minor "$K8S_MINOR_VERSION" "$(k8s_ldflags_for "$K8S_MINOR_VERSION")" \
            kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
            kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
            kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler \
            kubeadm=k8s.io/kubernetes/cmd/kubeadm \
            kubelet=k8s.io/kubernetes/cmd/kubelet \
            kube-proxy=k8s.io/kubernetes/cmd/kube-proxy || exit 1
    fi
}
chain_others() {
    # PostgreSQL 15 and MariaDB 10.11 for the SQL DataStore tests, from the Debian packages
    # when absent (sql-servers.sh: no service started).
    if wanted sql-servers; then
        "$here/sql-servers.sh" 2>"$results/sql-servers.err" ||
            die "$(grep -m1 '^make tools: ' "$results/sql-servers.err" | sed 's/^make tools: //')"
        cat "$results/sql-servers.err" >&2
    fi
    if wanted capi; then
        local capi_ldflags="-s -w -X sigs.k8s.io/cluster-api/version.gitVersion=$CAPI_VERSION -X sigs.k8s.io/cluster-api/version.gitMajor=1 -X sigs.k8s.io/cluster-api/version.gitMinor=14"
        build capi "$CAPI_VERSION" "$capi_ldflags" \
            capi-manager=sigs.k8s.io/cluster-api/core \
            capi-kubeadm-bootstrap-manager=sigs.k8s.io/cluster-api/bootstrap/kubeadm \
            clusterctl=sigs.k8s.io/cluster-api/cmd/clusterctl || exit 1
    fi
    # The test machines' runtime. containerd and its shim run on the machine itself, so they
    # may link the machine's glibc (btrfs left out: it needs its headers).
    if wanted containerd; then
        TOOL_CGO=1 TOOL_TAGS=no_btrfs build containerd "$CONTAINERD_VERSION" \
            "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
            containerd=github.com/containerd/containerd/v2/cmd/containerd \
            containerd-shim-runc-v2=github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
            ctr=github.com/containerd/containerd/v2/cmd/ctr || exit 1
    fi
    # containerd gives every sandbox the RuntimeDefault seccomp profile, so runc needs the
    # seccomp tag: static against libseccomp.a from libseccomp-dev (real-machines.md §5.2).
    if wanted runc && [ ! -f "$(group_dir runc)/.complete" ]; then
        local seccomp_dir seccomp_pc
        seccomp_dir=$(debs libseccomp libseccomp-dev) || exit 1
        seccomp_pc=$(find "$seccomp_dir/root" -name libseccomp.pc | head -n1)
        [ -n "$seccomp_pc" ] || die "libseccomp.pc is missing from the unpacked libseccomp-dev ($seccomp_dir)"
        sed -i "s|^prefix=.*|prefix=$seccomp_dir/root/usr|" "$seccomp_pc"
        PKG_CONFIG_PATH=$(dirname "$seccomp_pc") TOOL_CGO=1 TOOL_TAGS=seccomp build runc "$RUNC_VERSION" \
            "-s -w -X main.version=${RUNC_VERSION#v} -extldflags -static" \
            runc=github.com/opencontainers/runc || exit 1
    fi
    if wanted cni; then
        build cni "$CNI_VERSION" "-s -w" \
            bridge=github.com/containernetworking/plugins/plugins/main/bridge \
            host-local=github.com/containernetworking/plugins/plugins/ipam/host-local \
            loopback=github.com/containernetworking/plugins/plugins/main/loopback || exit 1
    fi
    if wanted coredns; then
        build coredns "$COREDNS_VERSION" "-s -w" coredns=kamaji-rs.test/tools/coredns || exit 1
    fi
    if wanted konnectivity; then
        build konnectivity "$KONNECTIVITY_VERSION" "-s -w" \
            proxy-server=sigs.k8s.io/apiserver-network-proxy/cmd/server \
            proxy-agent=sigs.k8s.io/apiserver-network-proxy/cmd/agent || exit 1
    fi
    # A static client for test pods: resolve a name, GET a URL (tests/tools/netcheck).
    if wanted netcheck; then
        build netcheck v0 "-s -w" netcheck=kamaji-rs.test/tools/netcheck || exit 1
    fi
    if wanted kwok; then
        build kwok "$KWOK_VERSION" "-s -w" \
            kwok=sigs.k8s.io/kwok/cmd/kwok || exit 1
    fi
    if wanted nft; then
        debs nft "${NFT_DEBS[@]}" >/dev/null || exit 1
    fi
}
# In a chain, a failure's line goes to $results/failure (the first one is printed).
chain_die() { echo "make tools: $*" >>"$results/failure"; exit 1; }
( die() { chain_die "$@"; }; chain_kubernetes ) &
( die() { chain_die "$@"; }; chain_others ) &
for _ in 1 2; do
    if ! wait -n; then
        kill $(jobs -p) 2>/dev/null
        wait 2>/dev/null
        head -n1 "$results/failure" >&2 2>/dev/null || echo "make tools: a build chain failed" >&2
        exit 1
    fi
done

build_pause() {
    local lock_fd
    lock pause
    if [ -f "$pause_dir/.complete" ]; then unlock; return 0; fi
    command -v cc >/dev/null 2>&1 || die "no C compiler (cc) on PATH for the pause program"
    rm -rf "$pause_dir" "$pause_dir.building" && mkdir -p "$pause_dir.building/bin" || die "cannot create $pause_dir.building"
    cc -Os -static -o "$pause_dir.building/bin/pause" "$here/pause/pause.c" >"$cache/pause.log" 2>&1 \
        || die "building pause failed: $(head -n1 "$cache/pause.log") (full log: $cache/pause.log)"
    touch "$pause_dir.building/.complete" && mv -T "$pause_dir.building" "$pause_dir" || die "cannot move $pause_dir.building to $pause_dir"
    unlock
}
if wanted pause && [ ! -f "$pause_dir/.complete" ]; then build_pause; fi

# The Gateway API CRDs: only the module's files are needed, no build. Not selected, they are
# linked when the module is already in the Go module cache (looked up without the network).
gateway_src=""
if wanted gateway-api; then
    # The lock covers the log (Go's module cache locks itself).
    lock_fd=""
    lock gateway-api
    gateway_src=$(cd "$cache" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION" 2>"$cache/gateway-api.log" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -n "$gateway_src" ] && [ -d "$gateway_src" ] \
        || die "cannot download sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION: $(head -n1 "$cache/gateway-api.log") (full log: $cache/gateway-api.log)"
    unlock
elif command -v go >/dev/null 2>&1; then
    gateway_src=$(cd "$cache" && GOPROXY=off GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION" 2>/dev/null \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -n "$gateway_src" ] && [ -d "$gateway_src" ] || gateway_src=""
fi

# The groups the bin directory links: every one complete in the cache (built now or by an
# earlier run), the previous minor's under --defer-previous by name; never one half built.
linked=" "
declare -A dirs
for group in $ALL_GROUPS; do
    case $group in
        sql-servers) continue ;;
        gateway-api) [ -n "$gateway_src" ] && { dirs[$group]=$gateway_src; linked+="$group "; } ;;
        *)
            dirs[$group]=$(group_dir "$group")
            if [ -f "${dirs[$group]}/.complete" ] || { [ "$group" = k8s-minor ] && $defer_previous; }; then
                linked+="$group "
            fi
            ;;
    esac
done
for group in $selected; do
    [[ $group == sql-servers || $linked == *" $group "* ]] || die "$group was selected but is not in the cache after its build"
done
links() { [[ $linked == *" $1 "* ]]; }

# The CAPI CRDs come from the same module version the manager was built from.
if links capi; then
    capi_src=$(cd "$here/capi" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api 2>/dev/null) \
        || die "cannot locate sigs.k8s.io/cluster-api $CAPI_VERSION in the module cache"
fi

# Keyed by the linked groups' directories and this script (which decides the layout): a
# finished bin directory is kept as it is, since tests may be running programs from it (a
# deferred run's previous-release links start to resolve when a later run has built their
# group; a plain run and a deferred one link the same directories).
bin="$cache/bin-$( (for group in $linked; do echo "$group=${dirs[$group]}"; done; cat "${BASH_SOURCE[0]}") | sha256sum | cut -c1-12)"
mkdir -p "$root/target"
# One run at a time assembles bin directories ($bin.tmp is shared by the runs that want it).
lock_fd=""
lock bin
if [ -d "$bin" ]; then
    echo "$bin" >"$root/target/tools-bin"
    echo "$bin"
    exit 0
fi
rm -rf "$bin.tmp" && mkdir -p "$bin.tmp"
for group in etcd k8s capi containerd runc coredns konnectivity pause netcheck kine kwok; do
    links "$group" && ln -sf "${dirs[$group]}"/bin/* "$bin.tmp/"
done
# CNI plugins in their own directory (containerd's cni bin_dirs); nft's unpacked root.
if links cni; then mkdir -p "$bin.tmp/cni" && ln -sf "${dirs[cni]}"/bin/* "$bin.tmp/cni/"; fi
if links nft; then ln -sfn "${dirs[nft]}/root" "$bin.tmp/nft-root"; fi
# By name: under --defer-previous the group is not built yet.
if links k8s-minor; then
    mkdir -p "$bin.tmp/versions/$K8S_MINOR_VERSION"
    for program in kube-apiserver kube-controller-manager kube-scheduler kubeadm kubelet kube-proxy; do
        ln -sf "${dirs[k8s-minor]}/bin/$program" "$bin.tmp/versions/$K8S_MINOR_VERSION/"
    done
fi
if links gateway-api; then
    mkdir -p "$bin.tmp/crds/gateway-api"
    cp "$gateway_src/config/crd/standard/gateway.networking.k8s.io_tlsroutes.yaml" "$bin.tmp/crds/gateway-api/"
fi
# Cluster API's own provider components for `clusterctl init` from a local repository
# (clusterctl's layout {provider-label}/{version}/{components}.yaml + metadata.yaml), rendered
# as CAPI's `make release-manifests` renders them: its config/default with the release image
# (registry.k8s.io/cluster-api/<image>:<version>, the name the locally built image is imported
# under) and pull policy IfNotPresent, through the kustomize inside the built kubectl.
render_components() { # CONFIG_DIR LABEL IMAGE FILE
    local work out="$bin.tmp/clusterctl-repository/$2/$CAPI_VERSION"
    work=$(mktemp -d) && mkdir -p "$out" || die "cannot create $out"
    cp -r "$1" "$work/config" && chmod -R u+w "$work"
    sed -i -e "s@image: .*@image: registry.k8s.io/cluster-api/$3:$CAPI_VERSION@" "$work/config/default/manager_image_patch.yaml"
    sed -i -e "s@imagePullPolicy: .*@imagePullPolicy: IfNotPresent@" "$work/config/default/manager_pull_policy.yaml"
    "${dirs[k8s]}/bin/kubectl" kustomize "$work/config/default" >"$out/$4" 2>"$cache/render-$2.log" \
        || die "rendering the $2 components failed: $(head -n1 "$cache/render-$2.log") (full log: $cache/render-$2.log)"
    cp "$capi_src/metadata.yaml" "$out/metadata.yaml"
    rm -rf "$work"
}
if links capi; then
    mkdir -p "$bin.tmp/crds/capi-core" "$bin.tmp/crds/capi-kubeadm-bootstrap" "$bin.tmp/webhooks"
    cp "$capi_src"/core/config/crd/bases/*.yaml "$bin.tmp/crds/capi-core/"
    cp "$capi_src"/bootstrap/kubeadm/config/crd/bases/*.yaml "$bin.tmp/crds/capi-kubeadm-bootstrap/"
    cp "$capi_src"/core/config/webhook/manifests.yaml "$bin.tmp/webhooks/capi-core.yaml"
    cp "$capi_src"/bootstrap/kubeadm/config/webhook/manifests.yaml "$bin.tmp/webhooks/capi-kubeadm-bootstrap.yaml"
    # kubectl (the k8s group) renders them.
    if links k8s; then
        render_components "$capi_src/core/config" cluster-api cluster-api-controller core-components.yaml
        render_components "$capi_src/bootstrap/kubeadm/config" bootstrap-kubeadm kubeadm-bootstrap-controller bootstrap-components.yaml
    fi
fi
chmod -R u+w "$bin.tmp"
mv "$bin.tmp" "$bin"
echo "$bin" >"$root/target/tools-bin"
echo "$bin"
