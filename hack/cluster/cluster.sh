#!/usr/bin/env bash
# A real single-node Kubernetes cluster on 127.0.0.1 (docs/cluster.md).
#
#   hack/cluster/cluster.sh up       build/install what is missing, start everything, wait for Ready
#   hack/cluster/cluster.sh status   component health, node, pods
#   hack/cluster/cluster.sh down     stop everything and remove every trace outside the state dir
#   hack/cluster/cluster.sh down --purge   ... and delete the state dir (certificates, images) too
#
# Everything listens on 127.0.0.1 only; only hostNetwork pods can run (an admission policy makes
# every pod hostNetwork and points in-cluster clients at 127.0.0.1:6443). State, logs and pid files
# live in hack/cluster/state (CLUSTER_STATE to move it). Needs root (containerd, kubelet).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/hack/cluster"
BIN="$ROOT/bin"
STATE="${CLUSTER_STATE:-$HERE/state}"
PKI="$STATE/pki"
KCFG="$STATE/kubeconfig"
LOGS="$STATE/logs"
PIDS="$STATE/pids"
RUN="$STATE/run"
SOCK="$RUN/containerd.sock"
NODE=$(hostname)
K8S_VERSION=v1.37.0
METRICS_SERVER_VERSION=v0.9.0
PAUSE_IMAGE=localhost/obscura/pause:v1
METRICS_IMAGE=localhost/obscura/metrics-server:$METRICS_SERVER_VERSION
SERVICE_CIDR=10.96.0.0/24
APT_PACKAGES=(containerd runc containernetworking-plugins iptables conntrack socat)
# Host paths the kubelet/containerd/CNI write to outside the state dir; `down` removes them if
# `up` created them (recorded in $STATE/created).
HOST_PATHS=(/var/log/containers /var/log/pods /run/containerd /var/lib/cni /var/lib/kubelet /etc/cni)
KUBECTL=("$BIN/kube" kubectl --kubeconfig "$KCFG/admin.conf")

# NODES>=2: the multi-node mode (worker nodes in network namespaces, a pod network, kube-proxy,
# kube-network-policies; hack/cluster/nodes.sh). `down` and `status` know the running mode.
NODES=${NODES:-1}

T0=$SECONDS
log() { printf '[cluster %3ds] %s\n' "$((SECONDS - T0))" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
kubectl() { "${KUBECTL[@]}" "$@"; }

need_root() { [[ $(id -u) -eq 0 ]] || die "run as root (containerd and the kubelet need it)"; }

# ---------------------------------------------------------------------------------------------
# prerequisites and binaries

prereqs() {
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing from Debian: ${missing[*]}"
    if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
      apt-get update -qq >/dev/null
      apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
    # Debian's package starts a system containerd on /run/containerd; this cluster runs its own.
    if command -v systemctl >/dev/null && systemctl is-active -q containerd 2>/dev/null; then
      systemctl stop containerd >/dev/null 2>&1 || true
      systemctl disable containerd >/dev/null 2>&1 || true
    fi
  fi
  [[ -x /usr/lib/cni/loopback ]] || die "/usr/lib/cni/loopback missing (containernetworking-plugins)"
}

tools() {
  log "tools: kube (multi-call $K8S_VERSION), etcd, metrics-server $METRICS_SERVER_VERSION (hack/tools.sh)"
  "$ROOT/hack/tools.sh" kube etcd metrics-server
  ln -sf kube "$BIN/kubectl"
  # The pause image and the image packer: small, built with the Go build cache every time.
  (cd "$HERE/tools" && GOWORK=off CGO_ENABLED=0 go build -ldflags "-s -w" -o "$STATE/bin/" ./pause ./mkimage)
}

# Files (SRC=/DST) for a binary plus, if it is dynamically linked, its loader and libraries.
image_files() {
  local bin=$1 dst=$2 lib
  echo "$bin=$dst"
  if ldd "$bin" >/dev/null 2>&1; then
    for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
      echo "$(readlink -f "$lib")=$lib"
    done
  fi
}

images() {
  mkdir -p "$STATE/images"
  local pause_tar="$STATE/images/pause.tar" ms_tar="$STATE/images/metrics-server.tar"
  if [[ ! -f $pause_tar || $STATE/bin/pause -nt $pause_tar ]]; then
    "$STATE/bin/mkimage" -tag "$PAUSE_IMAGE" -o "$pause_tar" -entrypoint /pause "$STATE/bin/pause=/pause"
  fi
  if [[ ! -f $ms_tar || $BIN/metrics-server -nt $ms_tar ]]; then
    # shellcheck disable=SC2046
    "$STATE/bin/mkimage" -tag "$METRICS_IMAGE" -o "$ms_tar" -entrypoint /metrics-server -user 65534:65534 \
      $(image_files "$BIN/metrics-server" /metrics-server)
  fi
}

import_images() {
  local tar ref
  for tar in "$STATE/images/pause.tar" "$STATE/images/metrics-server.tar"; do
    ref=$PAUSE_IMAGE; [[ $tar == *metrics* ]] && ref=$METRICS_IMAGE
    # Re-import when the tarball is newer than the last import.
    if [[ -f $tar.imported && ! $tar -nt $tar.imported ]] && ctr_ images ls -q | grep -qx "$ref"; then
      continue
    fi
    ctr_ images import --no-unpack=false "$tar" >/dev/null
    touch "$tar.imported"
  done
  log "images imported: $PAUSE_IMAGE, $METRICS_IMAGE"
}

ctr_() { ctr --address "$SOCK" -n k8s.io "$@"; }

# ---------------------------------------------------------------------------------------------
# certificates and kubeconfigs (openssl)

# sign NAME CN O CA [SAN]: a key and a certificate signed by CA (client+server usage).
sign() {
  local name=$1 cn=$2 o=$3 ca=$4 san=${5:-}
  [[ -f $PKI/$name.crt ]] && return
  local subj="/CN=$cn"; [[ -n $o ]] && subj="/O=$o$subj"
  openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    if [[ -n $san ]]; then echo "subjectAltName=$san"; fi
  } >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

ca() {
  local name=$1 cn=$2
  [[ -f $PKI/$name.crt ]] && return
  openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
  openssl req -x509 -new -key "$PKI/$name.key" -subj "/CN=$cn" -days 3650 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$PKI/$name.crt" 2>/dev/null
}

kubeconfig() {
  local name=$1 cert=$2 f="$KCFG/$1.conf"
  [[ -f $f ]] && return
  cat >"$f.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: obscura
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: $PKI/ca.crt
users:
- name: $name
  user:
    client-certificate: $PKI/$cert.crt
    client-key: $PKI/$cert.key
contexts:
- name: obscura
  context: {cluster: obscura, user: $name}
current-context: obscura
EOF
  mv "$f.tmp" "$f"
}

certs() {
  mkdir -p "$PKI" "$KCFG"
  chmod 700 "$PKI"
  local before; before=$(ls "$PKI" | wc -l)
  ca ca obscura-local-ca
  ca front-proxy-ca obscura-local-front-proxy-ca
  # 10.99.0.1: the relay on the node bridge of the multi-node mode (nodes.sh); a certificate made
  # before that mode existed is re-issued.
  if [[ -f $PKI/apiserver.crt ]] && ! openssl x509 -in "$PKI/apiserver.crt" -noout -ext subjectAltName 2>/dev/null | grep -q 'IP Address:10.99.0.1$\|IP Address:10.99.0.1,'; then
    rm -f "$PKI/apiserver.crt" "$PKI/apiserver.key"
  fi
  sign apiserver kube-apiserver "" ca \
    "DNS:localhost,DNS:$NODE,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1,IP:10.99.0.1"
  sign admin kubernetes-admin system:masters ca
  sign apiserver-kubelet-client kube-apiserver-kubelet-client system:masters ca
  sign kubelet "system:node:$NODE" system:nodes ca
  sign controller-manager system:kube-controller-manager "" ca
  sign scheduler system:kube-scheduler "" ca
  sign front-proxy-client front-proxy-client "" front-proxy-ca
  if [[ ! -f $PKI/sa.key ]]; then
    openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
    openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  fi
  kubeconfig admin admin
  kubeconfig controller-manager controller-manager
  kubeconfig scheduler scheduler
  kubeconfig kubelet kubelet
  [[ $(ls "$PKI" | wc -l) -ne $before ]] && log "certificates and kubeconfigs: $PKI, $KCFG"
  return 0
}

# ---------------------------------------------------------------------------------------------
# configuration files

configs() {
  mkdir -p "$STATE/cni/net.d" "$STATE/containerd" "$STATE/kubelet" "$RUN" "$LOGS" "$PIDS" "$STATE/pod-logs"
  cat >"$STATE/cni/net.d/10-loopback.conflist" <<'EOF'
{"cniVersion":"1.0.0","name":"loopback-only","plugins":[{"type":"loopback"}]}
EOF
  cat >"$STATE/containerd/config.toml" <<EOF
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$RUN/containerd.sock.ttrpc"

[debug]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # root here lacks CAP_SYS_RESOURCE: without this runc fails ("can't get final child's PID").
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
EOF
  cat >"$STATE/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$SOCK
makeIPTablesUtilChains: false
podLogsDir: $STATE/pod-logs
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
# Secret and ConfigMap volumes (the NATS accounts file the operator renders) reach pods in ~10 s.
syncFrequency: 10s
rotateCertificates: false
serverTLSBootstrap: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
EOF
}

# ---------------------------------------------------------------------------------------------
# processes

pid_of() { # pid of a component we started, if it is still running
  local f="$PIDS/$1.pid" pid
  [[ -f $f ]] || return 1
  pid=$(cat "$f")
  [[ -d /proc/$pid ]] && grep -qa -- "$STATE" "/proc/$pid/cmdline" 2>/dev/null && { echo "$pid"; return 0; }
  return 1
}

start() { # start NAME CMD...: once, in its own session, logging to $LOGS/NAME.log
  local name=$1; shift
  if pid_of "$name" >/dev/null; then
    log "$name: already running (pid $(pid_of "$name"))"
    return
  fi
  [[ -f $LOGS/$name.log ]] && mv -f "$LOGS/$name.log" "$LOGS/$name.log.1"
  setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS/$name.pid"
  log "$name: started (pid $!, log $LOGS/$name.log)"
}

wait_for() { # wait_for WHAT TIMEOUT CMD...
  local what=$1 timeout=$2; shift 2
  local end=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < end)) || die "$what not ready after ${timeout}s (logs: $LOGS)"
    sleep 0.5
  done
  log "$what: ready"
}

port_free_or_ours() { # refuse to start when another program holds one of our ports
  local port=$1 name=$2 pid
  pid=$(ss -Hltnp "sport = :$port" 2>/dev/null | grep -o 'pid=[0-9]*' | head -n1 | cut -d= -f2 || true)
  [[ -z $pid ]] && return 0
  [[ $(pid_of "$name" 2>/dev/null || true) == "$pid" ]] && return 0
  die "127.0.0.1:$port is used by pid $pid ($(cat /proc/"$pid"/comm 2>/dev/null)), not by this cluster's $name"
}

record_host_paths() { # remember which host paths existed before the first up
  [[ -f $STATE/created ]] && return
  local p
  for p in "${HOST_PATHS[@]}"; do [[ -e $p ]] || echo "$p"; done >"$STATE/created"
}

start_all() {
  port_free_or_ours 2379 etcd; port_free_or_ours 2380 etcd
  port_free_or_ours 6443 kube-apiserver
  port_free_or_ours 10257 kube-controller-manager; port_free_or_ours 10259 kube-scheduler
  port_free_or_ours 10250 kubelet
  record_host_paths

  start etcd "$BIN/etcd" --name obscura --data-dir "$STATE/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster obscura=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381 \
    --log-level warn
  start containerd /usr/bin/containerd --config "$STATE/containerd/config.toml"
  wait_for etcd 30 curl -fsS http://127.0.0.1:2379/health

  start kube-apiserver "$BIN/kube" kube-apiserver \
    --etcd-servers http://127.0.0.1:2379 \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port 6443 \
    --endpoint-reconciler-type none \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --authorization-mode Node,RBAC --anonymous-auth=false --allow-privileged=true \
    --enable-admission-plugins NodeRestriction \
    --client-ca-file "$PKI/ca.crt" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types Hostname \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" \
    --requestheader-allowed-names front-proxy-client \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --requestheader-group-headers X-Remote-Group --requestheader-username-headers X-Remote-User \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --profiling=false --event-ttl 1h
  wait_for containerd 30 ctr --address "$SOCK" version
  import_images &
  local import_pid=$!

  wait_for kube-apiserver 90 kubectl get --raw /readyz
  start kube-controller-manager "$BIN/kube" kube-controller-manager \
    --kubeconfig "$KCFG/controller-manager.conf" \
    --authentication-kubeconfig "$KCFG/controller-manager.conf" \
    --authorization-kubeconfig "$KCFG/controller-manager.conf" \
    --bind-address 127.0.0.1 --secure-port 10257 \
    --leader-elect=false --use-service-account-credentials=true --allocate-node-cidrs=false \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --root-ca-file "$PKI/ca.crt" --service-account-private-key-file "$PKI/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --horizontal-pod-autoscaler-sync-period 5s --profiling=false
  start kube-scheduler "$BIN/kube" kube-scheduler \
    --kubeconfig "$KCFG/scheduler.conf" \
    --authentication-kubeconfig "$KCFG/scheduler.conf" \
    --authorization-kubeconfig "$KCFG/scheduler.conf" \
    --bind-address 127.0.0.1 --secure-port 10259 --leader-elect=false --profiling=false

  wait "$import_pid" || die "image import failed"
  # Policies before the first pod: every pod is hostNetwork and talks to 127.0.0.1:6443.
  policies
  start kubelet "$BIN/kube" kubelet \
    --config "$STATE/kubelet/config.yaml" \
    --kubeconfig "$KCFG/kubelet.conf" \
    --root-dir "$STATE/kubelet/root" --cert-dir "$STATE/kubelet/pki" \
    --hostname-override "$NODE"
  # No --node-ip: the kubelet refuses a loopback node IP. The API server and metrics-server reach
  # the kubelet by the node's Hostname address, which resolves to 127.0.0.1.
}

policies() {
  local out
  out=$(kubectl apply -f "$HERE/manifests/policies.yaml" 2>&1) || die "admission policies: $out"
  log "admission policies: every pod hostNetwork, KUBERNETES_SERVICE_HOST=127.0.0.1:6443"
}

blackhole_route() {
  # Nothing may leave the machine for the (unserved) service network.
  if ! ip route show type blackhole | grep -q "^blackhole $SERVICE_CIDR"; then
    ip route add blackhole "$SERVICE_CIDR"
    log "route: blackhole $SERVICE_CIDR"
  fi
}

node_ready() {
  [[ $(kubectl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

metrics_server() {
  sed "s|@METRICS_IMAGE@|$METRICS_IMAGE|g" "$HERE/manifests/metrics-server.yaml" | kubectl apply -f - >/dev/null
  log "metrics-server: applied (127.0.0.1:4443, APIService v1beta1.metrics.k8s.io)"
}

up() {
  need_root
  (($(nodes_count) >= 2)) && die "a $(nodes_count)-node cluster is running: make cluster-down first"
  mkdir -p "$STATE/bin"
  log "up: state $STATE"
  prereqs
  tools
  certs
  configs
  images
  blackhole_route
  start_all
  wait_for "node $NODE Ready" 120 node_ready
  wait_for "default ServiceAccount" 60 kubectl -n default get serviceaccount default
  metrics_server
  log "cluster up in $((SECONDS - T0))s: export KUBECONFIG=$KCFG/admin.conf; kubectl is $BIN/kubectl"
  if [[ ${CLUSTER_WAIT_METRICS:-1} == 1 ]]; then
    local t=$SECONDS
    wait_for "metrics API (kubectl top node)" 180 kubectl top node "$NODE"
    log "metrics available $((SECONDS - t))s later"
  fi
}

# ---------------------------------------------------------------------------------------------
# status

status() {
  local name pid
  echo "components:"
  for name in etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet; do
    if pid=$(pid_of "$name"); then printf '  %-24s running (pid %s)\n' "$name" "$pid"
    else printf '  %-24s stopped\n' "$name"; fi
  done
  echo "health:"
  check() { if "${@:2}" >/dev/null 2>&1; then printf '  %-24s ok\n' "$1"; else printf '  %-24s FAIL\n' "$1"; fi; }
  check etcd curl -fsS http://127.0.0.1:2379/health
  check containerd ctr --address "$SOCK" version
  check kube-apiserver kubectl get --raw /readyz
  check kube-controller-manager curl -fsSk https://127.0.0.1:10257/healthz
  check kube-scheduler curl -fsSk https://127.0.0.1:10259/healthz
  check kubelet curl -fsS http://127.0.0.1:10248/healthz
  check metrics-server kubectl get --raw /apis/metrics.k8s.io/v1beta1/nodes
  check "route blackhole" sh -c "ip route show type blackhole | grep -q '^blackhole $SERVICE_CIDR'"
  if kubectl get --raw /readyz >/dev/null 2>&1; then
    echo "node:"; kubectl get nodes -o wide | sed 's/^/  /'
    echo "pods:"; kubectl get pods -A -o wide | sed 's/^/  /'
    echo "usage:"; kubectl top node 2>/dev/null | sed 's/^/  /' || echo "  (metrics not available yet)"
  fi
}

# ---------------------------------------------------------------------------------------------
# down

stop() { # stop NAME: SIGTERM, SIGKILL after 10 s
  local name=$1 pid i
  if ! pid=$(pid_of "$name"); then rm -f "$PIDS/$name.pid"; return; fi
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    [[ -d /proc/$pid ]] || break
    sleep 0.1
  done
  if [[ -d /proc/$pid ]]; then
    log "$name: still running after 10s, SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    while [[ -d /proc/$pid ]]; do sleep 0.1; done
  fi
  rm -f "$PIDS/$name.pid"
  log "$name: stopped"
}

# Processes of this cluster that are not in a pid file: containerd shims (started with our socket
# address) and whatever runs in the pods (in the kubepods cgroups).
stray_pids() {
  local p
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [[ $p == "$$" ]] && continue
    if grep -qa -- "$SOCK" "/proc/$p/cmdline" 2>/dev/null || grep -qs ':/kubepods' "/proc/$p/cgroup"; then
      echo "$p"
    fi
  done
}

pod_pids() { # processes running in the pods (kubepods cgroups)
  grep -ls ':/kubepods' /proc/[0-9]*/cgroup 2>/dev/null | cut -d/ -f3 || true
}

term_then_kill() { # SIGTERM the given pids, SIGKILL whatever still runs 10 s later
  local pids="$*" pid
  [[ -n $pids ]] || return 0
  for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 100); do
    pids=$(for pid in $pids; do [[ -d /proc/$pid ]] && echo "$pid"; done || true)
    [[ -z $pids ]] && return 0
    sleep 0.1
  done
  log "still running after 10s, SIGKILL: $(echo $pids)"
  for pid in $pids; do kill -KILL "$pid" 2>/dev/null || true; done
  sleep 0.2
}

remove_containers() { # stop every pod and container while containerd still runs
  pid_of containerd >/dev/null || return 0
  local ids id
  term_then_kill $(pod_pids)
  ids=$(ctr_ tasks ls -q 2>/dev/null || true)
  for id in $ids; do ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true; done
  for id in $(ctr_ containers ls -q 2>/dev/null || true); do ctr_ containers delete "$id" >/dev/null 2>&1 || true; done
  [[ -n $ids ]] && log "containers: removed $(echo "$ids" | wc -w) tasks"
  return 0
}

unmount_under() { # unmount everything mounted below one of the given directories, deepest first
  local mp prefix n=0
  local -a mps=()
  while read -r mp; do
    for prefix in "$@"; do
      [[ $mp == "$prefix" || $mp == "$prefix"/* ]] && mps+=("$mp")
    done
  done < <(awk '{print $5}' /proc/self/mountinfo | sed 's/\\040/ /g')
  ((${#mps[@]})) || return 0
  while read -r mp; do
    umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
    n=$((n + 1))
  done < <(printf '%s\n' "${mps[@]}" | awk '{print length, $0}' | sort -rn | cut -d' ' -f2-)
  log "unmounted $n mounts"
}

remove_cgroups() {
  local d n=0
  for d in /sys/fs/cgroup/*/kubepods; do
    [[ -d $d ]] || continue
    while read -r sub; do rmdir "$sub" 2>/dev/null && n=$((n + 1)); done < <(find "$d" -depth -type d)
  done
  ((n)) && log "cgroups: removed $n kubepods cgroups"
  for d in /sys/fs/cgroup/*/kubepods; do
    [[ -d $d ]] && log "WARNING: $d still present"
  done
  return 0
}

down() {
  need_root
  log "down: state $STATE"
  local nodes; nodes=$(nodes_count)
  ((nodes >= 2)) && nodes_down_processes "$nodes"
  stop kubelet
  remove_containers
  stop containerd
  stop kube-scheduler &
  stop kube-controller-manager &
  wait
  stop kube-apiserver
  stop etcd
  local strays
  strays=$(stray_pids)
  if [[ -n $strays ]]; then
    log "stray processes: $(echo $strays)"
    term_then_kill $strays
  fi
  ((nodes >= 2)) && nodes_down_network "$nodes"
  unmount_under "$STATE" /run/containerd /var/lib/kubelet
  remove_cgroups
  if ip route show type blackhole | grep -q "^blackhole $SERVICE_CIDR"; then
    ip route del blackhole "$SERVICE_CIDR" && log "route: removed blackhole $SERVICE_CIDR"
  fi
  if [[ -f $STATE/created ]]; then
    local p
    while read -r p; do
      [[ -n $p && -e $p ]] && rm -rf "$p" && log "removed $p"
    done <"$STATE/created"
    rm -f "$STATE/created"
  fi
  # Runtime state goes; certificates, kubeconfigs, built images and containerd's image store stay
  # (a later up is faster). --purge removes all of it.
  rm -rf "$STATE/etcd" "$STATE/kubelet/root" "$STATE/kubelet/pki" "$STATE/containerd/state" "$RUN" "$PIDS" "$STATE/pod-logs"
  if [[ ${1:-} == --purge ]]; then
    rm -rf "$STATE"
    log "purged $STATE"
  fi
  log "down in $((SECONDS - T0))s"
}

# shellcheck source=hack/cluster/nodes.sh
source "$HERE/nodes.sh"

case "${1:-}" in
  up) if ((NODES >= 2)); then nodes_up "$NODES"; else up; fi ;;
  down) shift; down "$@" ;;
  status) if (($(nodes_count) >= 2)); then nodes_status "$(nodes_count)"; else status; fi ;;
  *) echo "usage: $0 up|down [--purge]|status" >&2; exit 2 ;;
esac
