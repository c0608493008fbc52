package specs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/obscura-iot/obscura/operators/api/common"
	pdav1 "github.com/obscura-iot/obscura/operators/api/pda/v1alpha1"
)

var pdaPlatform = PDAPlatform{Image: "obscura/pda:dev",
	Runtime: Runtime{ImagePullPolicy: corev1.PullIfNotPresent, NATSURL: "nats://nats.obscura-system.svc:4222"}}

// pdaSample reads config/samples' AggregationJob as the API server would default it, with a
// window that starts on a window boundary.
func pdaSample(t *testing.T) (*pdav1.AggregationJob, metav1.Time, metav1.Time) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "samples", "pda_v1alpha1_aggregationjob.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	job := &pdav1.AggregationJob{}
	if err := yaml.UnmarshalStrict(b, job); err != nil {
		t.Fatal(err)
	}
	job.Namespace, job.UID = "security", "3f1c2a4e-0000-4000-8000-000000000001"
	job.Spec.Group, job.Spec.Window.Grace = pdav1.GroupRistretto255, metav1.Duration{Duration: 30 * time.Second}
	for i := range job.Spec.Participants {
		job.Spec.Participants[i].Quota = 100000
	}
	start := metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	return job, start, metav1.NewTime(start.Add(job.Spec.Window.Duration.Duration))
}

func TestPDAProxyDomainGolden(t *testing.T) {
	job, start, end := pdaSample(t)
	proxy, _, err := PDAParams(job, start, end)
	if err != nil {
		t.Fatal(err)
	}
	h := PDAParamsHash(proxy)
	golden(t, "pda_proxy.yaml", proxy, PDAServiceAccount(job, PDAProxyDomain), PDANATSSecret(job, PDAProxyDomain, []byte("not-a-real-password")),
		PDAProxy(job, pdaPlatform, h), PDAProxyService(job), PDAMixer(job, pdaPlatform, h), PDAOracle(job, pdaPlatform, h))
}

func TestPDADatabaseDomainGolden(t *testing.T) {
	job, start, end := pdaSample(t)
	_, db, err := PDAParams(job, start, end)
	if err != nil {
		t.Fatal(err)
	}
	h := PDAParamsHash(db)
	golden(t, "pda_db.yaml", db, PDAServiceAccount(job, PDADBDomain), PDANATSSecret(job, PDADBDomain, []byte("not-a-real-password")),
		PDAFrontend(job, pdaPlatform, h), PDAShards(job, pdaPlatform, h, job.Spec.Shards), PDAShardService(job))
}

// TestPDATrustDomainsStaySeparate: every object lives in its domain's namespace, runs as
// that domain's service account with that domain's NATS user and key file, and no pod of one
// domain references a Secret of the other.
func TestPDATrustDomainsStaySeparate(t *testing.T) {
	job, start, end := pdaSample(t)
	proxyCM, dbCM, err := PDAParams(job, start, end)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := dbCM.Data[PDAEnv("participants")]; ok {
		t.Error("the database's parameters list the participants")
	}
	if got := proxyCM.Data[PDAEnv("participants")]; got != "acme.vendors.obscura.dev,globex.vendors.obscura.dev,initech.vendors.obscura.dev,umbrella.vendors.obscura.dev" {
		t.Errorf("participants = %q (the ingress compares bare CNs)", got)
	}
	type domainPod struct {
		domain PDADomain
		tpl    corev1.PodTemplateSpec
		ns     string
	}
	pods := map[string]domainPod{
		PDARoleProxy:    {PDAProxyDomain, PDAProxy(job, pdaPlatform, "h").Spec.Template, PDAProxy(job, pdaPlatform, "h").Namespace},
		PDARoleMixer:    {PDAProxyDomain, PDAMixer(job, pdaPlatform, "h").Spec.Template, PDAMixer(job, pdaPlatform, "h").Namespace},
		PDARoleOracle:   {PDAProxyDomain, PDAOracle(job, pdaPlatform, "h").Spec.Template, PDAOracle(job, pdaPlatform, "h").Namespace},
		PDARoleFrontend: {PDADBDomain, PDAFrontend(job, pdaPlatform, "h").Spec.Template, PDAFrontend(job, pdaPlatform, "h").Namespace},
		PDARoleShard:    {PDADBDomain, PDAShards(job, pdaPlatform, "h", 2).Spec.Template, PDAShards(job, pdaPlatform, "h", 2).Namespace},
	}
	for role, p := range pods {
		ps, c := p.tpl.Spec, p.tpl.Spec.Containers[0]
		wantNS, wantKey, otherKey := job.Spec.Proxy.Namespace, job.Spec.Proxy.Keys.SecretRef.Name, job.Spec.Database.Keys.SecretRef.Name
		if p.domain == PDADBDomain {
			wantNS, wantKey, otherKey = job.Spec.Database.Namespace, otherKey, wantKey
		}
		switch {
		case p.ns != wantNS:
			t.Errorf("%s runs in %s, want %s", role, p.ns, wantNS)
		case ps.ServiceAccountName != pdaServiceAccountName(job, p.domain):
			t.Errorf("%s runs as %s", role, ps.ServiceAccountName)
		case ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken:
			t.Errorf("%s mounts an API token", role)
		case ps.SecurityContext == nil || !*ps.SecurityContext.RunAsNonRoot || ps.SecurityContext.SeccompProfile == nil:
			t.Errorf("%s pod security context is not restricted", role)
		case !*c.SecurityContext.ReadOnlyRootFilesystem || *c.SecurityContext.AllowPrivilegeEscalation || c.SecurityContext.Capabilities.Drop[0] != "ALL":
			t.Errorf("%s container security context is not restricted", role)
		case len(c.Args) != 1 || c.Args[0] != role:
			t.Errorf("%s runs %v", role, c.Args)
		case p.tpl.Annotations[PDAParamsHashAnnotation] != "h":
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
		if hasKey, want := hasEnv(c.Env, PDAEnv("keys")), role != PDARoleShard; hasKey != want {
			t.Errorf("%s: key file mounted = %v, want %v (a shard never decrypts)", role, hasKey, want)
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name != PDANATSSecretName(job, p.domain) {
				t.Errorf("%s reads %s from Secret %s", role, e.Name, e.ValueFrom.SecretKeyRef.Name)
			}
		}
	}
}

func TestPDAShardRedisPerShard(t *testing.T) {
	job, _, _ := pdaSample(t)
	for tmpl, want := range map[string]string{
		"":                              "redis-$(POD_INDEX).redis:6379",
		"{shard}-redis.pda-db.svc:6379": "$(POD_NAME)-redis.pda-db.svc:6379",
	} {
		job.Spec.Database.Redis = tmpl
		env := PDAShards(job, pdaPlatform, "h", 3).Spec.Template.Spec.Containers[0].Env
		got, order := "", map[string]int{}
		for i, e := range env {
			order[e.Name] = i
			if e.Name == PDAEnv("redis-addr") {
				got = e.Value
			}
		}
		if got != want {
			t.Errorf("template %q: redis address %q, want %q", tmpl, got, want)
		}
		// $(VAR) expands only variables defined earlier.
		if order["POD_INDEX"] > order[PDAEnv("redis-addr")] || order[EnvPodName] > order[PDAEnv("redis-addr")] {
			t.Errorf("POD_INDEX/POD_NAME defined after the Redis address: %v", order)
		}
	}
	if ids := PDAShardIDs(job, 3); strings.Join(ids, ",") != "attackers-hourly-db-shard-0,attackers-hourly-db-shard-1,attackers-hourly-db-shard-2" {
		t.Errorf("shard ids %v", ids)
	}
}

func TestPDAParams(t *testing.T) {
	job, start, end := pdaSample(t)
	length, w := PDAWindow(start, end)
	if length.Duration != time.Hour || w != uint64(start.Unix())/3600 {
		t.Errorf("window %s id %d", length.Duration, w)
	}
	before, _, _ := PDAParams(job, start, end)
	job.Spec.Key = pdav1.KeySpec{Type: pdav1.KeyDomain, MaxLength: ptrTo[int32](100)}
	after, _, _ := PDAParams(job, start, end)
	if after.Data[PDAEnv("chunks")] != "4" {
		t.Errorf("chunks for 100-byte keys = %s, want ⌈102/30⌉ = 4", after.Data[PDAEnv("chunks")])
	}
	if PDAParamsHash(before) == PDAParamsHash(after) {
		t.Error("a parameter change left the hash unchanged: pods would keep the old parameters")
	}
	job.Spec.Values = &pdav1.ValueDomain{Items: []string{"1", "high"}}
	if _, _, err := PDAParams(job, start, end); err == nil {
		t.Error("a non-integer value was accepted; the services would refuse to start")
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestPDAVaultKeysGolden: with keys.vault a role gets the same OBSCURA_VAULT_* variables as the
// Mohito roles (the platform's address when the reference has none) and its service account
// token for the Kubernetes auth login, and no key volume; a shard, which never decrypts, gets
// neither.
func TestPDAVaultKeysGolden(t *testing.T) {
	job, start, end := pdaSample(t)
	job.Spec.Proxy.Keys = common.KeyReference{Vault: &common.VaultKeyReference{
		Address: "https://vault.proxy.example:8200", Role: "pda-proxy", Path: "pda/proxy"}}
	job.Spec.Database.Keys = common.KeyReference{Vault: &common.VaultKeyReference{
		Role: "pda-db", Mount: "kv", Path: "pda/db", Field: "bundle"}}
	pl := pdaPlatform
	pl.VaultAddress = "https://vault.vault.svc:8200"
	proxy, db, err := PDAParams(job, start, end)
	if err != nil {
		t.Fatal(err)
	}
	ph, dh := PDAParamsHash(proxy), PDAParamsHash(db)
	golden(t, "pda_vault.yaml", PDAOracle(job, pl, ph), PDAFrontend(job, pl, dh), PDAShards(job, pl, dh, 1))
}
