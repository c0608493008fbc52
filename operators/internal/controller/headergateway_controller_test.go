package controller

import (
	"context"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/operators/api/common"
	loisv1 "github.com/obscura-iot/obscura/operators/api/lois/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/loisstatus"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/lois"
	"github.com/obscura-iot/obscura/operators/internal/specs/specstest"
)

// sampleGateway is config/samples' HeaderGateway in ns.
func sampleGateway(t *testing.T, ns string) *loisv1.HeaderGateway {
	t.Helper()
	g := &loisv1.HeaderGateway{}
	specstest.ReadSample(t, "lois_v1alpha1_headergateway.yaml", g)
	g.Namespace = ns
	return g
}

// TestHeaderGatewayRunsCloudInterfaces applies the sample to a real API server: the cloud
// interfaces' StatefulSet with the flags `lois ci` reads, their Service, a flow key shared by
// every replica, and the registrar's settings naming every replica a session must be
// installed at; the gateway rolls out, becomes Ready, and scales.
func TestHeaderGatewayRunsCloudInterfaces(t *testing.T) {
	ns := namespace(t)
	g := sampleGateway(t, ns)
	create(t, g)
	conds := func() []metav1.Condition { return g.Status.Conditions }
	waitRollingOut(t, g, conds)

	ctx := context.Background()
	var ss appsv1.StatefulSet
	eventually(t, "cloud interface StatefulSet", func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge-lois-ci"}, &ss)
	})
	if *ss.Spec.Replicas != 1 || ss.OwnerReferences[0].Name != "edge" {
		t.Fatalf("replicas %d, owner %v", *ss.Spec.Replicas, ss.OwnerReferences)
	}
	c := ss.Spec.Template.Spec.Containers[0]
	e := env(c)
	for k, want := range map[string]string{
		specs.Env(lois.FlagBackends):    "8080=10.200.0.10:80@10.0.2.1:7402",
		specs.Env(lois.FlagCIP):         "198.18.0.1",
		specs.Env(lois.FlagUnifiedPort): "443",
		specs.Env(lois.FlagMTU):         "1400",
		specs.Env(lois.FlagCloud):       "edge",
		specs.Env(lois.FlagReplicaName): "$(POD_NAME)",
		specs.Env(lois.FlagNATSURL):     testRuntime.NATSURL,
		specs.Env(lois.FlagGrace):       "2m0s",
		specs.Env(lois.FlagFlowKeyFile): lois.SecretsDir + "/flow/" + lois.FlowKeyFile,
	} {
		if e[k] != want {
			t.Errorf("%s = %q, want %q", k, e[k], want)
		}
	}
	if _, ok := e[specs.Env(lois.FlagPaperMode)]; ok {
		t.Error("hardened mode sets --paper-mode")
	}
	if c.Args[0] != "ci" || c.Image != "obscura/lois:test" {
		t.Errorf("args %v image %s", c.Args, c.Image)
	}

	var key corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge-lois-flow-key"}, &key); err != nil {
		t.Fatal(err)
	}
	if b, err := hex.DecodeString(string(key.Data[lois.FlowKeyFile])); err != nil || len(b) != 16 {
		t.Fatalf("flow key is not 16 bytes of hex: %v", err)
	}
	// On the operator's NATS (the sample names no natsURL or natsSecret) the gateway gets its
	// own account and user, rendered into the server's accounts; the CI and the registrar
	// connect with it, its password only as a file.
	var creds corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge-lois-nats"}, &creds); err != nil {
		t.Fatal(err)
	}
	if creds.Annotations[specs.AnnotationNATSAccount] != "LOIS_"+ns+"_edge" || string(creds.Data[specs.NATSUserKey]) != "lois."+ns+".edge" ||
		len(creds.Data[specs.NATSPasswordKey]) != 64 || !metav1.IsControlledBy(&creds, g) {
		t.Errorf("credentials Secret: account %q user %q owners %v", creds.Annotations[specs.AnnotationNATSAccount], creds.Data[specs.NATSUserKey], creds.OwnerReferences)
	}
	eventually(t, "the gateway's NATS user rendered", func() error {
		users, err := renderedHashes()
		if err != nil {
			return err
		}
		return hasUser(users, string(creds.Data[specs.NATSUserKey]), creds.Data[specs.NATSPasswordKey])
	})
	if e[specs.EnvNATSUser] != "secret:edge-lois-nats/user" || e[specs.EnvNATSPasswordFile] == "" {
		t.Errorf("CI NATS user %q password file %q", e[specs.EnvNATSUser], e[specs.EnvNATSPasswordFile])
	}
	var regDep appsv1.Deployment
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge-lois-registrar"}, &regDep); err != nil {
		t.Fatal(err)
	}
	if re := env(regDep.Spec.Template.Spec.Containers[0]); re[specs.EnvNATSUser] != "secret:edge-lois-nats/user" {
		t.Errorf("registrar NATS user %q", re[specs.EnvNATSUser])
	}
	// The session records are sealed under a generated record key the registrar and the CI
	// read as a file.
	var rk corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge-lois-record-key"}, &rk); err != nil {
		t.Fatal(err)
	}
	if b, err := hex.DecodeString(string(rk.Data[lois.RecordKeyFile])); err != nil || len(b) != 32 || !metav1.IsControlledBy(&rk, g) {
		t.Errorf("record key is not 32 bytes of hex owned by the gateway: %v", err)
	}
	for what, c := range map[string]corev1.Container{"CI": c, "registrar": regDep.Spec.Template.Spec.Containers[0]} {
		if got := env(c)[specs.Env(lois.FlagRecordKeyFile)]; got != lois.SecretsDir+"/record/"+lois.RecordKeyFile {
			t.Errorf("%s record key file %q", what, got)
		}
	}
	for _, c := range append(ss.Spec.Template.Spec.Containers, regDep.Spec.Template.Spec.Containers...) {
		for _, v := range c.Env {
			if v.ValueFrom != nil && v.ValueFrom.SecretKeyRef != nil && v.ValueFrom.SecretKeyRef.Key == specs.NATSPasswordKey {
				t.Errorf("%s: the NATS password reaches the environment", c.Name)
			}
		}
	}

	var cm corev1.ConfigMap
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge-lois-registrar"}, &cm); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"OBSCURA_SERVICES": "8080", "OBSCURA_N": "4096", "OBSCURA_LIFETIME": "1h0m0s", "OBSCURA_PARTITIONS": "1",
		"OBSCURA_WAIT_FOR": "edge-lois-ci-0,si-8080-0", "OBSCURA_CLOUD": "edge", "OBSCURA_STP": "true",
		"OBSCURA_STP_Q": "0.1", "OBSCURA_STP_RATE": "2000", "OBSCURA_STP_PERIOD": "1m0s", "OBSCURA_STP_TICK": "10ms",
		"OBSCURA_CLOUD_WIRE": "edge-lois-ci." + ns + ".svc:7400",
	} {
		if cm.Data[k] != want {
			t.Errorf("registrar %s = %q, want %q", k, cm.Data[k], want)
		}
	}
	var svc corev1.Service
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge-lois-ci"}, &svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Ports[0].Protocol != corev1.ProtocolUDP || svc.Spec.Ports[0].Port != 7400 {
		t.Errorf("wire port %+v", svc.Spec.Ports[0])
	}

	markAvailable(t, ns)
	waitReady(t, g, conds, metav1.ConditionTrue, common.ReasonReconciled)
	if g.Status.CloudReplicas != 1 {
		t.Errorf("status.cloudReplicas = %d", g.Status.CloudReplicas)
	}

	// Two cloud interfaces and two server interfaces per service: the registrar waits for all
	// four, the flow key stays the same. The cloud interfaces are pinned to the edge nodes.
	g.Spec.Cloud.Replicas, g.Spec.Server.Replicas = 2, 2
	g.Spec.Cloud.NodeSelector = map[string]loisv1.LabelValue{"node-role.obscura.dev/edge": ""}
	g.Spec.Cloud.Tolerations = []corev1.Toleration{{Key: "edge", Operator: corev1.TolerationOpEqual, Value: "lois", Effect: corev1.TaintEffectNoExecute,
		TolerationSeconds: ptr.To[int64](60)}}
	update(t, g)
	eventually(t, "the cloud interfaces pinned", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(&ss), &ss); err != nil {
			return err
		}
		pod := ss.Spec.Template.Spec
		if _, ok := pod.NodeSelector["node-role.obscura.dev/edge"]; !ok || len(pod.Tolerations) != 1 || pod.Tolerations[0].Value != "lois" ||
			*pod.Tolerations[0].TolerationSeconds != 60 {
			return errorf("node selector %v, tolerations %+v", pod.NodeSelector, pod.Tolerations)
		}
		return nil
	})
	eventually(t, "registrar waits for every replica", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(&cm), &cm); err != nil {
			return err
		}
		if got := cm.Data["OBSCURA_WAIT_FOR"]; got != "edge-lois-ci-0,edge-lois-ci-1,si-8080-0,si-8080-1" {
			return errorf("wait-for %q", got)
		}
		if cm.Data["OBSCURA_PARTITIONS"] != "2" {
			return errorf("partitions %q", cm.Data["OBSCURA_PARTITIONS"])
		}
		return nil
	})
	var key2 corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(&key), &key2); err != nil || string(key2.Data[lois.FlowKeyFile]) != string(key.Data[lois.FlowKeyFile]) {
		t.Fatalf("flow key changed under running replicas (%v)", err)
	}
	waitRollingOut(t, g, conds)
	markAvailable(t, ns)
	waitReady(t, g, conds, metav1.ConditionTrue, common.ReasonReconciled)
}

// TestHeaderGatewayRefusals: what CEL refuses at admission, and what the reconciler refuses
// with a Degraded condition.
func TestHeaderGatewayRefusals(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		mut  func(*loisv1.HeaderGateway)
		msg  string
	}{
		{"service-on-unified-port", func(g *loisv1.HeaderGateway) { g.Spec.Services[0].Port = 443 }, "must differ from the unified port"},
		{"duplicate-sid", func(g *loisv1.HeaderGateway) {
			s := g.Spec.Services[0]
			s.Name = "web2"
			g.Spec.Services = append(g.Spec.Services, s)
		}, "must be unique"},
		{"short-lifetime", func(g *loisv1.HeaderGateway) { g.Spec.Keystreams.Lifetime = metav1.Duration{Duration: 3 * time.Minute} }, "must exceed safetyMargin + grace"},
		{"stp-params-when-off", func(g *loisv1.HeaderGateway) { g.Spec.Padding.Policy = loisv1.PaddingOff }, "apply only with policy stp"},
		{"bad-backend", func(g *loisv1.HeaderGateway) { g.Spec.Services[0].Backend.Address = "web.local" }, "IPv4"},
		{"bad-wire", func(g *loisv1.HeaderGateway) { g.Spec.Services[0].ServerWire = "10.0.2.1" }, "IPv4:port"},
		{"ipv6-cloud", func(g *loisv1.HeaderGateway) { g.Spec.CloudAddress = "2001:db8::1" }, "IPv4"},
	} {
		g := sampleGateway(t, ns)
		g.Name = c.name
		c.mut(g)
		err := k8s.Create(ctx, g)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: admitted or wrong message: %v", c.name, err)
		}
	}

	// A NATS Secret that is not there: Degraded until it exists with both entries.
	g := sampleGateway(t, ns)
	g.Spec.Registrar.NATSSecret = "lois-nats"
	create(t, g)
	conds := func() []metav1.Condition { return g.Status.Conditions }
	waitReady(t, g, conds, metav1.ConditionFalse, ReasonNATSSecretNotFound)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lois-nats"},
		Data: map[string][]byte{specs.NATSUserKey: []byte("lois-edge")}})
	waitReadyMessage(t, g, conds, ReasonNATSSecretNotFound, `no entry "password"`)
	var s corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "lois-nats"}, &s); err != nil {
		t.Fatal(err)
	}
	s.Data[specs.NATSPasswordKey] = []byte("pw")
	update(t, &s)
	waitRollingOut(t, g, conds)
	var ss appsv1.StatefulSet
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge-lois-ci"}, &ss); err != nil {
		t.Fatal(err)
	}
	if e := env(ss.Spec.Template.Spec.Containers[0]); e[specs.EnvNATSUser] != "secret:lois-nats/user" || e[specs.EnvNATSURL] != testRuntime.NATSURL {
		t.Errorf("NATS user %q url %q", e[specs.EnvNATSUser], e[specs.EnvNATSURL])
	}
	if c := meta.FindStatusCondition(g.Status.Conditions, common.ConditionDegraded); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Degraded %v", c)
	}
}

// TestHeaderGatewayStatusFromReport: the figures the cloud interfaces report become the
// status columns; packets/s is the rate of consumed keystreams between two looks.
func TestHeaderGatewayStatusFromReport(t *testing.T) {
	var s loisv1.HeaderGatewayStatus
	t0 := time.Unix(1_800_000_000, 0)
	applyCloudReport(&s, &loisstatus.Report{Replicas: 2, Devices: 3, Installed: 24000, Consumed: 100}, t0)
	if s.Devices != 3 || s.KeystreamsInstalled != 24000 || s.KeystreamsConsumed != 100 || s.PacketsPerSecond != "" {
		t.Fatalf("first look: %+v", s)
	}
	applyCloudReport(&s, &loisstatus.Report{Replicas: 2, Devices: 3, Installed: 23500, Consumed: 600, Rejected: map[string]int64{"replay": 2}}, t0.Add(10*time.Second))
	if s.PacketsPerSecond != "50.0" || s.Rejected["replay"] != 2 {
		t.Fatalf("second look: %+v", s)
	}
}

// TestHeaderGatewayPadRatioFromServerReport: the operator's server interfaces' figures become
// status.server and the Pad column: the pad ratio is the cover packets (received and sent)
// over every packet they handled, SI packets/s the rate of all of them between two looks;
// before any packet there is no ratio, and a restarted SI (counts from zero) leaves the rate
// as it was.
func TestHeaderGatewayPadRatioFromServerReport(t *testing.T) {
	var s loisv1.HeaderGatewayStatus
	t0 := time.Unix(1_800_000_000, 0)
	applyServerReport(&s, &loisstatus.ServerReport{Replicas: 1, Devices: 2, DownloadKeystreams: 2048}, t0)
	if s.PadRatio != "" || s.Server == nil || s.Server.Replicas != 1 || s.Server.Devices != 2 || s.Server.DownloadKeystreams != 2048 || s.Server.PacketsPerSecond != "" {
		t.Fatalf("before any packet: ratio %q, server %+v", s.PadRatio, s.Server)
	}
	// 40 real uploads, 33 replies, 10 cover uploads, 17 cover downloads: 27 of 100.
	applyServerReport(&s, &loisstatus.ServerReport{Replicas: 1, Devices: 2, Uploads: 40, Downloads: 33, CoverReceived: 10, CoverSent: 17,
		Rejected: map[string]int64{"up/unknown_id": 1}}, t0.Add(10*time.Second))
	if s.PadRatio != "0.27" || s.Server.PacketsPerSecond != "10.0" || s.Server.UploadsRecovered != 40 || s.Server.CoverSent != 17 ||
		s.Server.Rejected["up/unknown_id"] != 1 {
		t.Fatalf("second look: ratio %q, server %+v", s.PadRatio, s.Server)
	}
	applyServerReport(&s, &loisstatus.ServerReport{Replicas: 1, Uploads: 3, Downloads: 1}, t0.Add(20*time.Second))
	if s.PadRatio != "0.00" || s.Server.PacketsPerSecond != "10.0" || s.Server.UploadsRecovered != 3 {
		t.Fatalf("after a restart: ratio %q, server %+v", s.PadRatio, s.Server)
	}
}

// registrarFlags are the flags `lois registrar` (services/cmd/lois/registrard.go) defines:
// every OBSCURA_<FLAG> variable the operator gives the registrar must be one of them (the
// daemon ignores the others, so a misnamed one would silently fall back to its default).
var registrarFlags = []string{"nats-url", "nats-user", "nats-password-file", "cloud", "metrics-addr", "health-addr", "addr-file",
	"log-level", "services", "n", "max-n", "partitions", "lifetime", "wait-for", "timeout", "nats-replicas", "store-ttl",
	"seed-store", "vault-addr", "vault-token-file", "vault-role", "vault-auth-path", "vault-transit-mount", "vault-transit-key",
	"rekey-after", "rekey-streams", "record-key-file"}

// TestHeaderGatewayRunsRegistrar: the controller runs the registrar daemon beside the cloud
// interfaces — one replica, Recreate (a single writer of the cloud's deduplicating table),
// `lois registrar` with the gateway's services, keystream budget, partition count and every
// replica a session waits for. Without registrar.vault its seeds stay in memory and its pod
// gets no service account token; with it the seeds are wrapped by the named Transit key,
// logged in with the registrar's own service account. The gateway is Ready only once the
// registrar is available, and CEL refuses a Vault address that is not a URL.
func TestHeaderGatewayRunsRegistrar(t *testing.T) {
	ns := namespace(t)
	g := sampleGateway(t, ns)
	g.Spec.Server.Replicas = 2
	create(t, g)
	conds := func() []metav1.Condition { return g.Status.Conditions }
	waitRollingOut(t, g, conds)
	ctx := context.Background()
	var d appsv1.Deployment
	eventually(t, "registrar Deployment", func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge-lois-registrar"}, &d)
	})
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || d.OwnerReferences[0].Name != "edge" {
		t.Fatalf("replicas %d, strategy %s, owner %v", *d.Spec.Replicas, d.Spec.Strategy.Type, d.OwnerReferences)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Args[0] != "registrar" || c.Image != "obscura/lois:test" {
		t.Errorf("args %v image %s", c.Args, c.Image)
	}
	e := env(c)
	for k, want := range map[string]string{
		specs.Env(lois.FlagNATSURL):    testRuntime.NATSURL,
		specs.Env(lois.FlagCloud):      "edge",
		specs.Env(lois.FlagServices):   "8080",
		specs.Env(lois.FlagN):          "4096",
		specs.Env(lois.FlagLifetime):   "1h0m0s",
		specs.Env(lois.FlagPartitions): "2",
		specs.Env(lois.FlagWaitFor):    "edge-lois-ci-0,si-8080-0,si-8080-1",
		specs.Env(lois.FlagSeedStore):  "memory",
	} {
		if e[k] != want {
			t.Errorf("%s = %q, want %q", k, e[k], want)
		}
	}
	allowed := map[string]bool{}
	for _, f := range registrarFlags {
		allowed[specs.Env(f)] = true
	}
	for k := range e {
		if strings.HasPrefix(k, "OBSCURA_") && !allowed[k] {
			t.Errorf("%s is no flag of lois registrar", k)
		}
	}
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != "edge-lois-registrar" || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("service account %q, token mounted %v without Vault", pod.ServiceAccountName, pod.AutomountServiceAccountToken)
	}
	var sa corev1.ServiceAccount
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge-lois-registrar"}, &sa); err != nil {
		t.Fatal(err)
	}
	markAvailable(t, ns)
	waitReady(t, g, conds, metav1.ConditionTrue, common.ReasonReconciled)
	if rc := meta.FindStatusCondition(g.Status.Conditions, common.ConditionReady); !strings.Contains(rc.Message, "seeds in memory only") {
		t.Errorf("Ready message %q does not say where the seeds are", rc.Message)
	}

	g.Spec.Registrar.Vault = &loisv1.SeedVault{Address: "https://vault.vault.svc:8200", Role: "lois-registrar", SeedKey: "lois-seeds"}
	update(t, g)
	eventually(t, "registrar wraps seeds with Vault", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(&d), &d); err != nil {
			return err
		}
		e := env(d.Spec.Template.Spec.Containers[0])
		for k, want := range map[string]string{
			specs.Env(lois.FlagSeedStore):         "vault",
			specs.Env(lois.FlagVaultAddr):         "https://vault.vault.svc:8200",
			specs.Env(lois.FlagVaultRole):         "lois-registrar",
			specs.Env(lois.FlagVaultTransitMount): "transit",
			specs.Env(lois.FlagVaultTransitKey):   "lois-seeds",
		} {
			if e[k] != want {
				return errorf("%s = %q, want %q", k, e[k], want)
			}
		}
		if a := d.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || !*a {
			return errorf("no service account token for the Vault login")
		}
		return nil
	})
	// The new template rolls out: not Ready until the registrar is available again.
	waitRollingOut(t, g, conds)
	markAvailable(t, ns)
	waitReady(t, g, conds, metav1.ConditionTrue, common.ReasonReconciled)

	bad := sampleGateway(t, ns)
	bad.Name = "bad-vault"
	bad.Spec.Registrar.Vault = &loisv1.SeedVault{Address: "vault:8200", Role: "r", SeedKey: "k"}
	if err := k8s.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "must be an http:// or https:// URL") {
		t.Errorf("a Vault address without a scheme: %v", err)
	}
}

// siFlags are the flags `lois si` (services/cmd/lois/si.go, common.go, registrar.go) defines:
// every OBSCURA_<FLAG> variable the operator gives its server interfaces must be one of them.
var siFlags = []string{"metrics-addr", "health-addr", "addr-file", "log-level", "cip", "unified-port", "mtu", "paper-mode", "plain",
	"batch", "safety-margin", "grace", "stp", "stp-period", "stp-q", "stp-rate", "stp-tick", "wire-listen", "ordinal-ports",
	"tun", "netns", "tun-addr", "tun-routes", "keys-files", "services", "nats-url", "nats-user", "nats-password-file", "cloud",
	"replica-name", "replica", "record-key-file", "tun-multi-queue", "wire-reuse-port"}

// netnsGateway is the sample with the operator running its server interface (placement
// netns) in the network namespace web-ns.
func netnsGateway(t *testing.T, ns string) *loisv1.HeaderGateway {
	g := sampleGateway(t, ns)
	g.Spec.Server.Placement = loisv1.ServerPlacementNetns
	g.Spec.Server.DeviceNetworks = []string{"10.99.0.0/24"}
	g.Spec.Services[0].NetworkNamespace = "web-ns"
	g.Spec.Services[0].ServerWire = "127.0.0.1:7402"
	g.Spec.Server.NodeSelector = map[string]loisv1.LabelValue{"kubernetes.io/hostname": "node-a"}
	g.Spec.Server.Tolerations = []corev1.Toleration{{Key: "lois.obscura.dev/servers", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	return g
}

// TestHeaderGatewayRunsServerInterfaces: with server.placement netns the operator runs each
// service's server interface — a StatefulSet of one pod, `lois si` with the flags it reads
// (its replica name the one the registrar waits for, its TUN in the service's network
// namespace with the backend's address and the device networks' routes, its wire on
// serverWire, the record key as a file), on the node's network with exactly the exception
// docs/lois.md documents (root, NET_ADMIN and SYS_ADMIN, /dev/net/tun and /run/netns). The
// gateway is Ready only once it is ready (condition ServerInterfaces, status.serverReplicas);
// placement external removes it and says the SIs are external.
func TestHeaderGatewayRunsServerInterfaces(t *testing.T) {
	ns := namespace(t)
	g := netnsGateway(t, ns)
	create(t, g)
	conds := func() []metav1.Condition { return g.Status.Conditions }
	waitRollingOut(t, g, conds)
	ctx := context.Background()
	var ss appsv1.StatefulSet
	eventually(t, "server interface StatefulSet", func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge-lois-si-8080"}, &ss)
	})
	if *ss.Spec.Replicas != 1 || !metav1.IsControlledBy(&ss, g) || ss.Spec.Selector.MatchLabels[lois.LabelService] != "8080" {
		t.Fatalf("replicas %d, owners %v, selector %v", *ss.Spec.Replicas, ss.OwnerReferences, ss.Spec.Selector.MatchLabels)
	}
	if si := meta.FindStatusCondition(g.Status.Conditions, ConditionServerInterfaces); si == nil || si.Status != metav1.ConditionFalse ||
		si.Reason != ReasonServerInterfacesNotReady || !strings.Contains(si.Message, "edge-lois-si-8080") {
		t.Errorf("ServerInterfaces while rolling out: %+v", si)
	}
	pod := ss.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Args[0] != "si" || c.Image != "obscura/lois:test" || !pod.HostNetwork {
		t.Errorf("args %v image %s host network %v", c.Args, c.Image, pod.HostNetwork)
	}
	e := env(c)
	for k, want := range map[string]string{
		specs.Env(lois.FlagServices):      "80=8080",
		specs.Env(lois.FlagReplicaName):   "si-8080-0",
		specs.Env(lois.FlagReplica):       "0",
		specs.Env(lois.FlagWireListen):    "127.0.0.1:7402",
		specs.Env(lois.FlagTUN):           "lois-si-8080",
		specs.Env(lois.FlagNetns):         "/run/netns/web-ns",
		specs.Env(lois.FlagTUNAddr):       "10.200.0.10",
		specs.Env(lois.FlagTUNRoutes):     "10.99.0.0/24",
		specs.Env(lois.FlagCIP):           "198.18.0.1",
		specs.Env(lois.FlagUnifiedPort):   "443",
		specs.Env(lois.FlagMTU):           "1400",
		specs.Env(lois.FlagCloud):         "edge",
		specs.Env(lois.FlagNATSURL):       testRuntime.NATSURL,
		specs.Env(lois.FlagSTP):           "true",
		specs.Env(lois.FlagSTPQ):          "0.1",
		specs.Env(lois.FlagRecordKeyFile): lois.SecretsDir + "/record/" + lois.RecordKeyFile,
		specs.EnvNATSUser:                 "secret:edge-lois-nats/user",
		specs.EnvMetricsAddr:              "127.0.0.1:8402", // serverWire's port + 1000: where the operator reads it
		specs.EnvHealthAddr:               "127.0.0.1:0",
	} {
		if e[k] != want {
			t.Errorf("%s = %q, want %q", k, e[k], want)
		}
	}
	allowed := map[string]bool{}
	for _, f := range siFlags {
		allowed[specs.Env(f)] = true
	}
	for k := range e {
		if strings.HasPrefix(k, "OBSCURA_") && !allowed[k] {
			t.Errorf("%s is no flag of lois si", k)
		}
	}
	sc := c.SecurityContext
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.RunAsNonRoot == nil || *sc.RunAsNonRoot ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "SYS_ADMIN"}) || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		sc.Privileged != nil && *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("security context beyond the documented exception: %+v", sc)
	}
	hostPaths := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.HostPath.Path] = string(*v.HostPath.Type)
		}
	}
	if len(hostPaths) != 2 || hostPaths["/dev/net/tun"] != "CharDevice" || hostPaths["/run/netns"] != "Directory" {
		t.Errorf("host paths %v", hostPaths)
	}
	// Node pinning: the SI runs on the node that has the server's namespace.
	if pod.NodeSelector["kubernetes.io/hostname"] != "node-a" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "lois.obscura.dev/servers" ||
		pod.Tolerations[0].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("server interface pinning: node selector %v, tolerations %+v", pod.NodeSelector, pod.Tolerations)
	}
	var cm corev1.ConfigMap
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge-lois-registrar"}, &cm); err != nil {
		t.Fatal(err)
	}
	if got := cm.Data["OBSCURA_WAIT_FOR"]; got != "edge-lois-ci-0,si-8080-0" {
		t.Errorf("the registrar waits for %q, want the CI and the operator's SI", got)
	}

	markAvailable(t, ns)
	waitReady(t, g, conds, metav1.ConditionTrue, common.ReasonReconciled)
	if si := meta.FindStatusCondition(g.Status.Conditions, ConditionServerInterfaces); si == nil || si.Status != metav1.ConditionTrue || g.Status.ServerReplicas != 1 {
		t.Errorf("ServerInterfaces %+v, serverReplicas %d", si, g.Status.ServerReplicas)
	}

	// Two server interfaces per service: one StatefulSet of two pods, each taking its name,
	// partition index and metrics port from its pod index, sharing the service's multi-queue
	// TUN and serverWire; the registrar partitions for and waits for both.
	g.Spec.Server.Replicas = 2
	update(t, g)
	eventually(t, "two server interfaces per service", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(&ss), &ss); err != nil {
			return err
		}
		if *ss.Spec.Replicas != 2 {
			return errorf("%d replicas", *ss.Spec.Replicas)
		}
		return nil
	})
	c = ss.Spec.Template.Spec.Containers[0]
	e = env(c)
	for k, want := range map[string]string{
		specs.Env(lois.FlagReplicaName):   "si-8080-$(POD_INDEX)",
		specs.Env(lois.FlagReplica):       "$(POD_INDEX)",
		specs.Env(lois.FlagTUN):           "lois-si-8080",
		specs.Env(lois.FlagTUNMultiQueue): "true",
		specs.Env(lois.FlagWireReusePort): "true",
		specs.Env(lois.FlagOrdinalPorts):  "true",
		specs.Env(lois.FlagWireListen):    "127.0.0.1:7402",
		specs.EnvMetricsAddr:              "127.0.0.1:8402", // + the pod index (--ordinal-ports)
	} {
		if e[k] != want {
			t.Errorf("two replicas: %s = %q, want %q", k, e[k], want)
		}
	}
	podIndex := -1
	for i, v := range c.Env {
		if v.Name == lois.EnvPodIndex && v.ValueFrom != nil && v.ValueFrom.FieldRef != nil &&
			v.ValueFrom.FieldRef.FieldPath == "metadata.labels['apps.kubernetes.io/pod-index']" {
			podIndex = i
		}
		if strings.Contains(v.Value, "$(POD_INDEX)") && (podIndex < 0 || podIndex > i) {
			t.Errorf("%s refers to POD_INDEX before it is set", v.Name)
		}
	}
	if podIndex < 0 {
		t.Error("no POD_INDEX from the pod index label")
	}
	eventually(t, "the registrar waits for both server interfaces", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(&cm), &cm); err != nil {
			return err
		}
		if got := cm.Data["OBSCURA_WAIT_FOR"]; got != "edge-lois-ci-0,si-8080-0,si-8080-1" || cm.Data["OBSCURA_PARTITIONS"] != "2" {
			return errorf("wait-for %q, partitions %q", got, cm.Data["OBSCURA_PARTITIONS"])
		}
		return nil
	})
	markAvailable(t, ns)
	waitReady(t, g, conds, metav1.ConditionTrue, common.ReasonReconciled)
	if si := meta.FindStatusCondition(g.Status.Conditions, ConditionServerInterfaces); si == nil || si.Status != metav1.ConditionTrue ||
		g.Status.ServerReplicas != 2 || !strings.Contains(si.Message, "2 of 2") {
		t.Errorf("two replicas: ServerInterfaces %+v, serverReplicas %d", si, g.Status.ServerReplicas)
	}

	// A second service gets server interfaces of its own; back to external, both go.
	s2 := g.Spec.Services[0]
	s2.Name, s2.Port, s2.ServerWire, s2.NetworkNamespace = "api", 8081, "127.0.0.1:7404", "api-ns" // metrics 8404, 8405
	s2.Backend.Address = "10.200.0.11"
	g.Spec.Services = append(g.Spec.Services, s2)
	update(t, g)
	eventually(t, "a server interface per service", func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge-lois-si-8081"}, &ss)
	})
	if e := env(ss.Spec.Template.Spec.Containers[0]); e[specs.Env(lois.FlagNetns)] != "/run/netns/api-ns" || e[specs.Env(lois.FlagReplicaName)] != "si-8081-$(POD_INDEX)" {
		t.Errorf("second SI: netns %q name %q", e[specs.Env(lois.FlagNetns)], e[specs.Env(lois.FlagReplicaName)])
	}
	g.Spec.Server.Placement, g.Spec.Server.DeviceNetworks = loisv1.ServerPlacementExternal, nil
	g.Spec.Server.NodeSelector, g.Spec.Server.Tolerations = nil, nil
	for i := range g.Spec.Services {
		g.Spec.Services[i].NetworkNamespace = ""
	}
	update(t, g)
	eventually(t, "the operator's server interfaces removed", func() error {
		var list appsv1.StatefulSetList
		if err := k8s.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels(lois.PodSelector(g, lois.RoleServer))); err != nil {
			return err
		}
		if len(list.Items) != 0 {
			return errorf("%d server interface StatefulSets left", len(list.Items))
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
			return err
		}
		si := meta.FindStatusCondition(g.Status.Conditions, ConditionServerInterfaces)
		if si == nil || si.Status != metav1.ConditionUnknown || si.Reason != ReasonServerInterfacesExternal || !strings.Contains(si.Message, "si-8081-1") {
			return errorf("ServerInterfaces %+v", si)
		}
		return nil
	})
}

// TestHeaderGatewayServerInterfaceRefusals: the server interface fields CEL refuses, and a
// namespace whose Pod Security level would refuse the SI's pod: Degraded with a reason that
// says so, nothing run.
func TestHeaderGatewayServerInterfaceRefusals(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		mut  func(*loisv1.HeaderGateway)
		msg  string
	}{
		{"netns-without-namespace", func(g *loisv1.HeaderGateway) { g.Spec.Services[0].NetworkNamespace = "" }, "needs every service's networkNamespace"},
		{"namespace-when-external", func(g *loisv1.HeaderGateway) { g.Spec.Server.Placement, g.Spec.Server.DeviceNetworks = "", nil },
			"applies only with server.placement netns"},
		{"netns-seventeen-replicas", func(g *loisv1.HeaderGateway) { g.Spec.Server.Replicas = 17 }, "should be less than or equal to 16"},
		{"netns-without-device-networks", func(g *loisv1.HeaderGateway) { g.Spec.Server.DeviceNetworks = nil }, "needs server.deviceNetworks"},
		{"bad-device-network", func(g *loisv1.HeaderGateway) { g.Spec.Server.DeviceNetworks = []string{"10.99.0.1"} }, "must be IPv4 prefixes"},
		{"ipv6-device-network", func(g *loisv1.HeaderGateway) { g.Spec.Server.DeviceNetworks = []string{"2001:db8::/64"} }, "must be IPv4 prefixes"},
		{"bad-namespace-name", func(g *loisv1.HeaderGateway) { g.Spec.Services[0].NetworkNamespace = "../etc" }, "networkNamespace"},
		{"unknown-placement", func(g *loisv1.HeaderGateway) { g.Spec.Server.Placement = "sidecar" }, "Unsupported value"},
		{"resources-when-external", func(g *loisv1.HeaderGateway) {
			g.Spec.Server.Placement, g.Spec.Server.DeviceNetworks, g.Spec.Services[0].NetworkNamespace = "", nil, ""
			g.Spec.Server.NodeSelector, g.Spec.Server.Tolerations = nil, nil
			g.Spec.Server.Resources = &corev1.ResourceRequirements{}
		}, "server.resources applies only"},
		{"pinning-when-external", func(g *loisv1.HeaderGateway) {
			g.Spec.Server.Placement, g.Spec.Server.DeviceNetworks, g.Spec.Services[0].NetworkNamespace = "", nil, ""
		}, "server.nodeSelector and server.tolerations apply only"},
		{"bad-node-selector-key", func(g *loisv1.HeaderGateway) {
			g.Spec.Server.NodeSelector = map[string]loisv1.LabelValue{"bad key!": "x"}
		},
			"nodeSelector keys must be label keys"},
		{"bad-node-selector-value", func(g *loisv1.HeaderGateway) {
			g.Spec.Cloud.NodeSelector = map[string]loisv1.LabelValue{"zone": "-a b"}
		},
			"spec.cloud.nodeSelector.zone: Invalid value"},
		{"toleration-operator", func(g *loisv1.HeaderGateway) {
			g.Spec.Cloud.Tolerations = []corev1.Toleration{{Key: "k", Operator: "In"}}
		},
			"operator is Exists or Equal"},
		{"toleration-effect", func(g *loisv1.HeaderGateway) { g.Spec.Server.Tolerations[0].Effect = "NoRun" }, "effect is NoSchedule"},
		{"toleration-without-key", func(g *loisv1.HeaderGateway) {
			g.Spec.Server.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpEqual, Value: "v"}}
		}, "without a key needs operator Exists"},
		{"toleration-exists-with-value", func(g *loisv1.HeaderGateway) { g.Spec.Server.Tolerations[0].Value = "v" }, "operator Exists has no value"},
		{"toleration-seconds", func(g *loisv1.HeaderGateway) { g.Spec.Server.Tolerations[0].TolerationSeconds = ptr.To[int64](30) },
			"tolerationSeconds applies only to effect NoExecute"},
	} {
		g := netnsGateway(t, ns)
		g.Name = c.name
		c.mut(g)
		err := k8s.Create(ctx, g)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: admitted or wrong message: %v", c.name, err)
		}
	}

	restricted := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-",
		Labels: map[string]string{LabelPodSecurityEnforce: "baseline"}}}
	create(t, restricted)
	g := netnsGateway(t, restricted.Name)
	create(t, g)
	conds := func() []metav1.Condition { return g.Status.Conditions }
	waitReadyMessage(t, g, conds, ReasonPodSecurityForbidsServerInterfaces, "enforces the baseline pod security level")
	var ss appsv1.StatefulSet
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: restricted.Name, Name: "edge-lois-si-8080"}, &ss); err == nil {
		t.Error("a server interface run where its pod would be refused")
	}
}
