package mohito

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/obscura-iot/obscura/operators/api/common"
	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/specstest"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

var platform = Platform{Image: "obscura/mohito:dev", IntegratorRedis: "redis-integrator.obscura-system.svc:6379",
	Runtime: specs.Runtime{ImagePullPolicy: corev1.PullIfNotPresent, NATSURL: "nats://nats.obscura-system.svc:4222"}}

// samples reads the CRs of config/samples as the API server would default them for the
// fields the builders read.
func samples(t *testing.T) (*mohitov1.Round, *mohitov1.Vendor, *mohitov1.Shuffler) {
	t.Helper()
	rd, v, s := &mohitov1.Round{}, &mohitov1.Vendor{}, &mohitov1.Shuffler{}
	specstest.ReadSample(t, "mohito_v1alpha1_round.yaml", rd)
	specstest.ReadSample(t, "mohito_v1alpha1_vendor.yaml", v)
	specstest.ReadSample(t, "mohito_v1alpha1_shuffler.yaml", s)
	for _, o := range []interface{ SetNamespace(string) }{rd, v, s} {
		o.SetNamespace("home")
	}
	// Schema defaults the samples leave out.
	rd.Spec.Mode, rd.Spec.Suite = mohitov1.ProtocolHardened, "X25519"
	rd.Spec.Gateway.Replicas = 2
	return rd, v, s
}

func TestRoundObjectsGolden(t *testing.T) {
	rd, v, _ := samples(t)
	doc, err := Deployment(rd, []mohitov1.Vendor{*v}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cm, hash, err := DeploymentConfigMap(rd, doc)
	if err != nil {
		t.Fatal(err)
	}
	objs := []any{cm, IntegratorServiceAccount(rd), RoundNATSSecret(rd, []byte("not-a-real-password")),
		Coordinator(rd, platform, hash), Gateway(rd, platform, hash), GatewayService(rd),
		DecryptWorkers(rd, platform, hash, 3), Responder(rd, platform, hash),
		Encoders(rd, platform, EncoderConfigHash(cm.Data[contract.DeploymentKey])), EncoderService(rd)}
	for _, pdb := range DisruptionBudgets(rd) {
		objs = append(objs, pdb)
	}
	specstest.Golden(t, "round.yaml", objs...)
}

func TestVendorObjectsGolden(t *testing.T) {
	rd, v, s := samples(t)
	specstest.Golden(t, "vendor.yaml", VendorServiceAccount(v), VendorNATSSecret(v, []byte("not-a-real-password"), map[string][]byte{"lamp-1": []byte("not-a-real-device-password")}),
		VendorAgent(v, rd, platform, "0123456789abcdef"), Shuffler(s, v, rd, platform, "0123456789abcdef"))
}

// TestPodsAreRestricted checks every pod the operator runs against the restricted Pod
// Security profile and the services contract: no API token, non-root, read-only root file
// system, all capabilities dropped, probes on the health port, the config hash annotation.
func TestPodsAreRestricted(t *testing.T) {
	rd, v, s := samples(t)
	doc, err := Deployment(rd, []mohitov1.Vendor{*v}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, hash, err := DeploymentConfigMap(rd, doc)
	if err != nil {
		t.Fatal(err)
	}
	templates := map[string]corev1.PodTemplateSpec{
		contract.RoleCoordinator:   Coordinator(rd, platform, hash).Spec.Template,
		contract.RoleGateway:       Gateway(rd, platform, hash).Spec.Template,
		contract.RoleDecryptWorker: DecryptWorkers(rd, platform, hash, 1).Spec.Template,
		contract.RoleResponder:     Responder(rd, platform, hash).Spec.Template,
		contract.RoleEncoder:       Encoders(rd, platform, hash).Spec.Template,
		contract.RoleVendorAgent:   VendorAgent(v, rd, platform, hash).Spec.Template,
		contract.RoleShuffler:      Shuffler(s, v, rd, platform, hash).Spec.Template,
	}
	for role, tpl := range templates {
		ps := tpl.Spec
		c := ps.Containers[0]
		switch {
		case ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken:
			t.Errorf("%s mounts an API token", role)
		case ps.SecurityContext == nil || ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot:
			t.Errorf("%s may run as root", role)
		case c.SecurityContext == nil || !*c.SecurityContext.ReadOnlyRootFilesystem || *c.SecurityContext.AllowPrivilegeEscalation ||
			len(c.SecurityContext.Capabilities.Drop) != 1 || c.SecurityContext.Capabilities.Drop[0] != "ALL":
			t.Errorf("%s container security context is not restricted: %+v", role, c.SecurityContext)
		case len(c.Args) != 1 || c.Args[0] != role:
			t.Errorf("%s runs %v", role, c.Args)
		case tpl.Annotations[ConfigHashAnnotation] != hash:
			t.Errorf("%s lacks the config hash", role)
		case c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz":
			t.Errorf("%s has no readiness probe on /readyz", role)
		}
		needsKey := role == contract.RoleCoordinator || role == contract.RoleDecryptWorker || role == contract.RoleShuffler || role == contract.RoleVendorAgent
		if hasEnv(c.Env, EnvKeyFile) != needsKey {
			t.Errorf("%s: key file mounted = %v, want %v (least privilege: only roles that decrypt hold a key)", role, hasEnv(c.Env, EnvKeyFile), needsKey)
		}
	}
}

func hasEnv(env []corev1.EnvVar, name string) bool {
	for _, e := range env {
		if e.Name == name {
			return true
		}
	}
	return false
}

// TestParameterChangeRollsPods: a new round parameter changes the hash every pod carries.
func TestParameterChangeRollsPods(t *testing.T) {
	rd, v, _ := samples(t)
	hashOf := func() string {
		doc, err := Deployment(rd, []mohitov1.Vendor{*v}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, h, err := DeploymentConfigMap(rd, doc)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	before := hashOf()
	rd.Spec.CommandSize = 2048
	if hashOf() == before {
		t.Fatal("changing commandSize left the config hash unchanged: pods would keep the old size")
	}
}

// TestEncoderRescaleRollsOnlyEncoders: the encoder count is in the encoders' config hash only, so
// a rescale (by hand or by the autoscaler) rolls no other role; any other parameter rolls all.
func TestEncoderRescaleRollsOnlyEncoders(t *testing.T) {
	rd, v, _ := samples(t)
	hashes := func() (roles, encoders string) {
		doc, err := Deployment(rd, []mohitov1.Vendor{*v}, nil)
		if err != nil {
			t.Fatal(err)
		}
		cm, h, err := DeploymentConfigMap(rd, doc)
		if err != nil {
			t.Fatal(err)
		}
		return h, EncoderConfigHash(cm.Data[contract.DeploymentKey])
	}
	roles, enc := hashes()
	rd.Spec.Encoders.Partitions++
	roles2, enc2 := hashes()
	if roles2 != roles || enc2 == enc {
		t.Fatalf("partitions changed: roles' hash %s→%s (want the same), encoders' %s→%s (want a new one)", roles, roles2, enc, enc2)
	}
	rd.Spec.Delta++
	if roles3, enc3 := hashes(); roles3 == roles2 || enc3 == enc2 {
		t.Fatal("δ changed: every role must roll")
	}
}

func TestDeploymentNeedsContiguousIndices(t *testing.T) {
	rd, v, _ := samples(t)
	v2 := v.DeepCopy()
	v2.Name, v2.Spec.Index = "globex", 2
	if _, err := Deployment(rd, []mohitov1.Vendor{*v, *v2}, nil); err == nil || !strings.Contains(err.Error(), "without gaps") {
		t.Fatalf("indices 0 and 2 accepted: %v", err)
	}
	v2.Spec.Index = 1
	doc, err := Deployment(rd, []mohitov1.Vendor{*v2, *v}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Vendors[0].Name != "acme" || doc.Vendors[1].Name != "globex" {
		t.Fatalf("vendors not ordered by index: %+v", doc.Vendors)
	}
}

// TestVaultKeysReachTheRoles: a Vault key reference becomes the roles' Vault settings (the
// operator's default address filling in), with the service account token mounted for the
// Kubernetes auth login and no key Secret.
func TestVaultKeysReachTheRoles(t *testing.T) {
	rd, v, s := samples(t)
	rd.Spec.Keys = common.KeyReference{Vault: &common.VaultKeyReference{Role: "integrator", Path: "mohito/integrator"}}
	pl := platform
	pl.VaultAddress = "https://vault.vault.svc:8200"
	d := DecryptWorkers(rd, pl, "h", 1)
	env := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	want := map[string]string{specs.EnvVaultAddr: pl.VaultAddress, specs.EnvVaultRole: "integrator", specs.EnvVaultMount: "secret",
		specs.EnvVaultPath: "mohito/integrator", specs.EnvVaultField: "private_key"}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if _, ok := env[EnvKeyFile]; ok {
		t.Error("a Vault key also mounts a key file")
	}
	if a := d.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || !*a {
		t.Error("Kubernetes auth needs the service account token")
	}
	// Roles without a key keep no token.
	if a := Responder(rd, pl, "h").Spec.Template.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Error("the responder holds no key and must not get a token")
	}
	v.Spec.Keys = common.KeyReference{Vault: &common.VaultKeyReference{Address: "https://vendor-vault:8200", Role: "acme", Path: "acme/sk"}}
	sh := Shuffler(s, v, rd, pl, "h")
	for _, e := range sh.Spec.Template.Spec.Containers[0].Env {
		if e.Name == specs.EnvVaultAddr && e.Value != "https://vendor-vault:8200" {
			t.Errorf("the vendor's own Vault address was replaced by %s", e.Value)
		}
	}
}

// TestHostNetworkMode checks the pods of the local cluster (no pod network): on the node's
// network, no declared port (a second replica would not schedule), health and metrics on
// 127.0.0.1:0 with the bound addresses in a file, exec probes (the kubelet never dials the
// node's InternalIP), the gateway on a fixed 127.0.0.1 port with SO_REUSEPORT.
func TestHostNetworkMode(t *testing.T) {
	rd, v, s := samples(t)
	pl := platform
	pl.HostNetwork = true
	gw := Gateway(rd, pl, "h")
	specstest.Golden(t, "hostnetwork_gateway.yaml", gw)
	templates := map[string]corev1.PodTemplateSpec{
		"gateway": gw.Spec.Template, "coordinator": Coordinator(rd, pl, "h").Spec.Template,
		"decrypt-worker": DecryptWorkers(rd, pl, "h", 2).Spec.Template, "responder": Responder(rd, pl, "h").Spec.Template,
		"encoder": Encoders(rd, pl, "h").Spec.Template, "vendor-agent": VendorAgent(v, rd, pl, "h").Spec.Template,
		"shuffler": Shuffler(s, v, rd, pl, "h").Spec.Template,
	}
	for name, tpl := range templates {
		spec := tpl.Spec
		if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
			t.Errorf("%s: hostNetwork %v dnsPolicy %q", name, spec.HostNetwork, spec.DNSPolicy)
		}
		c := spec.Containers[0]
		if len(c.Ports) != 0 {
			t.Errorf("%s declares ports %v", name, c.Ports)
		}
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		for _, k := range []string{specs.EnvMetricsAddr, specs.EnvHealthAddr} {
			if env[k] != "127.0.0.1:0" {
				t.Errorf("%s: %s=%q, want 127.0.0.1:0", name, k, env[k])
			}
		}
		if env[specs.EnvAddrFile] != specs.RunDir+"/addr" {
			t.Errorf("%s: %s=%q", name, specs.EnvAddrFile, env[specs.EnvAddrFile])
		}
		for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
			if p == nil || p.Exec == nil || p.HTTPGet != nil || p.Exec.Command[0] != Binary || p.Exec.Command[1] != "probe" {
				t.Errorf("%s: probe %+v, want an exec probe of %s", name, p, Binary)
			}
		}
		// Every exec probe is a runc exec on the node: after start-up they run sparsely.
		if c.StartupProbe != nil && c.LivenessProbe != nil && c.ReadinessProbe != nil &&
			(c.LivenessProbe.PeriodSeconds < 30 || c.ReadinessProbe.PeriodSeconds < 10 ||
				c.StartupProbe.PeriodSeconds*c.StartupProbe.FailureThreshold < 60) {
			t.Errorf("%s: probe periods startup %d×%d, liveness %d, readiness %d", name,
				c.StartupProbe.PeriodSeconds, c.StartupProbe.FailureThreshold, c.LivenessProbe.PeriodSeconds, c.ReadinessProbe.PeriodSeconds)
		}
		if name == "gateway" {
			if env[specs.EnvListen] != "127.0.0.1:"+strconv.Itoa(GatewayPort) || env[specs.EnvReusePort] != "true" {
				t.Errorf("gateway listens on %q reuse %q", env[specs.EnvListen], env[specs.EnvReusePort])
			}
		} else if _, ok := env[specs.EnvReusePort]; ok {
			t.Errorf("%s sets %s without a fixed listener", name, specs.EnvReusePort)
		}
	}
}

// TestKeyEpochsMountTheSecretWhole: a key ring Secret is mounted whole (no items, no subPath) so
// the kubelet updates it in place and the roles stage a new epoch without a restart; the key
// file is the directory; the activation delay reaches exactly the roles that hold a key.
func TestKeyEpochsMountTheSecretWhole(t *testing.T) {
	rd, v, s := samples(t)
	v.Spec.Keys = common.KeyReference{SecretRef: &common.SecretKeyReference{Name: "acme-keys", Key: specs.KeyFile, Epochs: true}}
	pl := platform
	pl.KeyActivationDelay = 45 * time.Second
	sh := Shuffler(s, v, rd, pl, "0123456789abcdef")
	specstest.Golden(t, "shuffler_key_epochs.yaml", sh)
	spec := sh.Spec.Template.Spec
	env := map[string]string{}
	for _, e := range spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env[EnvKeyFile] != KeysDir || env[specs.EnvKeyActivationDelay] != "45s" {
		t.Errorf("key file %q, activation delay %q", env[EnvKeyFile], env[specs.EnvKeyActivationDelay])
	}
	for _, vol := range spec.Volumes {
		if vol.Name == "keys" && (vol.Secret == nil || vol.Secret.SecretName != "acme-keys" || len(vol.Secret.Items) > 0) {
			t.Errorf("keys volume %+v: want the whole Secret acme-keys", vol.VolumeSource)
		}
	}
	for _, m := range spec.Containers[0].VolumeMounts {
		if m.Name == "keys" && m.SubPath != "" {
			t.Error("a subPath mount is never updated by the kubelet")
		}
	}
	// A single key stays one file; roles without a key get no activation delay.
	for _, e := range VendorAgent(v, rd, pl, "h").Spec.Template.Spec.Containers[0].Env {
		if e.Name == EnvKeyFile && e.Value != KeysDir {
			t.Errorf("the agent of the same vendor reads %q", e.Value)
		}
	}
	for _, e := range Responder(rd, pl, "h").Spec.Template.Spec.Containers[0].Env {
		if e.Name == specs.EnvKeyActivationDelay {
			t.Error("the responder holds no key but got an activation delay")
		}
	}
	for _, e := range Coordinator(rd, pl, "h").Spec.Template.Spec.Containers[0].Env {
		if e.Name == EnvKeyFile && e.Value != KeysDir+"/"+specs.KeyFile {
			t.Errorf("the coordinator's single key file is %q", e.Value)
		}
	}
}

// TestRoundsLimitReachesTheCoordinator: spec.rounds is the coordinator's max-rounds (the series
// stops opening rounds after that many), and without it the coordinator runs until deleted.
func TestRoundsLimitReachesTheCoordinator(t *testing.T) {
	rd, _, _ := samples(t)
	envOf := func() map[string]string {
		env := map[string]string{}
		for _, e := range Coordinator(rd, platform, "h").Spec.Template.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		return env
	}
	rd.Spec.Rounds = nil
	if v, ok := envOf()[EnvMaxRounds]; ok {
		t.Fatalf("no spec.rounds, but the coordinator gets %s=%s", EnvMaxRounds, v)
	}
	n := int64(12)
	rd.Spec.Rounds = &n
	if v := envOf()[EnvMaxRounds]; v != "12" {
		t.Fatalf("spec.rounds 12: the coordinator gets %s=%q", EnvMaxRounds, v)
	}
}

// TestScalableStagesTakeResourcesFromTheRound (issue 14 item 2): the decrypt workers' and the
// encoders' requests and limits come from the Round when it sets them, so one replica has a known
// capacity; otherwise the roles' defaults stay.
func TestScalableStagesTakeResourcesFromTheRound(t *testing.T) {
	rd, _, _ := samples(t)
	res := &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("128Mi")},
	}
	if got := DecryptWorkers(rd, platform, "h", 1).Spec.Template.Spec.Containers[0].Resources; got.Requests.Cpu().String() != "500m" {
		t.Fatalf("default worker request %v, want 500m", got.Requests.Cpu())
	}
	rd.Spec.DecryptWorkers.Resources, rd.Spec.Encoders.Resources = res, res
	for name, got := range map[string]corev1.ResourceRequirements{
		"decrypt worker": DecryptWorkers(rd, platform, "h", 1).Spec.Template.Spec.Containers[0].Resources,
		"encoder":        Encoders(rd, platform, "h").Spec.Template.Spec.Containers[0].Resources,
	} {
		if got.Requests.Cpu().String() != "250m" || got.Limits.Cpu().String() != "1" {
			t.Errorf("%s: requests %v limits %v, want the Round's", name, got.Requests, got.Limits)
		}
	}
}

// TestScalableStagesSpreadOverNodes: decrypt workers and encoders (the stages that run many
// interchangeable pods) carry one topology spread constraint by hostname, maxSkew 1, selecting
// exactly their own workload's pods, with the runtime's whenUnsatisfiable (the operator's
// default ScheduleAnyway never leaves a pod pending on one node); the single-replica roles carry
// none, and none of them without a runtime setting.
func TestScalableStagesSpreadOverNodes(t *testing.T) {
	rd, v, s := samples(t)
	for _, mode := range []corev1.UnsatisfiableConstraintAction{corev1.ScheduleAnyway, corev1.DoNotSchedule, ""} {
		for _, hostNetwork := range []bool{false, true} {
			pl := platform
			pl.TopologySpread, pl.HostNetwork = mode, hostNetwork
			dw, enc := DecryptWorkers(rd, pl, "h", 3), Encoders(rd, pl, "h")
			spread := map[string]struct {
				tpl      corev1.PodTemplateSpec
				selector map[string]string
			}{
				"decrypt-worker": {dw.Spec.Template, dw.Spec.Selector.MatchLabels},
				"encoder":        {enc.Spec.Template, enc.Spec.Selector.MatchLabels},
			}
			for name, w := range spread {
				c := w.tpl.Spec.TopologySpreadConstraints
				if mode == "" {
					if len(c) != 0 {
						t.Errorf("%s without --topology-spread: %+v", name, c)
					}
					continue
				}
				if len(c) != 1 || c[0].MaxSkew != 1 || c[0].TopologyKey != corev1.LabelHostname || c[0].WhenUnsatisfiable != mode ||
					c[0].LabelSelector == nil || !reflect.DeepEqual(c[0].LabelSelector.MatchLabels, w.selector) {
					t.Errorf("%s (%s, hostNetwork %v): %+v, want maxSkew 1 by hostname over %v", name, mode, hostNetwork, c, w.selector)
				}
			}
			for name, tpl := range map[string]corev1.PodTemplateSpec{
				"coordinator": Coordinator(rd, pl, "h").Spec.Template, "gateway": Gateway(rd, pl, "h").Spec.Template,
				"responder": Responder(rd, pl, "h").Spec.Template, "vendor-agent": VendorAgent(v, rd, pl, "h").Spec.Template,
				"shuffler": Shuffler(s, v, rd, pl, "h").Spec.Template,
			} {
				if c := tpl.Spec.TopologySpreadConstraints; len(c) != 0 {
					t.Errorf("%s is spread: %+v", name, c)
				}
			}
		}
	}
}
