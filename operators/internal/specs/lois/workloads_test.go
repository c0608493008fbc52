package lois

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	loisv1 "github.com/obscura-iot/obscura/operators/api/lois/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/specstest"
)

func sample(t *testing.T) *loisv1.HeaderGateway {
	t.Helper()
	g := &loisv1.HeaderGateway{}
	specstest.ReadSample(t, "lois_v1alpha1_headergateway.yaml", g)
	g.Namespace = "obscura"
	return g
}

// TestCloudInterfaceOnHostNetwork: on a host network the cloud interfaces listen on the
// node's loopback, each replica at its ordinal's ports (lois --ordinal-ports), declare no
// container port, serve metrics where the operator reads them, and devices reach replica 0.
func TestCloudInterfaceOnHostNetwork(t *testing.T) {
	g := sample(t)
	pl := Platform{Image: "lois:test", Runtime: specs.Runtime{NATSURL: "nats://127.0.0.1:4222", HostNetwork: true}}
	ss := CloudInterface(g, pl)
	spec := ss.Spec.Template.Spec
	if !spec.HostNetwork || len(spec.Containers[0].Ports) != 0 {
		t.Fatalf("hostNetwork %v, ports %v", spec.HostNetwork, spec.Containers[0].Ports)
	}
	env := map[string]string{}
	for _, e := range spec.Containers[0].Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("%s set twice", e.Name)
		}
		env[e.Name] = e.Value
	}
	for k, want := range map[string]string{
		specs.Env(FlagWireListen): "127.0.0.1:7400", specs.EnvMetricsAddr: "127.0.0.1:8400",
		specs.Env(FlagOrdinalPorts): "true", specs.Env(FlagNATSURL): "nats://127.0.0.1:4222",
	} {
		if env[k] != want {
			t.Errorf("%s = %q, want %q", k, env[k], want)
		}
	}
	if got := MetricsEndpoint(g, pl, "192.0.2.1", 2); got != "127.0.0.1:8402" {
		t.Errorf("metrics of replica 2 at %s", got)
	}
	if got := RegistrarConfigMap(g, pl).Data[specs.Env(FlagCloudWire)]; got != "127.0.0.1:7400" {
		t.Errorf("devices send to %s", got)
	}
	// The gateway's own NATS URL wins over the operator's.
	g.Spec.Registrar.NATSURL = "nats://127.0.0.1:14222"
	for _, e := range CloudInterface(g, pl).Spec.Template.Spec.Containers[0].Env {
		if e.Name == specs.Env(FlagNATSURL) && e.Value != g.Spec.Registrar.NATSURL {
			t.Errorf("NATS URL %s", e.Value)
		}
	}
}

// TestValidate: what the reconciler refuses beyond CEL.
func TestValidate(t *testing.T) {
	if err := Validate(sample(t)); err != nil {
		t.Fatalf("the sample: %v", err)
	}
	for name, mut := range map[string]func(*loisv1.HeaderGateway){
		"one server, two wires": func(g *loisv1.HeaderGateway) {
			s := g.Spec.Services[0]
			s.Name, s.Port, s.ServerWire = "api", 9090, "10.0.2.9:7402"
			g.Spec.Services = append(g.Spec.Services, s)
		},
		"lifetime too short":      func(g *loisv1.HeaderGateway) { g.Spec.Keystreams.Lifetime = metav1.Duration{Duration: 100e9} },
		"sid is the unified port": func(g *loisv1.HeaderGateway) { g.Spec.Services[0].Port = 443 },
		"bad backend":             func(g *loisv1.HeaderGateway) { g.Spec.Services[0].Backend.Address = "::1" },
		"netns, a wire on another's replica's metrics port": func(g *loisv1.HeaderGateway) {
			netns(g)
			g.Spec.Server.Replicas = 2 // 127.0.0.1:8402 and 8403
			g.Spec.Services = append(g.Spec.Services, loisv1.Service{Name: "api", Port: 9090, NetworkNamespace: "api-ns",
				Backend: loisv1.Backend{Address: "10.200.0.11", Port: 80}, ServerWire: "127.0.0.1:8403"})
		},
		"pinned SIs, external": func(g *loisv1.HeaderGateway) {
			g.Spec.Server.NodeSelector = map[string]loisv1.LabelValue{"kubernetes.io/hostname": "a"}
		},
		"netns, a wire on another's metrics port": func(g *loisv1.HeaderGateway) {
			netns(g)
			g.Spec.Services = append(g.Spec.Services, loisv1.Service{Name: "api", Port: 9090, NetworkNamespace: "api-ns",
				Backend: loisv1.Backend{Address: "10.200.0.11", Port: 80}, ServerWire: "127.0.0.1:8402"})
		},
		"netns, a loopback wire on a cloud interface's port": func(g *loisv1.HeaderGateway) {
			netns(g)
			g.Spec.Cloud.Replicas = 3 // 127.0.0.1:7400-7402 and 8400-8402
		},
		"netns, no room for the metrics port": func(g *loisv1.HeaderGateway) { netns(g); g.Spec.Services[0].ServerWire = "127.0.0.1:65000" },
	} {
		g := sample(t)
		mut(g)
		if err := Validate(g); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// netns makes the sample run its server interface (placement netns, wire 127.0.0.1:7402).
func netns(g *loisv1.HeaderGateway) {
	g.Spec.Server.Placement, g.Spec.Server.DeviceNetworks = loisv1.ServerPlacementNetns, []string{"10.99.0.0/24"}
	g.Spec.Services[0].NetworkNamespace, g.Spec.Services[0].ServerWire = "web-ns", "127.0.0.1:7402"
}

// TestServerInterfaceMetricsAndPinning: the operator's SI serves /metrics beside its wire
// (serverWire's port + 1000, where the controller reads it), and both roles' pods get the
// node selector and tolerations of their part of the spec.
func TestServerInterfaceMetricsAndPinning(t *testing.T) {
	g := sample(t)
	netns(g)
	if err := Validate(g); err != nil {
		t.Fatal(err)
	}
	g.Spec.Server.NodeSelector = map[string]loisv1.LabelValue{"kubernetes.io/hostname": "node-a"}
	g.Spec.Server.Tolerations = []corev1.Toleration{{Key: "servers", Operator: corev1.TolerationOpExists}}
	g.Spec.Cloud.NodeSelector = map[string]loisv1.LabelValue{"edge": "true"}
	pl := Platform{Image: "lois:test", Runtime: specs.Runtime{NATSURL: "nats://127.0.0.1:4222"}}
	sis := ServerInterfaces(g, pl)
	if len(sis) != 1 {
		t.Fatalf("%d server interfaces", len(sis))
	}
	pod := sis[0].Spec.Template.Spec
	metrics := ""
	for _, e := range pod.Containers[0].Env {
		if e.Name == specs.EnvMetricsAddr {
			metrics = e.Value
		}
	}
	if metrics != "127.0.0.1:8402" || ServerMetricsEndpoint(g.Spec.Services[0], 0) != metrics || ServerMetricsEndpoint(g.Spec.Services[0], 3) != "127.0.0.1:8405" {
		t.Errorf("SI metrics on %q, read at %q", metrics, ServerMetricsEndpoint(g.Spec.Services[0], 0))
	}
	if pod.NodeSelector["kubernetes.io/hostname"] != "node-a" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "servers" {
		t.Errorf("SI pinning: %v %v", pod.NodeSelector, pod.Tolerations)
	}
	ci := CloudInterface(g, pl).Spec.Template.Spec
	if ci.NodeSelector["edge"] != "true" || len(ci.NodeSelector) != 1 || len(ci.Tolerations) != 0 {
		t.Errorf("CI pinning: %v %v", ci.NodeSelector, ci.Tolerations)
	}
}

// TestEveryFieldReachesTheRoles: each spec field becomes the flag the roles read — in the cloud
// interface's environment and in the registrar's settings for devices and server interfaces.
func TestEveryFieldReachesTheRoles(t *testing.T) {
	g := sample(t)
	g.Spec.CloudAddress, g.Spec.UnifiedPort, g.Spec.MTU, g.Spec.Mode = "198.18.7.7", 8443, 1280, loisv1.ModePaper
	g.Spec.Keystreams = loisv1.Keystreams{PerEpoch: 512, Lifetime: metav1.Duration{Duration: 30 * 60e9},
		SafetyMargin: metav1.Duration{Duration: 30e9}, Grace: metav1.Duration{Duration: 90e9}}
	g.Spec.Registrar.Cloud = "west"
	g.Spec.Cloud.Replicas, g.Spec.Server.Replicas = 3, 2
	pl := Platform{Image: "lois:test", Runtime: specs.Runtime{NATSURL: "nats://nats:4222"}}
	ci := map[string]string{}
	for _, e := range CloudInterface(g, pl).Spec.Template.Spec.Containers[0].Env {
		ci[e.Name] = e.Value
	}
	reg := RegistrarConfigMap(g, pl).Data
	both := map[string]string{
		specs.Env(FlagCIP): "198.18.7.7", specs.Env(FlagUnifiedPort): "8443", specs.Env(FlagMTU): "1280",
		specs.Env(FlagPaperMode): "true", specs.Env(FlagSafetyMargin): "30s", specs.Env(FlagGrace): "1m30s",
		specs.Env(FlagCloud): "west",
	}
	for k, want := range both {
		if ci[k] != want || reg[k] != want {
			t.Errorf("%s: ci %q, registrar %q, want %q", k, ci[k], reg[k], want)
		}
	}
	for k, want := range map[string]string{
		specs.Env(FlagN): "512", specs.Env(FlagLifetime): "30m0s", specs.Env(FlagPartitions): "2",
		specs.Env(FlagWaitFor): "edge-lois-ci-0,edge-lois-ci-1,edge-lois-ci-2,si-8080-0,si-8080-1",
		specs.Env(FlagSTP):     "true", specs.Env(FlagSTPQ): "0.1",
	} {
		if reg[k] != want {
			t.Errorf("registrar %s = %q, want %q", k, reg[k], want)
		}
	}
	if r := *CloudInterface(g, pl).Spec.Replicas; r != 3 {
		t.Errorf("%d cloud interfaces", r)
	}
	// Padding off: the senders are told so, and no STP parameter is rendered.
	g.Spec.Padding = loisv1.Padding{Policy: loisv1.PaddingOff}
	reg = RegistrarConfigMap(g, pl).Data
	if reg[specs.Env(FlagSTP)] != "false" || reg[specs.Env(FlagSTPPeriod)] != "" || reg[specs.Env(FlagSTPQ)] != "" {
		t.Errorf("padding off: %v", reg)
	}
	// Hardened mode (the default) sets no --paper-mode anywhere.
	g.Spec.Mode = ""
	if _, ok := RegistrarConfigMap(g, pl).Data[specs.Env(FlagPaperMode)]; ok {
		t.Error("hardened mode renders --paper-mode")
	}
}
