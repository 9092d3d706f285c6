#!/usr/bin/env bash
# Builds the real Kubernetes, etcd and Cluster API programs that the tests run,
# from the Go module proxy, into a per-machine cache outside the repository.
#
#   tests/tools/build.sh                    build what is missing, print the bin directory
#   tests/tools/build.sh --defer-previous   the same without building the previous minor
#                                           release's programs (k8s-minor): the bin directory
#                                           links them where a later plain run puts them, so
#                                           only tests of that version wait for it
#
# Cache: ${KAMAJI_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kamaji-rs/tools}/<group>-<version>-<hash>/
# keyed by the pinned version and a hash of the group's go.mod/go.sum, so a
# second run rebuilds nothing and a pin change builds afresh. All binaries are
# linked into <cache>/bin-<hash>/, whose path is written to target/tools-bin
# for the Rust test environment (which also honours $KAMAJI_TOOLS_BIN).
#
# It also installs PostgreSQL 15 and MariaDB 10.11 from the Debian packages when their
# programs are absent (tests/tools/sql-servers.sh; the SQL DataStore tests start them).
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

command -v go >/dev/null 2>&1 || die "no Go toolchain on PATH (install Go >= 1.26.8 and retry)"
mkdir -p "$cache" || die "cannot create the tools cache $cache"

defer_previous=false
case "${1:-}" in
    --defer-previous) defer_previous=true ;;
    "") ;;
    *) die "unknown argument $1 (expected nothing or --defer-previous)" ;;
esac

hash_of() { cat "$1/go.mod" "$1"/go.sum "$1"/*.go 2>/dev/null | sha256sum | cut -c1-12; }
# dir_of GROUP VERSION: the group's cache directory (known before it is built).
dir_of() { echo "$cache/$1-$2-$(hash_of "$here/$1")"; }

# build GROUP VERSION LDFLAGS OUT=PKG...
# Static (CGO_ENABLED=0) unless TOOL_CGO=1; TOOL_TAGS are Go build tags.
build() {
    local group=$1 version=$2 ldflags=$3; shift 3
    local dir
    dir=$(dir_of "$group" "$version")
    if [ -f "$dir/.complete" ]; then echo "$dir"; return 0; fi
    rm -rf "$dir" && mkdir -p "$dir/bin"
    local log="$cache/$group-$version.log"
    echo "building $group $version (first time on this machine; log: $log)" >&2
    local start=$SECONDS pair pkgs=() names=()
    for pair in "$@"; do pkgs+=("${pair#*=}"); names+=("${pair%%=*}"); done
    : >"$log"
    # One `go build` for the whole group: its programs compile and link side by side. The
    # linker drops DWARF (-w in every group's ldflags), so the compiler does not make it
    # either (-dwarf=false: about 15 % less CPU on a cold Go build cache).
    if ! (cd "$here/$group" && CGO_ENABLED=${TOOL_CGO:-0} go build -gcflags "all=-dwarf=false" -tags "${TOOL_TAGS:-}" -ldflags "$ldflags" -o "$dir/out/" "${pkgs[@]}") >>"$log" 2>&1; then
        local cause
        # The first line that states a cause (not go's progress lines), else the last line.
        cause=$(grep -v -E '^go: (downloading|finding|extracting)' "$log" | grep -m1 -E 'disabled|cannot find|not found|no such host|connection refused|dial tcp|: 4[0-9][0-9] |error|failed|invalid' \
            || grep -v -E '^go: (downloading|finding|extracting)' "$log" | tail -n1)
        local fetching
        fetching=$(grep -E '^go: downloading ' "$log" | tail -n1 | sed 's/^go: downloading //')
        [ -n "$fetching" ] && cause="$cause (while downloading $fetching)"
        rm -rf "$dir"
        die "building ${names[*]} ($group $version) failed: ${cause:-see $log} (full log: $log)"
    fi
    # Go names each program after the last element of its package path (the one before a
    # major-version suffix such as /v3); the cache names it as the tests do.
    for pair in "$@"; do
        local pkg=${pair#*=} base
        base=${pkg##*/}
        if [[ $base =~ ^v[0-9]+$ ]]; then base=${pkg%/*}; base=${base##*/}; fi
        mv "$dir/out/$base" "$dir/bin/${pair%%=*}" || die "building $group $version: go wrote no $base for ${pair%%=*}"
    done
    rmdir "$dir/out"
    touch "$dir/.complete"
    echo "built $group $version in $((SECONDS - start))s" >&2
    echo "$dir"
}

# debs NAME PACKAGE...: Debian packages fetched with `apt-get download` and unpacked with
# `dpkg -x` into a cached root; nothing is installed on the machine.
debs() {
    local name=$1; shift
    local dir="$cache/debs-$name-$(echo "$*" | sha256sum | cut -c1-12)"
    if [ -f "$dir/.complete" ]; then echo "$dir"; return 0; fi
    rm -rf "$dir" && mkdir -p "$dir/deb" "$dir/root"
    local log="$cache/debs-$name.log"
    command -v apt-get >/dev/null 2>&1 || die "no apt-get on PATH (Debian packages $* are needed)"
    if ! (cd "$dir/deb" && apt-get download "$@") >"$log" 2>&1; then
        rm -rf "$dir"
        die "downloading Debian packages $* failed: $(grep -m1 -E '^E:' "$log" || tail -n1 "$log") (run apt-get update once; full log: $log)"
    fi
    local deb
    for deb in "$dir"/deb/*.deb; do dpkg -x "$deb" "$dir/root" || die "unpacking $deb failed"; done
    touch "$dir/.complete"
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
# allow that). Each group's directory is written to a file of $results; the first failure in
# either chain stops both, and its one line is printed.
results=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$results"' EXIT
build etcd "$ETCD_VERSION" "-s -w" etcd=go.etcd.io/etcd/server/v3 etcdctl=go.etcd.io/etcd/etcdctl/v3 >"$results/etcd" || exit 1
chain_kubernetes() {
    build k8s "$K8S_VERSION" "$k8s_ldflags" \
        kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
        kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
        kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler \
        kubeadm=k8s.io/kubernetes/cmd/kubeadm \
        kubectl=k8s.io/kubernetes/cmd/kubectl \
        kubelet=k8s.io/kubernetes/cmd/kubelet \
        kube-proxy=k8s.io/kubernetes/cmd/kube-proxy >"$results/k8s" || exit 1
    # kine here, not in chain_others: the two chains then take about as long.
    build kine "$KINE_VERSION" "-s -w -X github.com/k3s-io/kine/pkg/version.Version=$KINE_VERSION" \
        kine=github.com/k3s-io/kine >"$results/kine" || exit 1
    if $defer_previous; then
        dir_of k8s-minor "$K8S_MINOR_VERSION" >"$results/minor"
        return 0
    fi
    build k8s-minor "$K8S_MINOR_VERSION" "$(k8s_ldflags_for "$K8S_MINOR_VERSION")" \
        kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
        kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
        kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler \
        kubeadm=k8s.io/kubernetes/cmd/kubeadm \
        kubelet=k8s.io/kubernetes/cmd/kubelet \
        kube-proxy=k8s.io/kubernetes/cmd/kube-proxy >"$results/minor" || exit 1
}
chain_others() {
    # PostgreSQL 15 and MariaDB 10.11 for the SQL DataStore tests, from the Debian packages
    # when absent (sql-servers.sh: no service started).
    "$here/sql-servers.sh" 2>"$results/sql-servers.err" ||
        die "$(grep -m1 '^make tools: ' "$results/sql-servers.err" | sed 's/^make tools: //')"
    cat "$results/sql-servers.err" >&2
    local capi_ldflags="-s -w -X sigs.k8s.io/cluster-api/version.gitVersion=$CAPI_VERSION -X sigs.k8s.io/cluster-api/version.gitMajor=1 -X sigs.k8s.io/cluster-api/version.gitMinor=14"
    build capi "$CAPI_VERSION" "$capi_ldflags" \
        capi-manager=sigs.k8s.io/cluster-api/core \
        capi-kubeadm-bootstrap-manager=sigs.k8s.io/cluster-api/bootstrap/kubeadm \
        clusterctl=sigs.k8s.io/cluster-api/cmd/clusterctl >"$results/capi" || exit 1
    # The test machines' runtime. containerd and its shim run on the machine itself, so they
    # may link the machine's glibc (btrfs left out: it needs its headers).
    TOOL_CGO=1 TOOL_TAGS=no_btrfs build containerd "$CONTAINERD_VERSION" \
        "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
        containerd=github.com/containerd/containerd/v2/cmd/containerd \
        containerd-shim-runc-v2=github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
        ctr=github.com/containerd/containerd/v2/cmd/ctr >"$results/containerd" || exit 1
    # containerd gives every sandbox the RuntimeDefault seccomp profile, so runc needs the
    # seccomp tag: static against libseccomp.a from libseccomp-dev (real-machines.md §5.2).
    local seccomp_dir seccomp_pc
    seccomp_dir=$(debs libseccomp libseccomp-dev) || exit 1
    seccomp_pc=$(find "$seccomp_dir/root" -name libseccomp.pc | head -n1)
    [ -n "$seccomp_pc" ] || die "libseccomp.pc is missing from the unpacked libseccomp-dev ($seccomp_dir)"
    sed -i "s|^prefix=.*|prefix=$seccomp_dir/root/usr|" "$seccomp_pc"
    PKG_CONFIG_PATH=$(dirname "$seccomp_pc") TOOL_CGO=1 TOOL_TAGS=seccomp build runc "$RUNC_VERSION" \
        "-s -w -X main.version=${RUNC_VERSION#v} -extldflags -static" \
        runc=github.com/opencontainers/runc >"$results/runc" || exit 1
    build cni "$CNI_VERSION" "-s -w" \
        bridge=github.com/containernetworking/plugins/plugins/main/bridge \
        host-local=github.com/containernetworking/plugins/plugins/ipam/host-local \
        loopback=github.com/containernetworking/plugins/plugins/main/loopback >"$results/cni" || exit 1
    build coredns "$COREDNS_VERSION" "-s -w" coredns=kamaji-rs.test/tools/coredns >"$results/coredns" || exit 1
    build konnectivity "$KONNECTIVITY_VERSION" "-s -w" \
        proxy-server=sigs.k8s.io/apiserver-network-proxy/cmd/server \
        proxy-agent=sigs.k8s.io/apiserver-network-proxy/cmd/agent >"$results/konnectivity" || exit 1
    # A static client for test pods: resolve a name, GET a URL (tests/tools/netcheck).
    build netcheck v0 "-s -w" netcheck=kamaji-rs.test/tools/netcheck >"$results/netcheck" || exit 1
    build kwok "$KWOK_VERSION" "-s -w" \
        kwok=sigs.k8s.io/kwok/cmd/kwok >"$results/kwok" || exit 1
    # nft and its libraries for the kube-proxy image (nftables mode; real-machines.md §2, §5.4).
    debs nft nftables libnftables1 libmnl0 libnftnl11 libjansson4 libxtables12 libgmp10 libedit2 libbsd0 libmd0 libtinfo6 >"$results/nft" || exit 1
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
for group in etcd k8s minor capi containerd runc cni coredns konnectivity netcheck kine kwok nft; do
    printf -v "${group}_dir" '%s' "$(cat "$results/$group")"
done

# The sandbox's pause process: a small static C program.
pause_dir="$cache/pause-$(sha256sum "$here/pause/pause.c" | cut -c1-12)"
if [ ! -f "$pause_dir/.complete" ]; then
    command -v cc >/dev/null 2>&1 || die "no C compiler (cc) on PATH for the pause program"
    rm -rf "$pause_dir" && mkdir -p "$pause_dir/bin"
    cc -Os -static -o "$pause_dir/bin/pause" "$here/pause/pause.c" >"$cache/pause.log" 2>&1 \
        || die "building pause failed: $(head -n1 "$cache/pause.log") (full log: $cache/pause.log)"
    touch "$pause_dir/.complete"
fi

# The CAPI CRDs come from the same module version the manager was built from.
capi_src=$(cd "$here/capi" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api 2>/dev/null) \
    || die "cannot locate sigs.k8s.io/cluster-api $CAPI_VERSION in the module cache"

# The Gateway API CRDs: only the module's files are needed, no build.
gateway_src=$(cd "$cache" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION" 2>"$cache/gateway-api.log" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$gateway_src" ] && [ -d "$gateway_src" ] \
    || die "cannot download sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION: $(head -n1 "$cache/gateway-api.log") (full log: $cache/gateway-api.log)"

all_dirs="$gateway_src $etcd_dir $k8s_dir $minor_dir $capi_dir $containerd_dir $runc_dir $cni_dir $coredns_dir $konnectivity_dir $pause_dir $nft_dir $netcheck_dir $kine_dir $kwok_dir"
# Keyed by the groups' directories and this script (which decides the layout): a finished bin
# directory is kept as it is, since tests may be running programs from it (a deferred run's
# previous-release links start to resolve when a later run has built their groups).
bin="$cache/bin-$( (echo "$all_dirs"; cat "${BASH_SOURCE[0]}") | sha256sum | cut -c1-12)"
mkdir -p "$root/target"
if [ -d "$bin" ]; then
    echo "$bin" >"$root/target/tools-bin"
    echo "$bin"
    exit 0
fi
rm -rf "$bin.tmp" && mkdir -p "$bin.tmp/crds/capi-core" "$bin.tmp/crds/capi-kubeadm-bootstrap" "$bin.tmp/webhooks"
for d in "$etcd_dir" "$k8s_dir" "$capi_dir" "$containerd_dir" "$runc_dir" "$coredns_dir" "$konnectivity_dir" "$pause_dir" "$netcheck_dir" "$kine_dir" "$kwok_dir"; do ln -sf "$d"/bin/* "$bin.tmp/"; done
# CNI plugins in their own directory (containerd's cni bin_dirs); nft's unpacked root.
mkdir -p "$bin.tmp/cni" && ln -sf "$cni_dir"/bin/* "$bin.tmp/cni/"
ln -sfn "$nft_dir/root" "$bin.tmp/nft-root"
# By name: under --defer-previous the group is not built yet.
mkdir -p "$bin.tmp/versions/$K8S_MINOR_VERSION"
for program in kube-apiserver kube-controller-manager kube-scheduler kubeadm kubelet kube-proxy; do
    ln -sf "$minor_dir/bin/$program" "$bin.tmp/versions/$K8S_MINOR_VERSION/"
done
cp "$capi_src"/core/config/crd/bases/*.yaml "$bin.tmp/crds/capi-core/"
mkdir -p "$bin.tmp/crds/gateway-api"
cp "$gateway_src/config/crd/standard/gateway.networking.k8s.io_tlsroutes.yaml" "$bin.tmp/crds/gateway-api/"
cp "$capi_src"/bootstrap/kubeadm/config/crd/bases/*.yaml "$bin.tmp/crds/capi-kubeadm-bootstrap/"
cp "$capi_src"/core/config/webhook/manifests.yaml "$bin.tmp/webhooks/capi-core.yaml"
cp "$capi_src"/bootstrap/kubeadm/config/webhook/manifests.yaml "$bin.tmp/webhooks/capi-kubeadm-bootstrap.yaml"
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
    "$k8s_dir/bin/kubectl" kustomize "$work/config/default" >"$out/$4" 2>"$cache/render-$2.log" \
        || die "rendering the $2 components failed: $(head -n1 "$cache/render-$2.log") (full log: $cache/render-$2.log)"
    cp "$capi_src/metadata.yaml" "$out/metadata.yaml"
    rm -rf "$work"
}
render_components "$capi_src/core/config" cluster-api cluster-api-controller core-components.yaml
render_components "$capi_src/bootstrap/kubeadm/config" bootstrap-kubeadm kubeadm-bootstrap-controller bootstrap-components.yaml
chmod -R u+w "$bin.tmp"
mv "$bin.tmp" "$bin"
echo "$bin" >"$root/target/tools-bin"
echo "$bin"
