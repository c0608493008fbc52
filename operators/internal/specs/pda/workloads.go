package pda

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	pdav1 "github.com/obscura-iot/obscura/operators/api/pda/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	pdacontract "github.com/obscura-iot/obscura/services/pkg/pda/contract"
)

// How the operator runs the PDA services (docs/pda.md, docs/operators-pda.md): one image runs
// every role as `pda <role>`; flags, environment (specs.Env), the NATS password file and the
// ports follow the conventions every system shares (package specs, services/pkg/daemon).
const (
	// Binary is the image's entrypoint (hack/images), used by exec probes.
	Binary = "/usr/local/bin/pda"

	RoleProxy    = "proxy"
	RoleMixer    = "mixer"
	RoleOracle   = "oracle"
	RoleFrontend = "db-frontend"
	RoleShard    = "db-shard"

	// ProxyPort is the participant-facing HTTPS (mTLS) port of the proxy ingress.
	ProxyPort = 8443

	// SecretsDir is where a pod's key file and (proxy) TLS files are mounted.
	SecretsDir = "/var/run/secrets/pda"
	// ProxyKeyFile and DBKeyFile are the key files `pda keygen` writes.
	ProxyKeyFile = "proxy.json"
	DBKeyFile    = "db.json"

	// Labels that tie a workload in a trust-domain namespace to its AggregationJob: owner
	// references cannot cross namespaces, so these and the job's finalizer do their work.
	LabelJob          = "pda.obscura.dev/job"
	LabelJobNamespace = "pda.obscura.dev/job-namespace"
	LabelJobUID       = "pda.obscura.dev/job-uid"

	// ParamsHashAnnotation on a pod template carries the hash of the public parameters, so
	// a change rolls the pods.
	ParamsHashAnnotation = "pda.obscura.dev/params-hash"

	// DefaultProxyRedis and DefaultShardRedis are the trust domains' Redis addresses when the
	// job names none (relative to the domain's namespace).
	DefaultProxyRedis = "redis:6379"
	DefaultShardRedis = "redis-{ordinal}.redis:6379"
)

// Platform is what the operator knows about where the PDA services run.
type Platform struct {
	// Image runs every PDA role (`pda proxy`, `pda db-shard`, …).
	Image string
	// ProxyPort is the proxy ingress's HTTPS (mTLS) port; 0 means ProxyPort. On the node's
	// network it must differ from every other fixed port there (the edge's 8443 among them).
	ProxyPort int
	specs.Runtime
}

// Validate reports what is missing for workloads to be built.
func (p Platform) Validate() error {
	if p.Image == "" || p.NATSURL == "" {
		return errors.New("the operator needs --pda-image and --nats-url to run PDA workloads")
	}
	return nil
}

// Domain names one trust domain of a job.
type Domain string

const (
	ProxyDomain Domain = "proxy"
	DBDomain    Domain = "db"
)

func labels(job *pdav1.AggregationJob, component string) map[string]string {
	l := specs.Labels("pda", job.Name, component)
	l[LabelJob], l[LabelJobNamespace], l[LabelJobUID] = job.Name, job.Namespace, string(job.UID)
	return l
}

// selector identifies a role's pods; it never changes (selectors are immutable). The job's
// namespace is part of it: two jobs of one name in two namespaces may share a trust domain.
func selector(l map[string]string) map[string]string {
	s := specs.Selector(l)
	s[LabelJobNamespace] = l[LabelJobNamespace]
	return s
}

// JobSelector selects every object the operator runs for job, in any namespace.
func JobSelector(job *pdav1.AggregationJob) map[string]string {
	return map[string]string{LabelJobUID: string(job.UID)}
}

func (d Domain) namespace(job *pdav1.AggregationJob) string {
	if d == ProxyDomain {
		return job.Spec.Proxy.Namespace
	}
	return job.Spec.Database.Namespace
}

// account and user are the domain's NATS account and the user its roles connect as.
func (d Domain) account() (account, user string) {
	if d == ProxyDomain {
		return pdacontract.ProxyAccount, pdacontract.ProxyUser
	}
	return pdacontract.DBAccount, pdacontract.DBUser
}

// Name is the name of a job's object for a role or domain, e.g. attackers-db-shard.
func Name(job *pdav1.AggregationJob, part string) string { return job.Name + "-" + part }

func serviceAccountName(job *pdav1.AggregationJob, d Domain) string {
	return Name(job, "pda-"+string(d))
}

// NATSSecretName is the Secret holding a domain's NATS user and password.
func NATSSecretName(job *pdav1.AggregationJob, d Domain) string {
	return Name(job, "pda-"+string(d)+"-nats")
}

// ParamsName is the ConfigMap holding a domain's view of the job's public parameters.
func ParamsName(job *pdav1.AggregationJob) string { return Name(job, "pda-params") }

// TLSSecretName is the proxy's serving Secret (tls.crt, tls.key and ca.crt, the CA of the
// participants' client certificates), as cert-manager writes it. The operator does not
// create it; the proxy pods wait for it.
func TLSSecretName(job *pdav1.AggregationJob) string { return Name(job, "proxy-tls") }

// ShardIDs are the shard ids of the ring: the shard StatefulSet's pod names.
func ShardIDs(job *pdav1.AggregationJob, shards int32) []string {
	ids := make([]string, shards)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", Name(job, RoleShard), i)
	}
	return ids
}

// ServiceAccount runs one domain's pods, bound to nothing and without an API token: no PDA
// role talks to the Kubernetes API.
func ServiceAccount(job *pdav1.AggregationJob, d Domain) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		ObjectMeta:                   metav1.ObjectMeta{Name: serviceAccountName(job, d), Namespace: d.namespace(job), Labels: labels(job, string(d))},
		AutomountServiceAccountToken: ptr.To(false),
	}
}

// NATSSecret is a domain's NATS credentials.
func NATSSecret(job *pdav1.AggregationJob, d Domain, password []byte) *corev1.Secret {
	account, user := d.account()
	return specs.NATSSecret(d.namespace(job), NATSSecretName(job, d), account, user, password, labels(job, string(d)))
}

// Window returns the window length the services run with and the services' id of the job's
// window: window ids are Unix seconds ÷ length, so a start that is a multiple of the length
// makes the job's window exactly one services window.
func Window(start, end metav1.Time) (length metav1.Duration, id uint64) {
	l := end.Sub(start.Time).Round(1e9)
	if l < 1e9 {
		l = 1e9
	}
	return metav1.Duration{Duration: l}, uint64(start.Unix()) / uint64(l.Seconds())
}

// chunks is n_chunks of E_PRX(k): a canonical key of L bytes takes ⌈(L + 2) / 30⌉ chunks
// (spec §5, U7); IP keys are at most 16 bytes, so one.
func chunks(k pdav1.KeySpec) int {
	switch k.Type {
	case pdav1.KeyIP, pdav1.KeyIPv4, pdav1.KeyIPv6:
		return 1
	}
	l := 238
	if k.MaxLength != nil {
		l = int(*k.MaxLength)
	}
	return int(math.Ceil(float64(l+2) / 30))
}

// Params are the two domains' ConfigMaps of the job's public parameters, as environment
// variables the services read (envFrom). The proxy's also lists the participants. They hold
// nothing secret: both domains and every participant agree on them.
func Params(job *pdav1.AggregationJob, start, end metav1.Time) (proxy, db *corev1.ConfigMap, err error) {
	length, _ := Window(start, end)
	group := "ristretto255"
	if job.Spec.Group == pdav1.GroupP256 {
		group = "p256"
	}
	var values []string
	if job.Spec.Values != nil {
		for _, v := range job.Spec.Values.Items {
			if _, err := strconv.ParseUint(v, 10, 16); err != nil {
				return nil, nil, fmt.Errorf("value %q: the PDA services take values as integers in [0, 65535]", v)
			}
			values = append(values, v)
		}
	}
	data := map[string]string{
		specs.Env("deployment"):       job.Name,
		specs.Env("group"):            group,
		specs.Env("threshold"):        strconv.Itoa(int(job.Spec.Threshold)),
		specs.Env("count-mode"):       "distinct_participants",
		specs.Env("chunks"):           strconv.Itoa(chunks(job.Spec.Key)),
		specs.Env("values"):           strings.Join(values, ","),
		specs.Env("proxy-public-key"): job.Spec.Proxy.PublicKey,
		specs.Env("db-public-key"):    job.Spec.Database.PublicKey,
		specs.Env("window"):           length.Duration.String(),
		specs.Env("grace"):            job.Spec.Window.Grace.Duration.String(),
	}
	proxyData := make(map[string]string, len(data)+2)
	for k, v := range data {
		proxyData[k] = v
	}
	// The ingress compares the client certificate's CN; identities are written "CN=…".
	// One quota applies to every participant in the services: the smallest keeps every
	// participant within its own.
	ids := make([]string, 0, len(job.Spec.Participants))
	quota := int64(0)
	for _, p := range job.Spec.Participants {
		ids = append(ids, strings.TrimPrefix(p.Identity, "CN="))
		if q := p.Quota; q > 0 && (quota == 0 || q < quota) {
			quota = q
		}
	}
	slices.Sort(ids)
	proxyData[specs.Env("participants")] = strings.Join(ids, ",")
	if quota > 0 {
		proxyData[specs.Env("quota")] = strconv.FormatInt(quota, 10)
	}
	cm := func(d Domain, data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: ParamsName(job), Namespace: d.namespace(job), Labels: labels(job, string(d))},
			Data:       data,
		}
	}
	return cm(ProxyDomain, proxyData), cm(DBDomain, data), nil
}

// ParamsHash is the hash a params ConfigMap's pods carry.
func ParamsHash(cm *corev1.ConfigMap) string {
	keys := make([]string, 0, len(cm.Data))
	for k := range cm.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%q\n", k, cm.Data[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// pod is the shared pod builder's description of one PDA role in domain d, filled in with
// what every role of the job reads: the domain's parameters, NATS user and key.
func pod(job *pdav1.AggregationJob, d Domain, role, hash string, p specs.Pod) specs.Pod {
	td, keyFile := job.Spec.Proxy, ProxyKeyFile
	if d == DBDomain {
		td, keyFile = job.Spec.Database, DBKeyFile
	}
	p.Role = role
	p.Labels = labels(job, role)
	p.Annotations = map[string]string{ParamsHashAnnotation: hash}
	p.ServiceAccount = serviceAccountName(job, d)
	p.NATSSecret = NATSSecretName(job, d)
	p.EnvFrom = ParamsName(job)
	// With keys.vault the role logs in with its domain's service account token (Kubernetes
	// auth) and reads the bundle once at start, like the Mohito roles.
	p.Key = &specs.Key{Ref: &td.Keys, Env: specs.Env("keys"), Dir: SecretsDir + "/keys", File: keyFile}
	return p
}

// keyless removes the key of a role that never decrypts (least privilege).
func keyless(p specs.Pod) specs.Pod {
	p.Key = nil
	return p
}

func deployment(job *pdav1.AggregationJob, d Domain, p specs.Pod, pl Platform, replicas int32, strategy appsv1.DeploymentStrategyType) *appsv1.Deployment {
	p.Image, p.Binary = pl.Image, Binary
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: Name(job, p.Role), Namespace: d.namespace(job), Labels: p.Labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: selector(p.Labels)},
			Strategy: appsv1.DeploymentStrategy{Type: strategy},
			Template: p.Template(pl.Runtime),
		},
	}
}

func replicas(td pdav1.TrustDomain) int32 { return max(td.Replicas, 1) }

// Proxy is the participant-facing ingress (mTLS): stateless, any number of replicas behind
// ProxyService. It reaches the proxy domain's Redis for sessions, quotas and rates.
func Proxy(job *pdav1.AggregationJob, pl Platform, hash string) *appsv1.Deployment {
	redis := job.Spec.Proxy.Redis
	if redis == "" {
		redis = DefaultProxyRedis
	}
	tls := SecretsDir + "/tls"
	port := pl.proxyPort()
	p := pod(job, ProxyDomain, RoleProxy, hash, specs.Pod{CPU: "500m", Memory: "256Mi", Redis: redis,
		Dirs: []specs.SecretDir{{Volume: "tls", Dir: tls, Secret: TLSSecretName(job)}},
		Env: []corev1.EnvVar{
			{Name: specs.EnvListen, Value: ":" + strconv.Itoa(port)},
			{Name: specs.Env("tls-cert"), Value: tls + "/" + corev1.TLSCertKey},
			{Name: specs.Env("tls-key"), Value: tls + "/" + corev1.TLSPrivateKeyKey},
			{Name: specs.Env("client-ca"), Value: tls + "/ca.crt"},
		},
		Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: int32(port)}},
	})
	return deployment(job, ProxyDomain, p, pl, replicas(job.Spec.Proxy), appsv1.RollingUpdateDeploymentStrategyType)
}

// proxyPort is the ingress's port on this platform.
func (p Platform) proxyPort() int {
	if p.ProxyPort > 0 {
		return p.ProxyPort
	}
	return ProxyPort
}

// ProxyService is what participants connect to (exposed further by an Ingress, a
// LoadBalancer the proxy operator chooses, or the chart's edge with TLS passthrough).
func ProxyService(job *pdav1.AggregationJob, pl Platform) *corev1.Service {
	l := labels(job, RoleProxy)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: Name(job, RoleProxy), Namespace: job.Spec.Proxy.Namespace, Labels: l},
		Spec: corev1.ServiceSpec{
			Selector: selector(l),
			Ports:    []corev1.ServicePort{{Name: "https", Port: int32(pl.proxyPort()), TargetPort: intstr.FromInt32(int32(pl.proxyPort()))}},
		},
	}
}

// Mixer shuffles a closed window as one permutation. One replica, recreated rather than
// rolled, so that two never seal one window concurrently (a restart resumes the seal).
func Mixer(job *pdav1.AggregationJob, pl Platform, hash string) *appsv1.Deployment {
	p := pod(job, ProxyDomain, RoleMixer, hash, specs.Pod{CPU: "500m", Memory: "512Mi"})
	return deployment(job, ProxyDomain, p, pl, 1, appsv1.RecreateDeploymentStrategyType)
}

// Oracle answers the shards' reveal requests.
func Oracle(job *pdav1.AggregationJob, pl Platform, hash string) *appsv1.Deployment {
	p := pod(job, ProxyDomain, RoleOracle, hash, specs.Pod{CPU: "250m", Memory: "128Mi"})
	return deployment(job, ProxyDomain, p, pl, replicas(job.Spec.Proxy), appsv1.RollingUpdateDeploymentStrategyType)
}

// Frontend decrypts the mixer's chunks and routes entries to shards by the ring.
func Frontend(job *pdav1.AggregationJob, pl Platform, hash string) *appsv1.Deployment {
	p := pod(job, DBDomain, RoleFrontend, hash, specs.Pod{CPU: "500m", Memory: "256Mi"})
	return deployment(job, DBDomain, p, pl, replicas(job.Spec.Database), appsv1.RollingUpdateDeploymentStrategyType)
}

// shardRedis turns the database's Redis template into the address a shard pod computes:
// Kubernetes expands $(VAR) references to variables defined before it.
func shardRedis(job *pdav1.AggregationJob) string {
	t := job.Spec.Database.Redis
	if t == "" {
		t = DefaultShardRedis
	}
	return strings.NewReplacer("{shard}", "$("+specs.EnvPodName+")", "{ordinal}", "$(POD_INDEX)").Replace(t)
}

// Shards is the database's shard StatefulSet: pod i is shard <job>-db-shard-i on the ring,
// with its own Redis. Pods start in parallel; a shard's identity is its pod name, so a
// restarted pod resumes its durable consumer and its Redis.
func Shards(job *pdav1.AggregationJob, pl Platform, hash string, shards int32) *appsv1.StatefulSet {
	// The Redis address follows POD_INDEX, which it may refer to.
	p := keyless(pod(job, DBDomain, RoleShard, hash, specs.Pod{CPU: "500m", Memory: "256Mi", Resources: job.Spec.ShardResources,
		Env: []corev1.EnvVar{
			{Name: "POD_INDEX", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
				FieldPath: "metadata.labels['" + appsv1.PodIndexLabel + "']"}}},
			{Name: specs.Env("shard-id"), Value: "$(" + specs.EnvPodName + ")"},
			{Name: specs.EnvRedisAddr, Value: shardRedis(job)},
		}}))
	p.Image, p.Binary = pl.Image, Binary
	l := p.Labels
	p.Spread = selector(l)
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: Name(job, RoleShard), Namespace: job.Spec.Database.Namespace, Labels: l},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(shards),
			ServiceName:         Name(job, RoleShard),
			Selector:            &metav1.LabelSelector{MatchLabels: selector(l)},
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template:            p.Template(pl.Runtime),
		},
	}
}

// ShardService is the shard StatefulSet's headless governing Service.
func ShardService(job *pdav1.AggregationJob) *corev1.Service {
	l := labels(job, RoleShard)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: Name(job, RoleShard), Namespace: job.Spec.Database.Namespace, Labels: l},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  selector(l),
			Ports:     []corev1.ServicePort{{Name: "metrics", Port: specs.MetricsPort, TargetPort: intstr.FromString("metrics")}},
		},
	}
}

// ResultConfigMap is the result sink in the job's namespace: the services' merged result
// as they wrote it, and the revealed keys one per line.
func ResultConfigMap(job *pdav1.AggregationJob, name string, result []byte, keys []string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: job.Namespace, Labels: resultLabels(job)},
		Data:       map[string]string{"result.json": string(result), "keys": keyLines(keys)},
	}
}

// ResultSecret is the result sink when the revealed keys are sensitive.
func ResultSecret(job *pdav1.AggregationJob, name string, result []byte, keys []string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: job.Namespace, Labels: resultLabels(job)},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"result.json": result, "keys": []byte(keyLines(keys))},
	}
}

// The sink lives in the job's namespace and is owned (garbage-collected) by the job, so it
// carries no job-uid label: the finalizer never deletes a user's results.
func resultLabels(job *pdav1.AggregationJob) map[string]string {
	return specs.Labels("pda", job.Name, "result")
}

func keyLines(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return strings.Join(keys, "\n") + "\n"
}
