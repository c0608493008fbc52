package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPolicyMatrix (issue 20 item 4) runs only on the multi-node cluster (make e2e-cluster NODES=3,
// which sets OBSCURA_E2E_CLUSTER_NODES): the chart's NetworkPolicies, rendered by helm from
// charts/obscura and applied as they are, enforced by kube-network-policies on a real pod network.
//
// The servers are netcheck listeners carrying the labels and ports of the chart's workloads
// (the Redis of the integrator, of the PDA proxy and of the PDA database, NATS, the integrator's
// gateway) and one unlabelled listener no policy selects; the clients carry the labels of the
// trust domains' workloads in their own namespaces (an integrator coordinator and the edge in the
// release namespace, a vendor's workload, a PDA proxy, a PDA database shard, a pod of no domain).
// Servers and clients are spread over the nodes (most pairs cross the node bridge, some stay on
// one node's pod bridge; each line of the report says which), and the integrator's Redis is also
// dialled through a ClusterIP Service (kube-proxy). Each pair is dialled from the client pod and must be refused
// or accepted as the policies say; the unlabelled listener (open to all) proves that a refusal is
// the policy's and not a broken network. What it does not cover: the real workloads (the platform
// is not installed here) and the operator's own NetworkPolicies (PPS).
func TestPolicyMatrix(t *testing.T) {
	nodes := skipUnlessMultiNode(t)
	e := newEnv(t)
	defer e.writeReport()
	const rel = "matrix"
	ns := "obscura-matrix"
	nsVendor, nsProxy, nsDB, nsOther := ns+"-vendor", ns+"-pda-proxy", ns+"-pda-db", ns+"-other"
	all := []string{ns, nsVendor, nsProxy, nsDB, nsOther}
	deleteAll := func() {
		args := append([]string{"delete", "namespace", "--ignore-not-found", "--wait=true", "--timeout=120s"}, all...)
		if out, err := e.try("kubectl", args...); err != nil {
			t.Logf("cleanup: %v %s", err, out)
		}
	}
	deleteAll()
	defer deleteAll()
	for _, n := range all {
		e.run("kubectl", "create", "namespace", n)
	}

	// The chart's policies, rendered for three Redis instances (one per domain that has one).
	rendered := e.run("helm", "template", rel, filepath.Join(e.root, "charts/obscura"), "-n", ns,
		"--set", "networkPolicies.enabled=true",
		"--set-json", `redis.instances=[{"name":"integrator","port":6379},{"name":"pda-proxy","port":6380},{"name":"pda-db","port":6381}]`,
		"--show-only", "templates/networkpolicies.yaml")
	policies := filepath.Join(e.dir, "policies.yaml")
	if err := os.WriteFile(policies, []byte(rendered), 0o600); err != nil {
		t.Fatal(err)
	}
	e.run("kubectl", "apply", "-n", ns, "-f", policies)
	t.Logf("chart NetworkPolicies applied:\n%s", e.run("kubectl", "get", "networkpolicy", "-n", ns))

	chart := func(component string) map[string]string {
		return map[string]string{"app.kubernetes.io/name": "obscura", "app.kubernetes.io/instance": rel, "app.kubernetes.io/component": component}
	}
	workload := func(name, instance, component string) map[string]string {
		return map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/instance": instance,
			"app.kubernetes.io/component": component, "app.kubernetes.io/managed-by": "obscura-operator"}
	}
	node := func(i int) string { return fmt.Sprintf("obscura-n%d", i%nodes+1) }
	// Servers and clients spread over the nodes; the report says which pairs cross nodes.
	servers := []matrixPod{
		{name: "redis-integrator", ns: ns, labels: chart("redis-integrator"), ports: []int{6379}, node: node(0)},
		{name: "redis-pda-proxy", ns: ns, labels: chart("redis-pda-proxy"), ports: []int{6380}, node: node(1)},
		{name: "redis-pda-db", ns: ns, labels: chart("redis-pda-db"), ports: []int{6381}, node: node(2)},
		{name: "nats", ns: ns, labels: chart("nats"), ports: []int{4222, 1883}, node: node(0)},
		{name: "gateway", ns: ns, labels: workload("mohito", "home", "gateway"), ports: []int{7443}, node: node(1)},
		{name: "open", ns: nsOther, labels: map[string]string{"obscura-matrix": "open"}, ports: []int{8080}, node: node(2)},
	}
	clients := []matrixPod{
		{name: "coordinator", ns: ns, labels: workload("mohito", "home", "coordinator"), node: node(1)},
		{name: "edge", ns: ns, labels: chart("edge"), node: node(2)},
		{name: "vendor", ns: nsVendor, labels: workload("mohito", "acme", "vendor"), node: node(1)},
		{name: "pda-proxy", ns: nsProxy, labels: workload("pda", "scaling", "proxy"), node: node(2)},
		{name: "pda-db-shard", ns: nsDB, labels: workload("pda", "scaling", "db-shard"), node: node(1)},
		{name: "stranger", ns: nsOther, labels: map[string]string{"obscura-matrix": "stranger"}, node: node(1)},
		{name: "pps-garbler", ns: nsOther, labels: workload("pps", "parking", "garbler"), node: node(2)},
	}
	for _, p := range append(append([]matrixPod{}, servers...), clients...) {
		e.matrixPod(p)
	}
	ips := map[string]string{}
	for _, p := range append(append([]matrixPod{}, servers...), clients...) {
		e.run("kubectl", "wait", "-n", p.ns, "pod/"+p.name, "--for=condition=Ready", "--timeout=120s")
		ips[p.name] = strings.TrimSpace(e.run("kubectl", "get", "pod", "-n", p.ns, p.name, "-o", "jsonpath={.status.podIP}"))
		for _, port := range p.ports { // listening (pod loopback: no policy involved)
			e.run("kubectl", "exec", "-n", p.ns, p.name, "--", "/netcheck", "dial", fmt.Sprintf("127.0.0.1:%d", port), "2")
		}
	}
	t.Logf("pods:\n%s", e.run("kubectl", "get", "pods", "-o", "wide", "-A", "-l", "app.kubernetes.io/managed-by in (obscura-operator)"))
	nsOf, nodeOf := map[string]string{}, map[string]string{}
	for _, p := range append(append([]matrixPod{}, servers...), clients...) {
		nsOf[p.name], nodeOf[p.name] = p.ns, p.node
	}
	// A ClusterIP Service in front of the integrator's Redis: kube-proxy rewrites the service
	// address in the client's node, and the policy still decides on the pods.
	svc := map[string]any{"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": "redis-integrator", "namespace": ns},
		"spec": map[string]any{"selector": chart("redis-integrator"),
			"ports": []any{map[string]any{"port": 6379, "targetPort": 6379}}}}
	b, err := json.Marshal(svc)
	if err != nil {
		t.Fatal(err)
	}
	svcFile := filepath.Join(e.dir, "service.json")
	if err := os.WriteFile(svcFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	e.run("kubectl", "apply", "-f", svcFile)
	ips["svc/redis-integrator"] = strings.TrimSpace(e.run("kubectl", "get", "service", "-n", ns, "redis-integrator", "-o", "jsonpath={.spec.clusterIP}"))
	nodeOf["svc/redis-integrator"] = nodeOf["redis-integrator"]

	cases := []struct {
		from, to string
		port     int
		allow    bool
		why      string
	}{
		{"coordinator", "redis-integrator", 6379, true, "the integrator's roles use its Redis"},
		{"vendor", "redis-integrator", 6379, false, "a vendor's workload never reaches the integrator's Redis"},
		{"pda-proxy", "redis-integrator", 6379, false, "the PDA proxy domain never reaches the integrator's Redis"},
		{"stranger", "redis-integrator", 6379, false, "a pod of no domain never reaches the integrator's Redis"},
		{"pda-proxy", "redis-pda-proxy", 6380, true, "the PDA proxy uses its Redis"},
		{"pda-db-shard", "redis-pda-proxy", 6380, false, "a PDA database shard never reaches the proxy's Redis"},
		{"vendor", "redis-pda-proxy", 6380, false, "a vendor's workload never reaches the proxy's Redis"},
		{"pda-db-shard", "redis-pda-db", 6381, true, "a PDA database shard uses the database's Redis"},
		{"pda-proxy", "redis-pda-db", 6381, false, "the PDA proxy never reaches the database's Redis"},
		{"coordinator", "redis-pda-db", 6381, false, "the integrator never reaches the database's Redis"},
		{"vendor", "nats", 4222, true, "operator workloads of any namespace are NATS clients"},
		{"stranger", "nats", 4222, false, "a pod of no domain is no NATS client"},
		{"pps-garbler", "nats", 4222, false, "the PPS garbler holds no NATS credentials and never reaches NATS"},
		{"stranger", "nats", 1883, true, "MQTT (devices) from anywhere"},
		{"edge", "gateway", 7443, true, "the edge reaches the integrator's gateway"},
		{"vendor", "gateway", 7443, false, "a vendor's workload never reaches the integrator's gateway"},
		{"stranger", "gateway", 7443, false, "a pod of no domain never reaches the integrator's gateway"},
		{"coordinator", "svc/redis-integrator", 6379, true, "through the Service (kube-proxy): the integrator's roles"},
		{"vendor", "svc/redis-integrator", 6379, false, "through the Service (kube-proxy): never a vendor's workload"},
		{"nats", "open", 8080, false, "NATS has no egress but DNS (and its routes)"},
		{"redis-integrator", "open", 8080, false, "a Redis has no egress at all"},
		{"stranger", "open", 8080, true, "control: no policy selects either pod"},
		{"vendor", "open", 8080, true, "control: the vendor's workload has no egress policy"},
		{"coordinator", "open", 8080, true, "control: the integrator's policy restricts ingress only"},
	}
	var lines []string
	for _, c := range cases {
		addr := fmt.Sprintf("%s:%d", ips[c.to], c.port)
		got := e.dial(nsOf[c.from], c.from, addr, c.allow)
		verdict := map[bool]string{true: "accepted", false: "refused"}
		where := "across nodes"
		if nodeOf[c.from] == nodeOf[c.to] {
			where = "same node"
		}
		line := fmt.Sprintf("%-16s -> %-20s %5d  %-12s want %-8s got %-8s (%s)", c.from, c.to, c.port, where, verdict[c.allow], verdict[got], c.why)
		lines = append(lines, line)
		if got != c.allow {
			t.Errorf("%s", line)
		}
	}
	t.Logf("policy matrix (%d nodes):\n%s", nodes, strings.Join(lines, "\n"))
	e.report.Notes = append(e.report.Notes, "policy matrix: "+strings.Join(lines, "; "))
}

type matrixPod struct {
	name, ns, node string
	labels         map[string]string
	ports          []int
}

// matrixPod creates a netcheck pod: a listener on its ports (a client listens on 9 to stay up).
func (e *env) matrixPod(p matrixPod) {
	e.t.Helper()
	ports := []string{}
	for _, port := range p.ports {
		ports = append(ports, strconv.Itoa(port))
	}
	if len(ports) == 0 {
		ports = []string{"9999"}
	}
	pod := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": p.name, "namespace": p.ns, "labels": p.labels},
		"spec": map[string]any{
			"nodeName":                      p.node,
			"terminationGracePeriodSeconds": 1,
			"automountServiceAccountToken":  false,
			"containers": []any{map[string]any{
				"name": "netcheck", "image": "localhost/obscura/netcheck:v1", "imagePullPolicy": "Never",
				"command": append([]string{"/netcheck", "listen"}, ports...),
				"securityContext": map[string]any{"runAsNonRoot": true, "allowPrivilegeEscalation": false,
					"capabilities": map[string]any{"drop": []string{"ALL"}}},
			}},
		},
	}
	b, err := json.Marshal(pod)
	if err != nil {
		e.t.Fatal(err)
	}
	f := filepath.Join(e.dir, p.ns+"-"+p.name+".json")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		e.t.Fatal(err)
	}
	e.run("kubectl", "apply", "-f", f)
}

// dial connects from the client pod to addr and reports whether the connection was accepted.
// An expected acceptance is retried for up to 20 s (the engine learns new pods from the API);
// an expected refusal is tried three times and counts as accepted if any try got through.
func (e *env) dial(ns, pod, addr string, wantOpen bool) bool {
	e.t.Helper()
	tries := 3
	if wantOpen {
		tries = 10
	}
	for i := 0; i < tries; i++ {
		out, err := e.try("kubectl", "exec", "-n", ns, pod, "--", "/netcheck", "dial", addr, "2")
		if err == nil && strings.TrimSpace(out) == "open" {
			return true
		}
		if wantOpen {
			time.Sleep(time.Second)
		}
	}
	return false
}

// skipUnlessMultiNode skips t unless it runs on the multi-node local cluster (make e2e-cluster
// NODES=3 sets OBSCURA_E2E_CLUSTER_NODES), and returns the number of nodes.
func skipUnlessMultiNode(t *testing.T) int {
	t.Helper()
	nodes, _ := strconv.Atoi(os.Getenv("OBSCURA_E2E_CLUSTER_NODES"))
	if os.Getenv("OBSCURA_E2E_CLUSTER") != "1" || nodes < 2 {
		t.Skip("needs the multi-node local cluster: make e2e-cluster NODES=3")
	}
	return nodes
}
