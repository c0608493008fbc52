#!/usr/bin/env bash
# The multi-node cluster end-to-end test (make e2e-cluster NODES=3, docs/cluster.md "Multi-node"):
# bring the cluster up with NODES worker nodes in network namespaces, run the NetworkPolicy matrix
# (e2e/cluster/policy_matrix_test.go), with NODES_PLATFORM=1 build the images, import them into
# every node and run the platform across the nodes (e2e/cluster/nodes_platform_test.go), and
# always tear it down.
#
#   NODES=3 (2..9)         worker nodes
#   NODES_PLATFORM=1       also cluster DNS (CoreDNS) and the platform across the nodes
#                          (nodes_platform_test.go: spread, a round series across the nodes)
#   OBSCURA_E2E_NODES_DRAIN=1  with it, a node drained under load (opt-in, ~2 min; passed on 2026-11-29: docs/cluster.md)
#   E2E_KEEP_CLUSTER=1     leave the cluster running afterwards (for debugging)
#   E2E_REPORT=<file>      where the run's notes go (default e2e/cluster/out/report-nodes.json)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
start=$SECONDS
log() { printf '[e2e-nodes %4ds] %s\n' "$((SECONDS - start))" "$*" >&2; }

nodes=${NODES:-3}
report=${E2E_REPORT:-$ROOT/e2e/cluster/out/report-nodes.json}
mkdir -p "$(dirname "$report")"

down() {
  rc=$?
  if [[ ${E2E_KEEP_CLUSTER:-0} == 1 ]]; then
    log "leaving the cluster up (E2E_KEEP_CLUSTER=1); make cluster-down stops it"
  else
    log "tearing the cluster down"
    hack/cluster/cluster.sh down >&2 || rc=1
  fi
  log "finished with status $rc in $((SECONDS - start))s"
  exit $rc
}
trap down EXIT

log "tools (helm)"
hack/tools.sh helm >&2
log "cluster up ($nodes nodes)"
NODES=$nodes hack/cluster/cluster.sh up >&2
hack/cluster/cluster.sh status >&2
log "e2e/cluster: the NetworkPolicy matrix"
export KUBECONFIG="$ROOT/hack/cluster/state/kubeconfig/admin.conf"
(cd e2e && OBSCURA_E2E_CLUSTER=1 OBSCURA_E2E_CLUSTER_NODES="$nodes" OBSCURA_E2E_REPORT="${report%.json}-matrix.json" \
  OBSCURA_BIN="$ROOT/bin" go test ./cluster -count=1 -v -timeout 20m -run '^TestPolicyMatrix$')
if [[ ${NODES_PLATFORM:-0} != 1 ]]; then
  log "the platform across the nodes: skipped (NODES_PLATFORM=1 runs it)"
  exit 0
fi
log "images: build, import into every node"
hack/images/images.sh build >&2
for ((i = 1; i <= nodes; i++)); do # one at a time: each import builds the images tool in place
  CONTAINERD_SOCK="$ROOT/hack/cluster/state/nodes/n$i/run/containerd.sock" \
    hack/images/images.sh import operator obscura mohito nats-server redis envoy >&2
done
log "e2e/cluster: the platform across the nodes"
(cd e2e && OBSCURA_E2E_CLUSTER=1 OBSCURA_E2E_CLUSTER_NODES="$nodes" OBSCURA_E2E_REPORT="$report" \
  OBSCURA_BIN="$ROOT/bin" go test ./cluster -count=1 -v -timeout 30m -run '^TestPlatformAcrossNodes$')
