package pda

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/obscura-iot/obscura/operators/api/common"
	pdav1 "github.com/obscura-iot/obscura/operators/api/pda/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/specstest"
)

var platform = Platform{Image: "obscura/pda:dev",
	Runtime: specs.Runtime{ImagePullPolicy: corev1.PullIfNotPresent, NATSURL: "nats://nats.obscura-system.svc:4222"}}

// sample reads config/samples' AggregationJob as the API server would default it, with a
// window that starts on a window boundary.
func sample(t *testing.T) (*pdav1.AggregationJob, metav1.Time, metav1.Time) {
	t.Helper()
	job := &pdav1.AggregationJob{}
	specstest.ReadSample(t, "pda_v1alpha1_aggregationjob.yaml", job)
	job.Namespace, job.UID = "security", "3f1c2a4e-0000-4000-8000-000000000001"
	job.Spec.Group, job.Spec.Window.Grace = pdav1.GroupRistretto255, metav1.Duration{Duration: 30 * time.Second}
	for i := range job.Spec.Participants {
		job.Spec.Participants[i].Quota = 100000
	}
	start := metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	return job, start, metav1.NewTime(start.Add(job.Spec.Window.Duration.Duration))
}

func TestProxyDomainGolden(t *testing.T) {
	job, start, end := sample(t)
	proxy, _, err := Params(job, start, end)
	if err != nil {
		t.Fatal(err)
	}
	h := ParamsHash(proxy)
	specstest.Golden(t, "proxy_domain.yaml", proxy, ServiceAccount(job, ProxyDomain), NATSSecret(job, ProxyDomain, []byte("not-a-real-password")),
		Proxy(job, platform, h), ProxyService(job, platform), Mixer(job, platform, h), Oracle(job, platform, h))
}

func TestDatabaseDomainGolden(t *testing.T) {
	job, start, end := sample(t)
	_, db, err := Params(job, start, end)
	if err != nil {
		t.Fatal(err)
	}
	h := ParamsHash(db)
	specstest.Golden(t, "db_domain.yaml", db, ServiceAccount(job, DBDomain), NATSSecret(job, DBDomain, []byte("not-a-real-password")),
		Frontend(job, platform, h), Shards(job, platform, h, job.Spec.Shards), ShardService(job))
}

// TestTrustDomainsStaySeparate: every object lives in its domain's namespace, runs as
// that domain's service account with that domain's NATS user and key file, and no pod of one
// domain references a Secret of the other.
func TestTrustDomainsStaySeparate(t *testing.T) {
	job, start, end := sample(t)
	proxyCM, dbCM, err := Params(job, start, end)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := dbCM.Data[specs.Env("participants")]; ok {
		t.Error("the database's parameters list the participants")
	}
	if got := proxyCM.Data[specs.Env("participants")]; got != "acme.vendors.obscura.dev,globex.vendors.obscura.dev,initech.vendors.obscura.dev,umbrella.vendors.obscura.dev" {
		t.Errorf("participants = %q (the ingress compares bare CNs)", got)
	}
	type domainPod struct {
		domain Domain
		tpl    corev1.PodTemplateSpec
		ns     string
	}
	pods := map[string]domainPod{
		RoleProxy:    {ProxyDomain, Proxy(job, platform, "h").Spec.Template, Proxy(job, platform, "h").Namespace},
		RoleMixer:    {ProxyDomain, Mixer(job, platform, "h").Spec.Template, Mixer(job, platform, "h").Namespace},
		RoleOracle:   {ProxyDomain, Oracle(job, platform, "h").Spec.Template, Oracle(job, platform, "h").Namespace},
		RoleFrontend: {DBDomain, Frontend(job, platform, "h").Spec.Template, Frontend(job, platform, "h").Namespace},
		RoleShard:    {DBDomain, Shards(job, platform, "h", 2).Spec.Template, Shards(job, platform, "h", 2).Namespace},
	}
	for role, p := range pods {
		ps, c := p.tpl.Spec, p.tpl.Spec.Containers[0]
		wantNS, wantKey, otherKey := job.Spec.Proxy.Namespace, job.Spec.Proxy.Keys.SecretRef.Name, job.Spec.Database.Keys.SecretRef.Name
		if p.domain == DBDomain {
			wantNS, wantKey, otherKey = job.Spec.Database.Namespace, otherKey, wantKey
		}
		switch {
		case p.ns != wantNS:
			t.Errorf("%s runs in %s, want %s", role, p.ns, wantNS)
		case ps.ServiceAccountName != serviceAccountName(job, p.domain):
			t.Errorf("%s runs as %s", role, ps.ServiceAccountName)
		case ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken:
			t.Errorf("%s mounts an API token", role)
		case ps.SecurityContext == nil || !*ps.SecurityContext.RunAsNonRoot || ps.SecurityContext.SeccompProfile == nil:
			t.Errorf("%s pod security context is not restricted", role)
		case !*c.SecurityContext.ReadOnlyRootFilesystem || *c.SecurityContext.AllowPrivilegeEscalation || c.SecurityContext.Capabilities.Drop[0] != "ALL":
			t.Errorf("%s container security context is not restricted", role)
		case len(c.Args) != 1 || c.Args[0] != role:
			t.Errorf("%s runs %v", role, c.Args)
		case p.tpl.Annotations[ParamsHashAnnotation] != "h":
			t.Errorf("%s lacks the parameters hash", role)
		}
		for _, v := range ps.Volumes {
			if v.Secret != nil && v.Secret.SecretName == otherKey {
				t.Errorf("%s mounts the other domain's key Secret %s", role, otherKey)
			}
			if v.Secret != nil && v.Name == "keys" && v.Secret.SecretName != wantKey {
				t.Errorf("%s mounts key Secret %s, want %s", role, v.Secret.SecretName, wantKey)
			}
		}
		if hasKey, want := hasEnv(c.Env, specs.Env("keys")), role != RoleShard; hasKey != want {
			t.Errorf("%s: key file mounted = %v, want %v (a shard never decrypts)", role, hasKey, want)
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name != NATSSecretName(job, p.domain) {
				t.Errorf("%s reads %s from Secret %s", role, e.Name, e.ValueFrom.SecretKeyRef.Name)
			}
		}
	}
}

func TestShardRedisPerShard(t *testing.T) {
	job, _, _ := sample(t)
	for tmpl, want := range map[string]string{
		"":                              "redis-$(POD_INDEX).redis:6379",
		"{shard}-redis.pda-db.svc:6379": "$(POD_NAME)-redis.pda-db.svc:6379",
	} {
		job.Spec.Database.Redis = tmpl
		env := Shards(job, platform, "h", 3).Spec.Template.Spec.Containers[0].Env
		got, order := "", map[string]int{}
		for i, e := range env {
			order[e.Name] = i
			if e.Name == specs.Env("redis-addr") {
				got = e.Value
			}
		}
		if got != want {
			t.Errorf("template %q: redis address %q, want %q", tmpl, got, want)
		}
		// $(VAR) expands only variables defined earlier.
		if order["POD_INDEX"] > order[specs.Env("redis-addr")] || order[specs.EnvPodName] > order[specs.Env("redis-addr")] {
			t.Errorf("POD_INDEX/POD_NAME defined after the Redis address: %v", order)
		}
	}
	if ids := ShardIDs(job, 3); strings.Join(ids, ",") != "attackers-hourly-db-shard-0,attackers-hourly-db-shard-1,attackers-hourly-db-shard-2" {
		t.Errorf("shard ids %v", ids)
	}
}

func TestParams(t *testing.T) {
	job, start, end := sample(t)
	length, w := Window(start, end)
	if length.Duration != time.Hour || w != uint64(start.Unix())/3600 {
		t.Errorf("window %s id %d", length.Duration, w)
	}
	before, _, _ := Params(job, start, end)
	job.Spec.Key = pdav1.KeySpec{Type: pdav1.KeyDomain, MaxLength: ptrTo[int32](100)}
	after, _, _ := Params(job, start, end)
	if after.Data[specs.Env("chunks")] != "4" {
		t.Errorf("chunks for 100-byte keys = %s, want ⌈102/30⌉ = 4", after.Data[specs.Env("chunks")])
	}
	if ParamsHash(before) == ParamsHash(after) {
		t.Error("a parameter change left the hash unchanged: pods would keep the old parameters")
	}
	job.Spec.Values = &pdav1.ValueDomain{Items: []string{"1", "high"}}
	if _, _, err := Params(job, start, end); err == nil {
		t.Error("a non-integer value was accepted; the services would refuse to start")
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestVaultKeysGolden: with keys.vault a role gets the same OBSCURA_VAULT_* variables as the
// Mohito roles (the platform's address when the reference has none) and its service account
// token for the Kubernetes auth login, and no key volume; a shard, which never decrypts, gets
// neither.
func TestVaultKeysGolden(t *testing.T) {
	job, start, end := sample(t)
	job.Spec.Proxy.Keys = common.KeyReference{Vault: &common.VaultKeyReference{
		Address: "https://vault.proxy.example:8200", Role: "pda-proxy", Path: "pda/proxy"}}
	job.Spec.Database.Keys = common.KeyReference{Vault: &common.VaultKeyReference{
		Role: "pda-db", Mount: "kv", Path: "pda/db", Field: "bundle"}}
	pl := platform
	pl.VaultAddress = "https://vault.vault.svc:8200"
	proxy, db, err := Params(job, start, end)
	if err != nil {
		t.Fatal(err)
	}
	ph, dh := ParamsHash(proxy), ParamsHash(db)
	specstest.Golden(t, "vault_keys.yaml", Oracle(job, pl, ph), Frontend(job, pl, dh), Shards(job, pl, dh, 1))
}

func hasEnv(env []corev1.EnvVar, name string) bool {
	for _, e := range env {
		if e.Name == name {
			return true
		}
	}
	return false
}

// pods are every role's pod template of the sample job under pl.
func pods(t *testing.T, pl Platform) map[string]corev1.PodTemplateSpec {
	job, _, _ := sample(t)
	return map[string]corev1.PodTemplateSpec{
		RoleProxy:    Proxy(job, pl, "h").Spec.Template,
		RoleMixer:    Mixer(job, pl, "h").Spec.Template,
		RoleOracle:   Oracle(job, pl, "h").Spec.Template,
		RoleFrontend: Frontend(job, pl, "h").Spec.Template,
		RoleShard:    Shards(job, pl, "h", 2).Spec.Template,
	}
}

// TestRolesFollowTheSharedConventions: the PDA roles run as every system's roles do
// (services/pkg/daemon): variables OBSCURA_<FLAG>, the NATS password as a mounted file and never
// in the environment, metrics and health on their own ports with the probes on health.
func TestRolesFollowTheSharedConventions(t *testing.T) {
	job, _, _ := sample(t)
	for role, tpl := range pods(t, platform) {
		c := tpl.Spec.Containers[0]
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
			if strings.HasPrefix(e.Name, "OBSCURA_PDA_") {
				t.Errorf("%s: %s: the OBSCURA_PDA_ prefix is gone", role, e.Name)
			}
			if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && r.SecretKeyRef.Key == specs.NATSPasswordKey {
				t.Errorf("%s: %s holds the NATS password (visible in the environment)", role, e.Name)
			}
		}
		if env[specs.EnvNATSPasswordFile] != specs.NATSDir+"/password" || env[specs.EnvNATSURL] != platform.NATSURL || !hasEnv(c.Env, specs.EnvNATSUser) {
			t.Errorf("%s: NATS settings %v", role, env)
		}
		mounted := false
		for _, v := range tpl.Spec.Volumes {
			if v.Name == "nats" && v.Secret != nil && v.Secret.SecretName == NATSSecretName(job, domainOf(role)) &&
				len(v.Secret.Items) == 1 && v.Secret.Items[0].Key == specs.NATSPasswordKey {
				mounted = true
			}
		}
		if !mounted {
			t.Errorf("%s does not mount its domain's NATS password as a file: %+v", role, tpl.Spec.Volumes)
		}
		if env[specs.EnvMetricsAddr] != ":"+strconv.Itoa(specs.MetricsPort) || env[specs.EnvHealthAddr] != ":"+strconv.Itoa(specs.HealthPort) {
			t.Errorf("%s: metrics %q health %q", role, env[specs.EnvMetricsAddr], env[specs.EnvHealthAddr])
		}
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		if ports["metrics"] != specs.MetricsPort || ports["health"] != specs.HealthPort {
			t.Errorf("%s: ports %v", role, ports)
		}
		for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.StrVal != "health" {
				t.Errorf("%s: probe %+v, want one on the health port", role, p)
			}
		}
	}
}

func domainOf(role string) Domain {
	if role == RoleFrontend || role == RoleShard {
		return DBDomain
	}
	return ProxyDomain
}

// TestHostNetworkMode: on the node's network the PDA pods get what the Mohito pods get:
// metrics and health on 127.0.0.1:0, exec probes of the pda binary, no declared port, the
// proxy's fixed listener on 127.0.0.1 with SO_REUSEPORT, on the platform's proxy port (the
// node's 8443 is the edge's), which its Service targets by number (no declared port to name).
func TestHostNetworkMode(t *testing.T) {
	pl := platform
	pl.HostNetwork = true
	pl.ProxyPort = 8453
	job, _, _ := sample(t)
	if svc := ProxyService(job, pl); svc.Spec.Ports[0].Port != 8453 || svc.Spec.Ports[0].TargetPort.IntValue() != 8453 {
		t.Errorf("proxy Service ports %+v, want 8453 → 8453", svc.Spec.Ports)
	}
	for role, tpl := range pods(t, pl) {
		c := tpl.Spec.Containers[0]
		if !tpl.Spec.HostNetwork || len(c.Ports) != 0 {
			t.Errorf("%s: hostNetwork %v ports %v", role, tpl.Spec.HostNetwork, c.Ports)
		}
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		if env[specs.EnvMetricsAddr] != "127.0.0.1:0" || env[specs.EnvHealthAddr] != "127.0.0.1:0" || env[specs.EnvAddrFile] != specs.RunDir+"/addr" {
			t.Errorf("%s: metrics %q health %q addr file %q", role, env[specs.EnvMetricsAddr], env[specs.EnvHealthAddr], env[specs.EnvAddrFile])
		}
		for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
			if p == nil || p.Exec == nil || p.Exec.Command[0] != Binary || p.Exec.Command[1] != "probe" {
				t.Errorf("%s: probe %+v, want an exec probe of %s", role, p, Binary)
			}
		}
		_, reuse := env[specs.EnvReusePort]
		if role == RoleProxy && (env[specs.EnvListen] != "127.0.0.1:"+strconv.Itoa(pl.ProxyPort) || !reuse) {
			t.Errorf("proxy listens on %q reuse %v", env[specs.EnvListen], reuse)
		} else if role != RoleProxy && reuse {
			t.Errorf("%s sets %s without a fixed listener", role, specs.EnvReusePort)
		}
	}
}

// TestShardsSpreadOverNodes: the database shards carry one topology spread constraint by
// hostname, maxSkew 1, over exactly their StatefulSet's pods, with the runtime's
// whenUnsatisfiable; the single-replica roles carry none, and the shards none without a runtime
// setting.
func TestShardsSpreadOverNodes(t *testing.T) {
	job, _, _ := sample(t)
	for _, mode := range []corev1.UnsatisfiableConstraintAction{corev1.ScheduleAnyway, corev1.DoNotSchedule, ""} {
		pl := platform
		pl.TopologySpread = mode
		sts := Shards(job, pl, "h", 3)
		c := sts.Spec.Template.Spec.TopologySpreadConstraints
		switch {
		case mode == "" && len(c) != 0:
			t.Errorf("shards without --topology-spread: %+v", c)
		case mode != "" && (len(c) != 1 || c[0].MaxSkew != 1 || c[0].TopologyKey != corev1.LabelHostname || c[0].WhenUnsatisfiable != mode ||
			c[0].LabelSelector == nil || !reflect.DeepEqual(c[0].LabelSelector.MatchLabels, sts.Spec.Selector.MatchLabels)):
			t.Errorf("shards (%s): %+v, want maxSkew 1 by hostname over %v", mode, c, sts.Spec.Selector.MatchLabels)
		}
		for name, tpl := range map[string]corev1.PodTemplateSpec{
			"proxy": Proxy(job, pl, "h").Spec.Template, "mixer": Mixer(job, pl, "h").Spec.Template,
			"oracle": Oracle(job, pl, "h").Spec.Template, "frontend": Frontend(job, pl, "h").Spec.Template,
		} {
			if c := tpl.Spec.TopologySpreadConstraints; len(c) != 0 {
				t.Errorf("%s is spread: %+v", name, c)
			}
		}
	}
}
