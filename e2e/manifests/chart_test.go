package manifests

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/obscura-iot/obscura/services/testenv"
)

const (
	certManagerGroup = "cert-manager.io"
	// chartNamespace runs the chart on a pod network under the restricted Pod Security level;
	// localNamespace runs it as on the local cluster (hostNetwork, docs/cluster.md).
	chartNamespace = "obscura-system"
	localNamespace = "obscura-local"
)

// chartCase is one way of installing the chart and what it must render.
type chartCase struct {
	name      string
	namespace string
	args      []string
	// want and absent: "Kind/name" of objects that must (not) be rendered.
	want, absent []string
	hostNetwork  bool
}

var chartCases = []chartCase{
	{
		name: "defaults", namespace: chartNamespace,
		args: []string{"--set", "vault.address=https://vault.vault.svc:8200"},
		want: []string{
			"Deployment/obscura-operator", "StatefulSet/obscura-nats", "Secret/obscura-nats-config", "Service/obscura-nats",
			"Secret/obscura-nats-operator", "Secret/obscura-nats-accounts", "Deployment/obscura-redis-integrator",
			"Service/obscura-redis-integrator", "Deployment/obscura-edge", "ConfigMap/obscura-edge", "Service/obscura-edge",
			"Secret/obscura-edge-tls", "NetworkPolicy/obscura-operator", "NetworkPolicy/obscura-nats",
			"NetworkPolicy/obscura-redis-integrator", "NetworkPolicy/obscura-edge", "NetworkPolicy/obscura-integrator",
			"NetworkPolicy/obscura-sddr-simulate",
		},
		absent: []string{"Certificate/obscura-edge", "Pod/obscura-smoke", "NetworkPolicy/obscura-sddr-mailbox"},
	},
	{
		name: "values-local", namespace: localNamespace, hostNetwork: true,
		args: []string{"-f", "charts/obscura/values-local.yaml", "--set", "tests.tokenSecret.name=smoke-token"},
		want: []string{
			"Deployment/obscura-redis-pda-proxy", "Deployment/obscura-redis-pda-db", "Secret/obscura-edge-tls",
			"Pod/obscura-smoke",
		},
		absent: []string{"NetworkPolicy/obscura-nats"},
	},
	{
		name: "nats cluster", namespace: chartNamespace,
		args: []string{"--set", "nats.cluster.replicas=3", "--set", "nats.jetstream.replicas=3"},
		want: []string{"StatefulSet/obscura-nats", "Secret/obscura-nats-config", "Service/obscura-nats-headless", "PodDisruptionBudget/obscura-nats"},
	},
	{
		name: "nats cluster on the node's network", namespace: localNamespace, hostNetwork: true,
		args: []string{"-f", "charts/obscura/values-local.yaml", "--set", "nats.cluster.replicas=3", "--set", "nats.jetstream.replicas=3"},
		want: []string{"StatefulSet/obscura-nats", "Secret/obscura-nats-config", "PodDisruptionBudget/obscura-nats"},
	},
	{
		name: "values-nodes", namespace: chartNamespace,
		args: []string{"-f", "charts/obscura/values-nodes.yaml"},
		want: []string{"StatefulSet/obscura-nats", "Service/obscura-nats-headless", "Deployment/obscura-redis-pda-proxy",
			"Deployment/obscura-redis-pda-db", "NetworkPolicy/obscura-nats", "NetworkPolicy/obscura-redis-pda-db"},
	},
	{
		name: "cert-manager", namespace: chartNamespace,
		args: []string{"--api-versions", "cert-manager.io/v1", "--set", "tests.tokenSecret.name=smoke-token",
			"--set-json", `redis.instances=[{"name":"integrator","port":6379},{"name":"pda-db","port":6380}]`},
		want: []string{
			"Certificate/obscura-edge", "Certificate/obscura-edge-ca", "Issuer/obscura-edge-ca", "Issuer/obscura-selfsigned",
			"Pod/obscura-smoke", "NetworkPolicy/obscura-redis-pda-db",
		},
		absent: []string{"Secret/obscura-edge-tls"},
	},
	{
		name: "sddr mailbox behind the edge", namespace: chartNamespace,
		args: []string{"--set", "edge.sddrMailbox.enabled=true",
			"--set-json", `redis.instances=[{"name":"integrator","port":6379},{"name":"sddr-mailbox","port":6382}]`},
		want: []string{"NetworkPolicy/obscura-sddr-mailbox", "NetworkPolicy/obscura-redis-sddr-mailbox", "Deployment/obscura-redis-sddr-mailbox",
			"ConfigMap/obscura-edge"},
	},
	{
		name: "cert-manager with an issuer", namespace: chartNamespace,
		args: []string{"--api-versions", "cert-manager.io/v1", "--set", "edge.tls.certManager.issuerRef.name=letsencrypt"},
		want: []string{"Certificate/obscura-edge"}, absent: []string{"Secret/obscura-edge-tls", "Issuer/obscura-selfsigned"},
	},
	{
		name: "cert-manager served but disabled", namespace: chartNamespace,
		args: []string{"--api-versions", "cert-manager.io/v1", "--set", "edge.tls.certManager.enabled=false"},
		want: []string{"Secret/obscura-edge-tls"}, absent: []string{"Certificate/obscura-edge"},
	},
}

// renderChart runs helm template for one case and decodes every object.
func renderChart(t *testing.T, c chartCase) (string, []*unstructured.Unstructured) {
	t.Helper()
	args := append([]string{"template", "obscura", "charts/obscura", "--namespace", c.namespace}, c.args...)
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(out)), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode rendered chart: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return out, objs
}

func TestRenderedChartAcceptedByAPIServer(t *testing.T) {
	for _, c := range chartCases {
		t.Run(c.name, func(t *testing.T) {
			out, objs := renderChart(t, c)
			names := map[string]bool{}
			for _, u := range objs {
				names[u.GetKind()+"/"+u.GetName()] = true
			}
			for _, w := range c.want {
				if !names[w] {
					t.Errorf("chart renders no %s", w)
				}
			}
			for _, a := range c.absent {
				if names[a] {
					t.Errorf("chart renders %s; want none", a)
				}
			}
			kinds := dryRunAll(t, out, c.namespace)
			for _, k := range []string{"Deployment", "StatefulSet", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Secret", "ConfigMap", "Service"} {
				if kinds[k] == 0 {
					t.Errorf("chart renders no %s (got %v)", k, kinds)
				}
			}
		})
	}
}

// TestChartPodsRestrictedAndLoopbackProbes checks every pod the chart renders against the
// restricted Pod Security Standard (minus hostNetwork in hostNetwork mode) plus a read-only
// root file system, and that on the node's network no probe lets the kubelet dial the node's
// InternalIP (httpGet/tcpSocket without host: 127.0.0.1), and fixed-port Deployments recreate.
func TestChartPodsRestrictedAndLoopbackProbes(t *testing.T) {
	for _, c := range chartCases {
		t.Run(c.name, func(t *testing.T) {
			_, objs := renderChart(t, c)
			pods := 0
			for _, u := range objs {
				spec, err := podSpecOf(u)
				if err != nil {
					t.Fatal(err)
				}
				if spec == nil {
					continue
				}
				pods++
				what := u.GetKind() + "/" + u.GetName()
				for _, problem := range restrictedProblems(spec, c.hostNetwork) {
					t.Errorf("%s: %s", what, problem)
				}
				if c.hostNetwork && u.GetKind() == "Deployment" {
					var d appsv1.Deployment
					if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
						t.Fatal(err)
					}
					if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
						t.Errorf("%s: strategy %q on the node's network; want Recreate (fixed ports)", what, d.Spec.Strategy.Type)
					}
				}
			}
			if pods < 4 {
				t.Errorf("found %d pod specs; want at least operator, nats, redis, edge", pods)
			}
		})
	}
}

func podSpecOf(u *unstructured.Unstructured) (*corev1.PodSpec, error) {
	var spec *corev1.PodSpec
	var err error
	switch u.GetKind() {
	case "Deployment":
		var d appsv1.Deployment
		err = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d)
		spec = &d.Spec.Template.Spec
	case "StatefulSet":
		var s appsv1.StatefulSet
		err = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &s)
		spec = &s.Spec.Template.Spec
	case "Pod":
		var p corev1.Pod
		err = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p)
		spec = &p.Spec
	case "DaemonSet", "Job", "CronJob", "ReplicaSet":
		return nil, fmt.Errorf("%s %s: add it to podSpecOf", u.GetKind(), u.GetName())
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("decode %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return spec, nil
}

// restrictedProblems lists how spec breaks the restricted profile (Pod Security Standards
// v1.37, https://kubernetes.io/docs/concepts/security/pod-security-standards/) or the chart's
// own rules (uid 65532, read-only root, loopback probes on the node's network).
func restrictedProblems(spec *corev1.PodSpec, hostNetwork bool) []string {
	var p []string
	if spec.HostNetwork != hostNetwork {
		p = append(p, fmt.Sprintf("hostNetwork %v; want %v", spec.HostNetwork, hostNetwork))
	}
	if hostNetwork && spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		p = append(p, fmt.Sprintf("dnsPolicy %q on the node's network; want ClusterFirstWithHostNet", spec.DNSPolicy))
	}
	if spec.HostPID || spec.HostIPC {
		p = append(p, "host PID/IPC namespace")
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			p = append(p, "hostPath volume "+v.Name)
		}
	}
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	containers := append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
	for _, c := range containers {
		sc := c.SecurityContext
		if sc == nil {
			p = append(p, c.Name+": no securityContext")
			continue
		}
		if !isTrue(sc.RunAsNonRoot) && !isTrue(psc.RunAsNonRoot) {
			p = append(p, c.Name+": runAsNonRoot not true")
		}
		uid := sc.RunAsUser
		if uid == nil {
			uid = psc.RunAsUser
		}
		if uid == nil || *uid != 65532 {
			p = append(p, c.Name+": runAsUser not 65532")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			p = append(p, c.Name+": allowPrivilegeEscalation not false")
		}
		if isTrue(sc.Privileged) {
			p = append(p, c.Name+": privileged")
		}
		if !isTrue(sc.ReadOnlyRootFilesystem) {
			p = append(p, c.Name+": readOnlyRootFilesystem not true")
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			p = append(p, c.Name+": capabilities must drop ALL and add none")
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = psc.SeccompProfile
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			p = append(p, c.Name+": seccompProfile not RuntimeDefault")
		}
		for _, port := range c.Ports {
			if port.HostPort != 0 && !hostNetwork {
				p = append(p, fmt.Sprintf("%s: hostPort %d", c.Name, port.HostPort))
			}
		}
		for kind, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
			if probe == nil || !hostNetwork {
				continue
			}
			if h := probe.HTTPGet; h != nil && h.Host != "127.0.0.1" {
				p = append(p, fmt.Sprintf("%s: %s httpGet probe without host: 127.0.0.1 (the kubelet would dial the node's InternalIP)", c.Name, kind))
			}
			if s := probe.TCPSocket; s != nil && s.Host != "127.0.0.1" {
				p = append(p, fmt.Sprintf("%s: %s tcpSocket probe without host: 127.0.0.1", c.Name, kind))
			}
			if probe.GRPC != nil {
				p = append(p, fmt.Sprintf("%s: %s grpc probe has no host field", c.Name, kind))
			}
		}
	}
	return p
}

func isTrue(b *bool) bool { return b != nil && *b }

// TestRenderedNATSConfigLoads checks the rendered nats-server configuration, with the chart's
// bootstrap accounts file in place of the operator's, with the real nats-server (-t).
func TestRenderedNATSConfigLoads(t *testing.T) {
	bin, err := testenv.Bin("nats-server")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chartCases[:2] {
		t.Run(c.name, func(t *testing.T) {
			_, objs := renderChart(t, c)
			dir := t.TempDir()
			var conf, accounts string
			for _, u := range objs {
				switch u.GetKind() + "/" + u.GetName() {
				case "Secret/obscura-nats-config":
					conf, _, _ = unstructured.NestedString(u.Object, "stringData", "obscura-nats-0.conf")
				case "Secret/obscura-nats-accounts":
					accounts, _, _ = unstructured.NestedString(u.Object, "stringData", "accounts.conf")
				}
			}
			if conf == "" || accounts == "" {
				t.Fatalf("nats.conf (%d bytes) or the bootstrap accounts.conf (%d bytes) not rendered", len(conf), len(accounts))
			}
			for _, want := range []string{"mqtt {", "jetstream {", "server_name:", `include "accounts/accounts.conf"`, "system_account: SYS"} {
				if !strings.Contains(conf, want) {
					t.Errorf("nats.conf lacks %q", want)
				}
			}
			// The only rewrite: the JetStream store directory.
			conf = strings.ReplaceAll(conf, `"/data/jetstream"`, fmt.Sprintf("%q", filepath.Join(dir, "jetstream")))
			if err := os.MkdirAll(filepath.Join(dir, "accounts"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(conf), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "accounts", "accounts.conf"), []byte(accounts), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "-t", "-c", filepath.Join(dir, "nats.conf")).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "is valid") {
				t.Fatalf("nats-server -t: %v\n%s\n--- nats.conf\n%s\n--- accounts.conf\n%s", err, out, conf, accounts)
			}
		})
	}
}
