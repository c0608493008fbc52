package pps

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ppsv1 "github.com/obscura-iot/obscura/operators/api/pps/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/specstest"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
)

var platform = Platform{Image: "obscura/pps:dev",
	Runtime: specs.Runtime{ImagePullPolicy: corev1.PullIfNotPresent, NATSURL: "nats://nats.obscura-system.svc:4222", VaultAddress: "https://vault.vault.svc:8200"}}

// sample reads config/samples' SecurePipeline as the API server would default it.
func sample(t *testing.T) *ppsv1.SecurePipeline {
	t.Helper()
	p := &ppsv1.SecurePipeline{}
	specstest.ReadSample(t, "pps_v1alpha1_securepipeline.yaml", p)
	p.Namespace, p.UID = "lax", "5d2a1c3e-0000-4000-8000-000000000001"
	p.Spec.Broker.Redis.Address, p.Spec.Garbler.Redis.Address = DefaultRedis, DefaultRedis
	p.Spec.Garbler.Replicas = 1
	p.Spec.Garbler.Keys.SecretRef.IdentityKey, p.Spec.Garbler.Keys.SecretRef.SealKey = "identity.key", "seal.key"
	return p
}

func password(user string) []byte { return []byte("not-a-real-password-of-" + user) }

func TestBrokerDomainGolden(t *testing.T) {
	p := sample(t)
	cm, err := PipelinesConfigMap(p, BrokerDomain)
	if err != nil {
		t.Fatal(err)
	}
	h := ConfigHash(cm)
	secret := NATSSecret(p, "365067f8c601416a57c9db1d7dcd0515", password)
	data := secret.Data
	secret.Data = nil
	specstest.Golden(t, "broker_domain.yaml", cm, ServiceAccount(p, BrokerDomain), secret, Broker(p, platform, h), BrokerService(p))
	// The Secret's entries, sorted here: YAML's "natural" key order is not stable for hex.
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + ": " + string(data[k]) + "\n")
	}
	specstest.GoldenText(t, "broker_nats_secret.txt", b.String())
}

func TestGarblerDomainGolden(t *testing.T) {
	p := sample(t)
	cm, err := PipelinesConfigMap(p, GarblerDomain)
	if err != nil {
		t.Fatal(err)
	}
	h := ConfigHash(cm)
	specstest.Golden(t, "garbler_domain.yaml", cm, ServiceAccount(p, GarblerDomain), Garbler(p, platform, h), GarblerService(p), GarblerNetworkPolicy(p))
}

// TestHostNetworkGolden is what the local cluster runs (docs/cluster.md): both parties on the
// node's loopback, the garbler on the pipeline's own port rather than 7443 (the Mohito
// gateway's), the broker dialling it there while checking the Service name its certificate
// carries, and the broker's metrics on the pipeline's fixed port, which the operator scrapes.
// e2e/pps runs these two pods' containers as processes.
func TestHostNetworkGolden(t *testing.T) {
	p := sample(t)
	cm, err := PipelinesConfigMap(p, BrokerDomain)
	if err != nil {
		t.Fatal(err)
	}
	h := ConfigHash(cm)
	pl := platform
	pl.HostNetwork = true
	b, g := Broker(p, pl, h), Garbler(p, pl, h)
	specstest.Golden(t, "host_network.yaml", cm, b, g)

	grpc, metrics := HostPorts(p)
	if grpc == GarblerPort || grpc == metrics || grpc < hostPortBase || metrics >= hostPortBase+2*hostPortPairs {
		t.Fatalf("host ports %d, %d", grpc, metrics)
	}
	env := func(c corev1.Container) map[string]string {
		m := map[string]string{}
		for _, e := range c.Env {
			m[e.Name] = e.Value
		}
		return m
	}
	be, ge := env(b.Spec.Template.Spec.Containers[0]), env(g.Spec.Template.Spec.Containers[0])
	for name, want := range map[string]string{
		specs.Env(FlagListen): "127.0.0.1:" + strconv.Itoa(grpc),
	} {
		if ge[name] != want {
			t.Errorf("garbler %s=%q, want %q", name, ge[name], want)
		}
	}
	for name, want := range map[string]string{
		specs.Env(FlagGarblerAddr):       "127.0.0.1:" + strconv.Itoa(grpc),
		specs.Env(FlagGarblerServerName): GarblerHost(p),
		specs.EnvMetricsAddr:             "127.0.0.1:" + strconv.Itoa(metrics),
		specs.EnvHealthAddr:              "127.0.0.1:0",
	} {
		if be[name] != want {
			t.Errorf("broker %s=%q, want %q", name, be[name], want)
		}
	}
	other := p.DeepCopy()
	other.Namespace = "sfo"
	if g2, _ := HostPorts(other); g2 == grpc {
		t.Errorf("pipelines lax/%s and sfo/%s share port %d", p.Name, p.Name, grpc)
	}
}

// TestGarblerWithVaultTransit: with Vault keys the garbler logs in with its own service
// account (the only token it gets) and names its Transit keys; no key file is mounted.
func TestGarblerWithVaultTransit(t *testing.T) {
	p := sample(t)
	p.Spec.Garbler.Keys = ppsv1.GarblerKeys{Vault: &ppsv1.TransitKeys{Role: "pps-garbler", IdentityKey: "garbler-identity", SealKey: "garbler-seal"}}
	p.Spec.Garbler.Redis.PasswordSecret = nil
	d := Garbler(p, platform, "h")
	specstest.Golden(t, "garbler_vault.yaml", d)
	if !*d.Spec.Template.Spec.AutomountServiceAccountToken {
		t.Error("the garbler needs its service account token to log in to Vault")
	}
}

// TestGarblerHoldsNoNATSCredentials is spec §10 #10 on the operator's side: nothing of the
// garbler's pod names NATS — no variable, no mounted Secret — in either key mode.
func TestGarblerHoldsNoNATSCredentials(t *testing.T) {
	p := sample(t)
	vault := sample(t)
	vault.Spec.Garbler.Keys = ppsv1.GarblerKeys{Vault: &ppsv1.TransitKeys{Role: "r", IdentityKey: "i", SealKey: "s"}}
	for _, p := range []*ppsv1.SecurePipeline{p, vault} {
		spec := Garbler(p, platform, "h").Spec.Template.Spec
		for _, c := range spec.Containers {
			for _, e := range c.Env {
				if strings.Contains(e.Name, "NATS") || strings.Contains(e.Value, "nats") {
					t.Errorf("garbler variable %s=%q", e.Name, e.Value)
				}
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					t.Errorf("garbler variable %s from Secret %s", e.Name, e.ValueFrom.SecretKeyRef.Name)
				}
			}
			for _, m := range c.VolumeMounts {
				if m.MountPath == specs.NATSDir {
					t.Errorf("garbler mounts %s", m.MountPath)
				}
			}
		}
		for _, v := range spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == NATSSecretName(p) {
				t.Errorf("garbler mounts the pipeline's NATS Secret")
			}
		}
	}
}

// TestTrustDomainsStaySeparate: each domain's objects live in its namespace, and no pod of
// one domain references a Secret or ConfigMap of the other.
func TestTrustDomainsStaySeparate(t *testing.T) {
	p := sample(t)
	b, g := Broker(p, platform, "h"), Garbler(p, platform, "h")
	if b.Namespace != "lax" || g.Namespace != "pps-garbler" || GarblerService(p).Namespace != "pps-garbler" || GarblerNetworkPolicy(p).Namespace != "pps-garbler" {
		t.Fatalf("namespaces: broker %s, garbler %s", b.Namespace, g.Namespace)
	}
	secrets := func(spec corev1.PodSpec) []string {
		var out []string
		for _, v := range spec.Volumes {
			if v.Secret != nil {
				out = append(out, v.Secret.SecretName)
			}
		}
		return out
	}
	bs, gs := secrets(b.Spec.Template.Spec), secrets(g.Spec.Template.Spec)
	for _, s := range bs {
		if slices.Contains(gs, s) {
			t.Errorf("Secret %s mounted in both domains", s)
		}
	}
	if !slices.Contains(bs, BrokerTLSSecret(p)) || !slices.Contains(gs, GarblerTLSSecret(p)) || !slices.Contains(gs, "pps-garbler-keys") {
		t.Errorf("broker mounts %v, garbler %v", bs, gs)
	}
	if b.Spec.Template.Spec.ServiceAccountName == g.Spec.Template.Spec.ServiceAccountName {
		t.Error("one service account for both domains")
	}
}

// TestPipelinesFileIsWhatTheServicesRead: the ConfigMap holds a pipelines file the
// services' own reader accepts, with every spec field carried over.
func TestPipelinesFileIsWhatTheServicesRead(t *testing.T) {
	p := sample(t)
	cm, err := PipelinesConfigMap(p, GarblerDomain)
	if err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/pipelines.json"
	if err := writeFile(path, cm.Data[PipelinesKey]); err != nil {
		t.Fatal(err)
	}
	f, err := contract.ReadPipelines(path)
	if err != nil {
		t.Fatalf("the services refuse the operator's pipelines file: %v", err)
	}
	if len(f.Pipelines) != 1 {
		t.Fatalf("%d pipelines", len(f.Pipelines))
	}
	got := f.Pipelines[0]
	if got.Name != "lax/parking-daily" || got.Mode != contract.ModeFaithful || got.Source != p.Spec.Source ||
		got.Window.Duration != 5*time.Minute || got.Schedule.Duration != 24*time.Hour || got.SeedTTL.Duration != 26*time.Hour ||
		len(got.Publishers) != 9 || got.Publishers[8].Topic != "lax/lot-9/occupied" || len(got.Subscribers) != 1 {
		t.Errorf("pipeline %+v", got)
	}
	// The consistency check is carried over (unset: the broker's default).
	if strings.Contains(cm.Data[PipelinesKey], `"check"`) {
		t.Errorf("no check set, but one rendered: %s", cm.Data[PipelinesKey])
	}
	p.Spec.Check = contract.CheckOPRF
	if cm, err := PipelinesConfigMap(p, BrokerDomain); err != nil || !strings.Contains(cm.Data[PipelinesKey], `"check": "oprf"`) {
		t.Errorf("check oprf rendered as %q (%v)", cm.Data[PipelinesKey], err)
	}
	p.Spec.Check = ""
	// Hardened mode (H1, D21) is carried over as is.
	p.Spec.Mode = ppsv1.ModeHardened
	if cm, err := PipelinesConfigMap(p, BrokerDomain); err != nil || !strings.Contains(cm.Data[PipelinesKey], `"mode": "hardened"`) {
		t.Errorf("hardened pipeline rendered as %q (%v)", cm.Data[PipelinesKey], err)
	}
	// A spec the services would refuse is refused here, before any pod reads it.
	p.Spec.Window = metav1.Duration{}
	if _, err := PipelinesConfigMap(p, BrokerDomain); err == nil {
		t.Error("a zero window was rendered")
	}
}

// TestNATSSecretUsersAndPermissions: the broker's user and one user per device, each device
// confined to its own subjects; a subscriber reads the output only once the fnid is known.
func TestNATSSecretUsersAndPermissions(t *testing.T) {
	p := sample(t)
	sub := p.Spec.Subscribers[0]
	pub := p.Spec.Publishers[0].DeviceID
	for _, fn := range []string{"", "365067f8c601416a57c9db1d7dcd0515"} {
		s := NATSSecret(p, fn, password)
		users, err := specs.NATSSecretUsers(s)
		if err != nil {
			t.Fatal(err)
		}
		if len(users) != 11 || users[0].Name != "pps-broker.lax.parking-daily" || users[0].Permissions != nil || users[0].Account != "PPS_lax_parking-daily" {
			t.Fatalf("users %+v", users[0])
		}
		for _, u := range users[1:] {
			id := strings.TrimPrefix(u.Name, "pps.lax.parking-daily.")
			if u.Permissions == nil || !slices.Contains(u.Permissions.PublishAllow, contract.PubSubject(id)) ||
				slices.Contains(u.Permissions.PublishAllow, contract.PubSubject(pub)) && id != pub {
				t.Errorf("device %s permissions %+v", id, u.Permissions)
			}
			canRead := slices.Contains(u.Permissions.SubscribeAllow, contract.OutSubject(fn))
			if want := id == sub && fn != ""; canRead != want {
				t.Errorf("fn %q: device %s reads the output: %v, want %v", fn, id, canRead, want)
			}
		}
	}
	var subs []string
	if err := json.Unmarshal([]byte(NATSSecret(p, "", password).Annotations[specs.AnnotationPPSSubscribers]), &subs); err != nil || !slices.Equal(subs, []string{sub}) {
		t.Errorf("subscribers annotation %v (%v)", subs, err)
	}
}

func writeFile(path, data string) error { return os.WriteFile(path, []byte(data), 0o600) }
