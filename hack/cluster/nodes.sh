# Multi-node mode of the local cluster (sourced by hack/cluster/cluster.sh; docs/cluster.md
# "Multi-node"). `cluster.sh up` with NODES>=2 runs the control plane on the host as in the
# single-node mode (127.0.0.1, no kubelet on the host) plus NODES worker nodes, each in a network
# namespace of its own with its own containerd, kubelet and kube-proxy:
#
#   host  bridge obscura0 10.99.0.1/24, relay 10.99.0.1:6443 -> the API server on 127.0.0.1:6443
#   node  i (1..NODES): netns obscura-n<i>, veth obscura-v<i> (host, on the bridge) <-> eth0
#         10.99.0.<10+i>/24, pod bridge cni0 10.244.<i>.1/24 (CNI bridge + host-local), routes to
#         the other nodes' pod subnets via their node addresses, no default route
#   services 10.96.0.0/24 (kube-proxy, iptables mode, in each node namespace)
#
# Every range exists only in those namespaces and on that bridge. The host holds blackhole routes
# for the pod range 10.244.0.0/16 (its per-node /24 routes are more specific), the service range
# and the probe range 198.51.100.0/24 (TEST-NET-2, what `status` dials to show that nothing
# leaves); no node namespace has a default route; nothing is NATed; the host does not forward
# (its ip_forward is left as it is). NetworkPolicies: kube-network-policies (a DaemonSet). With
# NODES_PLATFORM=1 (the platform across the nodes, e2e-nodes.sh),
# cluster DNS too: CoreDNS (cluster.local only, nothing forwarded) behind kube-system/kube-dns at
# $DNS_IP; without it pods get no nameserver.

NODES_DIR="$STATE/nodes"
NODES_COUNT_FILE="$NODES_DIR/count"
BRIDGE=obscura0
HOST_IP=10.99.0.1
NODE_NET=10.99.0.0/24
POD_CIDR=10.244.0.0/16
PROBE_CIDR=198.51.100.0/24
PROBE_ADDR=198.51.100.1:80
NETCHECK_IMAGE=localhost/obscura/netcheck:v1
KNP_VERSION=v0.8.0
KNP_IMAGE=localhost/obscura/kube-network-policies:$KNP_VERSION
COREDNS_VERSION=v1.15.0
# Tagged by the binary's content (nodes_images): a node's containerd keeps its images across
# `down`, and an import is skipped when the tag is there.
COREDNS_IMAGE=localhost/obscura/coredns:$COREDNS_VERSION
DNS_IP=10.96.0.10
nodes_dns() { [[ ${NODES_PLATFORM:-0} == 1 ]]; }

node_name() { echo "obscura-n$1"; }
node_ns() { echo "obscura-n$1"; }
node_ip() { echo "10.99.0.$((10 + $1))"; }
node_pod_subnet() { echo "10.244.$1.0/24"; }
node_dir() { echo "$NODES_DIR/n$1"; }
node_sock() { echo "$(node_dir "$1")/run/containerd.sock"; }
node_cgroup() { echo "obscura-n$1"; }
in_node() { local i=$1; shift; nsenter --net="/run/netns/$(node_ns "$i")" "$@"; }
nctr() { local i=$1; shift; ctr --address "$(node_sock "$i")" -n k8s.io "$@"; }

nodes_count() { # the node count of the running (or last) multi-node cluster, 0 if none
  if [[ -f $NODES_COUNT_FILE ]]; then cat "$NODES_COUNT_FILE"; else echo 0; fi
}

# ---------------------------------------------------------------------------------------------
# tools, certificates, configuration, images

nodes_tools() {
  "$ROOT/hack/tools.sh" kube-proxy kube-network-policies $(nodes_dns && echo coredns)
  (cd "$HERE/tools" && GOWORK=off CGO_ENABLED=0 go build -ldflags "-s -w" -o "$STATE/bin/" ./relay ./netcheck)
}

nodes_certs() {
  local i n=$1 name
  sign kube-proxy system:kube-proxy "" ca
  for ((i = 1; i <= n; i++)); do
    name=$(node_name "$i")
    sign "kubelet-n$i" "system:node:$name" system:nodes ca "DNS:$name,IP:$(node_ip "$i")"
    node_kubeconfig "kubelet-n$i" "kubelet-n$i"
  done
  node_kubeconfig kube-proxy kube-proxy
}

node_kubeconfig() { # like kubeconfig, but pointing at the relay on the node bridge
  local f="$KCFG/node-$1.conf"
  [[ -f $f ]] && return
  kubeconfig "$1" "$2"
  sed "s|https://127.0.0.1:6443|https://$HOST_IP:6443|" "$KCFG/$1.conf" >"$f"
  rm -f "$KCFG/$1.conf"
}

nodes_configs() {
  local i n=$1 d
  for ((i = 1; i <= n; i++)); do
    d=$(node_dir "$i")
    mkdir -p "$d/cni/net.d" "$d/cni/ipam" "$d/containerd" "$d/kubelet" "$d/run" "$d/pod-logs"
    cat >"$d/cni/net.d/10-obscura.conflist" <<EOF
{"cniVersion":"1.0.0","name":"obscura","plugins":[{"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":false,"hairpinMode":true,
 "ipam":{"type":"host-local","dataDir":"$d/cni/ipam","ranges":[[{"subnet":"$(node_pod_subnet "$i")","gateway":"10.244.$i.1"}]],"routes":[{"dst":"0.0.0.0/0"}]}}]}
EOF
    # The single-node containerd config with this node's paths and CNI config.
    sed -e "s|$STATE/containerd/|$d/containerd/|g" -e "s|$RUN/|$d/run/|g" -e "s|$STATE/cni/net.d|$d/cni/net.d|g" \
      "$STATE/containerd/config.toml" >"$d/containerd/config.toml"
    cat >"$d/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 0.0.0.0
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
# Every node's pods under a cgroup root of its own (all kubelets share the host's hierarchies).
cgroupRoot: /$(node_cgroup "$i")
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$(node_sock "$i")
makeIPTablesUtilChains: false
podLogsDir: $d/pod-logs
clusterDomain: cluster.local
# No host resolver (outside the cluster's ranges); with NODES_PLATFORM=1 pods name only the
# cluster's CoreDNS ($DNS_IP, cluster.local, forwards nothing), else no nameserver at all.
clusterDNS: [$(nodes_dns && echo "$DNS_IP")]
resolvConf: ""
serializeImagePulls: false
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
  done
}

nodes_images() {
  local nc_tar="$STATE/images/netcheck.tar" knp_tar="$STATE/images/kube-network-policies.tar" dns_tar="$STATE/images/coredns.tar"
  if [[ ! -f $nc_tar || $STATE/bin/netcheck -nt $nc_tar ]]; then
    "$STATE/bin/mkimage" -tag "$NETCHECK_IMAGE" -o "$nc_tar" -entrypoint /netcheck -user 65534:65534 "$STATE/bin/netcheck=/netcheck"
  fi
  if [[ ! -f $knp_tar || $BIN/kube-network-policies -nt $knp_tar ]]; then
    "$STATE/bin/mkimage" -tag "$KNP_IMAGE" -o "$knp_tar" -entrypoint /kube-network-policies \
      "$BIN/kube-network-policies=/kube-network-policies"
  fi
  nodes_dns || return 0
  COREDNS_IMAGE=localhost/obscura/coredns:$COREDNS_VERSION-$(sha256sum "$BIN/coredns" | cut -c1-12)
  if [[ ! -f $dns_tar || $BIN/coredns -nt $dns_tar || $(cat "$dns_tar.tag" 2>/dev/null) != "$COREDNS_IMAGE" ]]; then
    "$STATE/bin/mkimage" -tag "$COREDNS_IMAGE" -o "$dns_tar" -entrypoint /coredns "$BIN/coredns=/coredns"
    echo "$COREDNS_IMAGE" >"$dns_tar.tag"
  fi
}

node_import_images() { # node_import_images I: the cluster's images into node I's containerd
  local i=$1 tar ref
  for tar in pause metrics-server netcheck kube-network-policies $(nodes_dns && echo coredns); do
    case $tar in
      pause) ref=$PAUSE_IMAGE ;; metrics-server) ref=$METRICS_IMAGE ;;
      netcheck) ref=$NETCHECK_IMAGE ;; kube-network-policies) ref=$KNP_IMAGE ;;
      coredns) ref=$COREDNS_IMAGE ;;
    esac
    nctr "$i" images ls -q | grep -qx "$ref" && continue
    nctr "$i" images import --no-unpack=false "$STATE/images/$tar.tar" >/dev/null
  done
}

# ---------------------------------------------------------------------------------------------
# network

blackhole() { # blackhole CIDR: add the host route once
  ip route show type blackhole | grep -q "^blackhole $1" && return
  ip route add blackhole "$1"
  log "route: blackhole $1"
}

nodes_network() {
  local i j n=$1 ns
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
    ip addr add "$HOST_IP/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    log "bridge $BRIDGE $HOST_IP/24"
  fi
  blackhole "$SERVICE_CIDR"
  blackhole "$POD_CIDR"
  blackhole "$PROBE_CIDR"
  for ((i = 1; i <= n; i++)); do
    ns=$(node_ns "$i")
    if ! ip netns list | grep -qw "^$ns"; then
      ip netns add "$ns"
      ip link add "obscura-v$i" type veth peer name eth0 netns "$ns"
      ip link set "obscura-v$i" master "$BRIDGE" up
      ip -n "$ns" link set lo up
      ip -n "$ns" addr add "$(node_ip "$i")/24" dev eth0
      ip -n "$ns" link set eth0 up
      # Pods' traffic is routed by the node; bridged pod traffic passes netfilter (kube-proxy,
      # kube-network-policies). Both settings are per network namespace.
      in_node "$i" sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
      for ((j = 1; j <= n; j++)); do
        ((j == i)) || ip -n "$ns" route add "$(node_pod_subnet "$j")" via "$(node_ip "$j")"
      done
      # Services: kube-proxy rewrites them in this namespace; an unserved service address goes
      # to the host, which blackholes it. No default route.
      ip -n "$ns" route add "$SERVICE_CIDR" via "$HOST_IP"
      log "node $i: netns $ns, eth0 $(node_ip "$i"), pods $(node_pod_subnet "$i")"
    fi
    ip route replace "$(node_pod_subnet "$i")" via "$(node_ip "$i")"
  done
}

nodes_cgroups() { # a cgroup root per node in every v1 hierarchy (the kubelet needs it to exist)
  local i n=$1 h d
  for ((i = 1; i <= n; i++)); do
    for h in /sys/fs/cgroup/*/; do
      [[ -f $h/cgroup.procs ]] || continue
      d="$h$(node_cgroup "$i")"
      [[ -d $d ]] && continue
      mkdir "$d"
      if [[ -f $h/cpuset.cpus ]]; then
        cat "$h/cpuset.cpus" >"$d/cpuset.cpus"
        cat "$h/cpuset.mems" >"$d/cpuset.mems"
      fi
    done
  done
}

# ---------------------------------------------------------------------------------------------
# up

nodes_up() {
  local n=$1 i import_pids=()
  need_root
  [[ $n -ge 2 && $n -le 9 ]] || die "NODES must be between 2 and 9"
  local running; running=$(nodes_count)
  if [[ $running -ne 0 && $running -ne $n ]]; then
    die "a $running-node cluster is running: make cluster-down first"
  fi
  if [[ $running -eq 0 ]] && pid_of kubelet >/dev/null; then
    die "the single-node cluster is running: make cluster-down first"
  fi
  mkdir -p "$STATE/bin" "$NODES_DIR"
  log "up: $n nodes, state $STATE"
  prereqs
  tools
  nodes_tools
  certs
  nodes_certs "$n"
  configs
  nodes_configs "$n"
  images
  nodes_images
  record_host_paths
  echo "$n" >"$NODES_COUNT_FILE"
  nodes_network "$n"
  nodes_cgroups "$n"

  port_free_or_ours 2379 etcd; port_free_or_ours 2380 etcd
  port_free_or_ours 6443 kube-apiserver
  port_free_or_ours 10257 kube-controller-manager; port_free_or_ours 10259 kube-scheduler
  start etcd "$BIN/etcd" --name obscura --data-dir "$STATE/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster obscura=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381 \
    --log-level warn
  for ((i = 1; i <= n; i++)); do
    start "containerd-n$i" nsenter --net="/run/netns/$(node_ns "$i")" /usr/bin/containerd --config "$(node_dir "$i")/containerd/config.toml"
  done
  wait_for etcd 30 curl -fsS http://127.0.0.1:2379/health
  # As in single-node mode, but advertised on the node bridge: the `kubernetes` Service's
  # endpoint is the relay $HOST_IP:6443 (lease reconciler), and the API server reaches the
  # kubelets by their InternalIP on the bridge.
  start kube-apiserver "$BIN/kube" kube-apiserver \
    --etcd-servers http://127.0.0.1:2379 \
    --bind-address 127.0.0.1 --advertise-address "$HOST_IP" --secure-port 6443 \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --authorization-mode Node,RBAC --anonymous-auth=false --allow-privileged=true \
    --enable-admission-plugins NodeRestriction \
    --client-ca-file "$PKI/ca.crt" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" \
    --requestheader-allowed-names front-proxy-client \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --requestheader-group-headers X-Remote-Group --requestheader-username-headers X-Remote-User \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --profiling=false --event-ttl 1h
  start relay "$STATE/bin/relay" -listen "$HOST_IP:6443" -to 127.0.0.1:6443 -tag "$STATE"
  for ((i = 1; i <= n; i++)); do
    wait_for "containerd-n$i" 30 ctr --address "$(node_sock "$i")" version
    node_import_images "$i" &
    import_pids+=($!)
  done
  wait_for kube-apiserver 90 kubectl get --raw /readyz
  start kube-controller-manager "$BIN/kube" kube-controller-manager \
    --kubeconfig "$KCFG/controller-manager.conf" \
    --authentication-kubeconfig "$KCFG/controller-manager.conf" \
    --authorization-kubeconfig "$KCFG/controller-manager.conf" \
    --bind-address 127.0.0.1 --secure-port 10257 \
    --leader-elect=false --use-service-account-credentials=true --allocate-node-cidrs=false \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --root-ca-file "$PKI/ca.crt" --service-account-private-key-file "$PKI/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" --cluster-cidr "$POD_CIDR" \
    --horizontal-pod-autoscaler-sync-period 5s --profiling=false
  start kube-scheduler "$BIN/kube" kube-scheduler \
    --kubeconfig "$KCFG/scheduler.conf" \
    --authentication-kubeconfig "$KCFG/scheduler.conf" \
    --authorization-kubeconfig "$KCFG/scheduler.conf" \
    --bind-address 127.0.0.1 --secure-port 10259 --leader-elect=false --profiling=false
  for i in "${import_pids[@]}"; do wait "$i" || die "image import failed"; done
  log "images imported into every node: $PAUSE_IMAGE, $NETCHECK_IMAGE, $KNP_IMAGE$(nodes_dns && echo ", $COREDNS_IMAGE")"
  for ((i = 1; i <= n; i++)); do
    local d; d=$(node_dir "$i")
    start "kubelet-n$i" nsenter --net="/run/netns/$(node_ns "$i")" "$BIN/kube" kubelet \
      --config "$d/kubelet/config.yaml" \
      --kubeconfig "$KCFG/node-kubelet-n$i.conf" \
      --root-dir "$d/kubelet/root" --cert-dir "$d/kubelet/pki" \
      --hostname-override "$(node_name "$i")" --node-ip "$(node_ip "$i")"
    start "kube-proxy-n$i" nsenter --net="/run/netns/$(node_ns "$i")" "$BIN/kube-proxy" \
      --kubeconfig "$KCFG/node-kube-proxy.conf" \
      --hostname-override "$(node_name "$i")" --bind-address "$(node_ip "$i")" \
      --cluster-cidr "$POD_CIDR" --proxy-mode iptables --conntrack-max-per-core 0 \
      --metrics-bind-address 127.0.0.1:10249 --healthz-bind-address 127.0.0.1:10256 \
      --v 1
  done
  for ((i = 1; i <= n; i++)); do
    wait_for "node $(node_name "$i") Ready" 120 node_ready_name "$(node_name "$i")"
  done
  sed -e "s|@KNP_IMAGE@|$KNP_IMAGE|g" -e "s|@API_HOST@|$HOST_IP|g" "$HERE/manifests/kube-network-policies.yaml" |
    kubectl apply -f - >/dev/null
  log "kube-network-policies $KNP_VERSION: applied (DaemonSet)"
  wait_for "kube-network-policies on every node" 120 knp_ready "$n"
  if nodes_dns; then
    sed -e "s|@COREDNS_IMAGE@|$COREDNS_IMAGE|g" -e "s|@API_HOST@|$HOST_IP|g" -e "s|@DNS_IP@|$DNS_IP|g" "$HERE/manifests/coredns.yaml" |
      kubectl apply -f - >/dev/null
    log "CoreDNS $COREDNS_VERSION: applied (kube-system/kube-dns $DNS_IP)"
    wait_for "cluster DNS (CoreDNS ready)" 120 dns_ready
  fi
  wait_for "default ServiceAccount" 60 kubectl -n default get serviceaccount default
  log "cluster up ($n nodes) in $((SECONDS - T0))s: export KUBECONFIG=$KCFG/admin.conf; kubectl is $BIN/kubectl"
}

node_ready_name() {
  [[ $(kubectl get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

dns_ready() {
  [[ $(kubectl -n kube-system get deployment coredns -o jsonpath='{.status.readyReplicas}' 2>/dev/null) -ge 1 ]]
}

knp_ready() {
  [[ $(kubectl -n kube-system get daemonset kube-network-policies -o jsonpath='{.status.numberReady}' 2>/dev/null) == "$1" ]]
}

# ---------------------------------------------------------------------------------------------
# status

nodes_status() {
  local n=$1 i name pid ns
  echo "mode: $n nodes (network namespaces obscura-n1..obscura-n$n on bridge $BRIDGE $HOST_IP/24)"
  echo "components:"
  for name in etcd kube-apiserver relay kube-controller-manager kube-scheduler; do
    if pid=$(pid_of "$name"); then printf '  %-24s running (pid %s)\n' "$name" "$pid"
    else printf '  %-24s stopped\n' "$name"; fi
  done
  for ((i = 1; i <= n; i++)); do
    for name in "containerd-n$i" "kubelet-n$i" "kube-proxy-n$i"; do
      if pid=$(pid_of "$name"); then printf '  %-24s running (pid %s)\n' "$name" "$pid"
      else printf '  %-24s stopped\n' "$name"; fi
    done
  done
  echo "health:"
  check() { if "${@:2}" >/dev/null 2>&1; then printf '  %-40s ok\n' "$1"; else printf '  %-40s FAIL\n' "$1"; fi; }
  check etcd curl -fsS http://127.0.0.1:2379/health
  check kube-apiserver kubectl get --raw /readyz
  check "relay $HOST_IP:6443" kubectl --server "https://$HOST_IP:6443" get --raw /readyz
  check kube-controller-manager curl -fsSk https://127.0.0.1:10257/healthz
  check kube-scheduler curl -fsSk https://127.0.0.1:10259/healthz
  if kubectl -n kube-system get deployment coredns >/dev/null 2>&1; then check "cluster DNS (CoreDNS $DNS_IP)" dns_ready; fi
  for ((i = 1; i <= n; i++)); do
    check "containerd-n$i" ctr --address "$(node_sock "$i")" version
    check "kubelet-n$i" in_node "$i" curl -fsS http://127.0.0.1:10248/healthz
    check "kube-proxy-n$i" in_node "$i" curl -fsS http://127.0.0.1:10256/healthz
  done
  echo "isolation (nothing leaves):"
  local cidr
  for cidr in "$SERVICE_CIDR" "$POD_CIDR" "$PROBE_CIDR"; do
    check "host: blackhole $cidr" sh -c "ip route show type blackhole | grep -q '^blackhole $cidr'"
  done
  check "host: ip_forward unchanged ($(cat /proc/sys/net/ipv4/ip_forward))" true
  for ((i = 1; i <= n; i++)); do
    ns=$(node_ns "$i")
    check "$ns: no default route" sh -c "! ip -n $ns route show default | grep -q ."
    check "$ns: no route to ${PROBE_ADDR%:*}" sh -c "! ip -n $ns route get ${PROBE_ADDR%:*} >/dev/null 2>&1"
    check "$ns: no NAT but kube-proxy's" sh -c "! nsenter --net=/run/netns/$ns iptables -t nat -S POSTROUTING | grep -v KUBE | grep -q -e MASQUERADE -e SNAT"
  done
  if kubectl get --raw /readyz >/dev/null 2>&1; then
    # A pod on every node dials the probe address (TEST-NET-2, blackholed on the host): the
    # connection must fail.
    for ((i = 1; i <= n; i++)); do
      local out pod="egress-probe-n$i"
      kubectl -n kube-system delete pod "$pod" --ignore-not-found --wait=true >/dev/null 2>&1
      out=$(kubectl -n kube-system run "$pod" --image "$NETCHECK_IMAGE" --image-pull-policy Never --restart Never \
        --overrides "{\"spec\":{\"nodeName\":\"$(node_name "$i")\"}}" --command -- /netcheck dial "$PROBE_ADDR" 3 2>&1 >/dev/null) || true
      local phase=""
      for _ in $(seq 60); do
        phase=$(kubectl -n kube-system get pod "$pod" -o jsonpath='{.status.phase}' 2>/dev/null)
        [[ $phase == Succeeded || $phase == Failed ]] && break
        sleep 0.5
      done
      out=$(kubectl -n kube-system logs "$pod" 2>/dev/null | head -n1)
      if [[ $phase == Failed && $out == closed:* ]]; then
        printf '  %-40s ok (%s)\n' "pod on $(node_name "$i") -> $PROBE_ADDR" "$out"
      else
        printf '  %-40s FAIL (phase %s: %s)\n' "pod on $(node_name "$i") -> $PROBE_ADDR" "$phase" "$out"
      fi
      kubectl -n kube-system delete pod "$pod" --wait=false >/dev/null 2>&1 || true
    done
    echo "nodes:"; kubectl get nodes -o wide | sed 's/^/  /'
    echo "pods:"; kubectl get pods -A -o wide | sed 's/^/  /'
  fi
}

# ---------------------------------------------------------------------------------------------
# down

node_pod_pids() { # processes in node I's pods (its cgroup root)
  grep -ls ":/$(node_cgroup "$1")/" /proc/[0-9]*/cgroup 2>/dev/null | cut -d/ -f3 || true
}

nodes_down_processes() { # before the control plane stops
  local n=$1 i ids id
  for ((i = 1; i <= n; i++)); do stop "kube-proxy-n$i" & done
  for ((i = 1; i <= n; i++)); do stop "kubelet-n$i" & done
  wait
  for ((i = 1; i <= n; i++)); do
    term_then_kill $(node_pod_pids "$i")
    if pid_of "containerd-n$i" >/dev/null; then
      ids=$(nctr "$i" tasks ls -q 2>/dev/null || true)
      for id in $ids; do nctr "$i" tasks delete -f "$id" >/dev/null 2>&1 || true; done
      for id in $(nctr "$i" containers ls -q 2>/dev/null || true); do nctr "$i" containers delete "$id" >/dev/null 2>&1 || true; done
      [[ -n $ids ]] && log "node $i: removed $(echo "$ids" | wc -w) tasks"
    fi
    stop "containerd-n$i" &
  done
  wait
  stop relay
}

nodes_stray_pids() {
  local n=$1 i p
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [[ $p == "$$" ]] && continue
    for ((i = 1; i <= n; i++)); do
      if grep -qa -- "$(node_sock "$i")" "/proc/$p/cmdline" 2>/dev/null || grep -qs ":/$(node_cgroup "$i")/" "/proc/$p/cgroup"; then
        echo "$p"
        break
      fi
    done
  done
}

nodes_down_network() { # after every process is gone
  local n=$1 i ns h d cidr strays
  strays=$(nodes_stray_pids "$n")
  if [[ -n $strays ]]; then
    log "stray node processes: $(echo $strays)"
    term_then_kill $strays
  fi
  # Pod network namespaces containerd made (/run/netns/cni-*) that hold one of our pod addresses.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-' || true); do
    if ip -n "$ns" -4 addr 2>/dev/null | grep -q 'inet 10\.244\.'; then
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
  unmount_under "$NODES_DIR"
  for ((i = 1; i <= n; i++)); do
    for h in /sys/fs/cgroup/*/; do
      d="$h$(node_cgroup "$i")"
      [[ -d $d ]] || continue
      find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
      [[ -d $d ]] && log "WARNING: $d still present"
    done
    ns=$(node_ns "$i")
    ip netns list | grep -qw "^$ns" && ip netns del "$ns" && log "netns $ns: removed"
    ip link del "obscura-v$i" 2>/dev/null || true
    ip route del "$(node_pod_subnet "$i")" 2>/dev/null || true
    rm -rf "$(node_dir "$i")/run" "$(node_dir "$i")/kubelet/root" "$(node_dir "$i")/kubelet/pki" \
      "$(node_dir "$i")/containerd/state" "$(node_dir "$i")/pod-logs" "$(node_dir "$i")/cni/ipam"
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE" && log "bridge $BRIDGE: removed"; fi
  for cidr in "$POD_CIDR" "$PROBE_CIDR"; do
    if ip route show type blackhole | grep -q "^blackhole $cidr"; then
      ip route del blackhole "$cidr" && log "route: removed blackhole $cidr"
    fi
  done
  rm -f "$NODES_COUNT_FILE"
}
