#!/usr/bin/env bash
# Obscura's container images, built offline and reproducibly (docs/images.md).
#
#   hack/images/images.sh build [-force] [-no-verify] [component ...]
#       build every image (operator mohito pda pps nats-server cert-manager redis envoy vault) into
#       hack/images/out, skipping a component whose inputs have not changed; writes
#       hack/images/out/images.json
#   hack/images/images.sh import [component ...]
#       import the built images into the local cluster's containerd (namespace k8s.io);
#       CONTAINERD_SOCK names another containerd (a node of the multi-node mode)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/hack/images"
OUT="$HERE/out"
STATE="${CLUSTER_STATE:-$ROOT/hack/cluster/state}"
SOCK="${CONTAINERD_SOCK:-$STATE/run/containerd.sock}"

log() { printf '[images] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

tool() {
  # The builder is its own module (go-containerregistry), outside the repo's go.work.
  (cd "$HERE" && GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$OUT/bin/images" .)
}

cmd=${1:-build}
shift || true
case "$cmd" in
  build)
    tool
    exec "$OUT/bin/images" build -root "$ROOT" "$@"
    ;;
  import)
    [[ -f $OUT/images.json ]] || die "no $OUT/images.json: run 'make images' first"
    [[ -S $SOCK ]] || die "the local cluster is down (no containerd socket $SOCK): run 'make cluster-up'"
    ctr_() { ctr --address "$SOCK" -n k8s.io "$@"; }
    ctr_ version >/dev/null 2>&1 || die "containerd at $SOCK does not answer: is the cluster up? ('make cluster-status')"
    tool
    want=" $* "
    while read -r name image tarball digest; do
      [[ $# -eq 0 || $want == *" $name "* ]] || continue
      [[ -f $tarball ]] || die "$name: $tarball missing: run 'make images'"
      # The image by tag, and by digest: values-images.yaml pins repository:tag@digest, which the
      # CRI resolves through the repository@digest name (an import names the tag only).
      dref="${image%:*}@$digest"
      if ctr_ images ls -q "name==$image" | grep -qx "$image"; then
        log "$name: $image already imported"
      else
        ctr_ images import "$tarball" >/dev/null
        ctr_ images ls -q "name==$image" | grep -qx "$image" || die "$name: $image not found after import"
        log "$name: imported $image"
      fi
      if ! ctr_ images ls -q "name==$dref" | grep -qx "$dref"; then
        ctr_ images tag "$image" "$dref" >/dev/null || die "$name: cannot name $image as $dref"
      fi
    done < <("$OUT/bin/images" list -root "$ROOT")
    ;;
  *) die "usage: $0 build|import [args]" ;;
esac
