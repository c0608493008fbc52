#!/usr/bin/env bash
# The cluster end-to-end test (make e2e-cluster, docs/cluster.md): bring the local cluster up,
# build and import the images, run e2e/cluster against it, and always tear the cluster down.
#
#   E2E_CLUSTER_MODE=full|smoke   full (default): install, samples, load
#                                 ×1/×4/×8/×1 with capacity classes and autoscaling asserted, upgrade,
#                                 one LOIS exchange, one PDA AggregationJob, one PPS execution, log
#                                 scan, uninstall;
#                                 smoke: install, the NOTES' sample path, one round through the edge
#                                 (helm test), one LOIS exchange through the CI pod, one SDDR
#                                 mailbox exchange, one PPS execution, log scan, uninstall.
#                                 Both: a Prometheus on the node scrapes each system's pods while
#                                 its workload runs and every panel of its dashboard must return
#                                 data (Mohito, LOIS, SDDR, PPS; PDA in full mode, or in the smoke
#                                 with OBSCURA_E2E_CLUSTER_PDA=1)
#   OBSCURA_E2E_CLUSTER_NOTES=0|1 the NOTES' sample path: on by default in the smoke (one NATS
#                                 server), off in full mode (3-node NATS); 0 or 1 forces it
#   OBSCURA_E2E_CLUSTER_VENDORS=2 full mode: a second vendor joins for the load phases, and the
#                                 encoders must scale out to two partitions and back (default 1)
#   E2E_KEEP_CLUSTER=1            leave the cluster running afterwards (for debugging)
#   E2E_REPORT=<file>             where the run's figures go (default e2e/cluster/out/report.json)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
start=$SECONDS
log() { printf '[e2e-cluster %4ds] %s\n' "$((SECONDS - start))" "$*" >&2; }

mode=${E2E_CLUSTER_MODE:-full}
report=${E2E_REPORT:-$ROOT/e2e/cluster/out/report.json}
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

log "tools (helm, kubectl, ...)"
hack/tools.sh >&2
log "cluster up"
hack/cluster/cluster.sh up >&2
log "images"
hack/images/images.sh build >&2
hack/images/images.sh import >&2
log "e2e/cluster ($mode)"
export KUBECONFIG="$ROOT/hack/cluster/state/kubeconfig/admin.conf"
(cd e2e && OBSCURA_E2E_CLUSTER=1 OBSCURA_E2E_CLUSTER_MODE="$mode" OBSCURA_E2E_REPORT="$report" \
  OBSCURA_BIN="$ROOT/bin" go test ./cluster -count=1 -v -timeout 60m -run TestCluster)
log "report: $report"
