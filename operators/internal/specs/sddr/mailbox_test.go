package sddr

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sddrv1 "github.com/obscura-iot/obscura/operators/api/sddr/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/specstest"
)

func sample(t *testing.T) *sddrv1.EncounterMailbox {
	m := &sddrv1.EncounterMailbox{}
	specstest.ReadSample(t, "sddr_v1alpha1_encountermailbox.yaml", m)
	m.Namespace = "ns"
	return m
}

// TestMailboxOnHostNetwork: on a node without a pod network the replicas share the node's
// API port (127.0.0.1, SO_REUSEPORT), declare no host port (a second replica still
// schedules), and are probed by `sddr probe` reading the address file; the endpoint is the
// node's loopback.
func TestMailboxOnHostNetwork(t *testing.T) {
	m := sample(t)
	pl := Platform{Image: "sddr:test", Runtime: specs.Runtime{HostNetwork: true}}
	d := Mailbox(m, pl)
	p := d.Spec.Template.Spec
	c := p.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if !p.HostNetwork || len(c.Ports) != 0 {
		t.Fatalf("hostNetwork %v ports %v", p.HostNetwork, c.Ports)
	}
	if env[specs.Env(FlagListenAddr)] != "127.0.0.1:8090" || env[specs.Env(FlagReusePort)] != "true" ||
		env[specs.EnvMetricsAddr] != "127.0.0.1:0" || env[specs.EnvAddrFile] == "" {
		t.Errorf("env %v", env)
	}
	if pr := c.ReadinessProbe.Exec; pr == nil || pr.Command[0] != Binary || pr.Command[1] != "probe" {
		t.Errorf("readiness probe %+v", c.ReadinessProbe)
	}
	if got := Endpoint(m, pl); got != "http://127.0.0.1:8090" {
		t.Errorf("endpoint %s", got)
	}
}

// TestValidateMirrorsTheService: what an older API server could let through, Validate
// refuses with the bounds `sddr mailbox` enforces.
func TestValidateMirrorsTheService(t *testing.T) {
	if err := Validate(sample(t)); err != nil {
		t.Fatalf("sample: %v", err)
	}
	for name, mut := range map[string]func(*sddrv1.EncounterMailbox){
		"ttl":      func(m *sddrv1.EncounterMailbox) { m.Spec.MessageTTL = metav1.Duration{Duration: 721 * 3600 * 1e9} },
		"size":     func(m *sddrv1.EncounterMailbox) { m.Spec.MaxMessageBytes = sddrv1.MaxMessageBytes + 1 },
		"redis":    func(m *sddrv1.EncounterMailbox) { m.Spec.Redis.Address = "redis:0" },
		"messages": func(m *sddrv1.EncounterMailbox) { m.Spec.MaxMessages = 10001 },
	} {
		m := sample(t)
		mut(m)
		if Validate(m) == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	m := sample(t)
	m.Spec.Resources = &corev1.ResourceRequirements{}
	if got := Mailbox(m, Platform{Image: "x"}).Spec.Template.Spec.Containers[0].Resources; len(got.Requests) != 0 {
		t.Errorf("spec.resources not applied: %v", got)
	}
}
