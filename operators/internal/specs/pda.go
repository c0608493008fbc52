package specs

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
	pdacontract "github.com/obscura-iot/obscura/services/pkg/pda/contract"
)

// The PDA services contract (docs/pda.md, docs/operators-pda.md): one image runs every role
// as `pda <role>`; every flag -x-y falls back to the environment variable OBSCURA_PDA_X_Y.
const (
	PDARoleProxy    = "proxy"
	PDARoleMixer    = "mixer"
	PDARoleOracle   = "oracle"
	PDARoleFrontend = "db-frontend"
	PDARoleShard    = "db-shard"

	// PDAProxyPort is the participant-facing HTTPS (mTLS) port of the proxy ingress.
	PDAProxyPort = 8443
	// PDAMetricsPort serves /metrics, /healthz and /readyz in every role.
	PDAMetricsPort = 9090

	// PDASecretsDir is where a pod's key file and (proxy) TLS files are mounted.
	PDASecretsDir = "/var/run/secrets/pda"
	// PDAProxyKeyFile and PDADBKeyFile are the key files `pda keygen` writes.
	PDAProxyKeyFile = "proxy.json"
	PDADBKeyFile    = "db.json"

	// PDAProxyUser and PDADBUser are the two domains' NATS users (accounts PDA_PROXY, PDA_DB).
	PDAProxyUser = "pda-proxy"
	PDADBUser    = "pda-db"

	// Labels that tie a workload in a trust-domain namespace to its AggregationJob: owner
	// references cannot cross namespaces, so these and the job's finalizer do their work.
	LabelPDAJob          = "pda.obscura.dev/job"
	LabelPDAJobNamespace = "pda.obscura.dev/job-namespace"
	LabelPDAJobUID       = "pda.obscura.dev/job-uid"

	// PDAParamsHashAnnotation on a pod template carries the hash of the public parameters, so
	// a change rolls the pods.
	PDAParamsHashAnnotation = "pda.obscura.dev/params-hash"

	// DefaultProxyRedis and DefaultShardRedis are the trust domains' Redis addresses when the
	// job names none (relative to the domain's namespace).
	DefaultProxyRedis = "redis:6379"
	DefaultShardRedis = "redis-{ordinal}.redis:6379"
)

// PDAEnv is the environment variable a PDA service reads for flag -name.
func PDAEnv(flag string) string {
	return "OBSCURA_PDA_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// PDAPlatform is what the operator knows about where the PDA services run.
type PDAPlatform struct {
	// Image runs every PDA role (`pda proxy`, `pda db-shard`, …).
	Image string
	Runtime
}

// Validate reports what is missing for workloads to be built.
func (p PDAPlatform) Validate() error {
	if p.Image == "" || p.NATSURL == "" {
		return errors.New("the operator needs --pda-image and --nats-url to run PDA workloads")
	}
	return nil
}

// PDADomain names one trust domain of a job.
type PDADomain string

const (
	PDAProxyDomain PDADomain = "proxy"
	PDADBDomain    PDADomain = "db"
)

func pdaLabels(job *pdav1.AggregationJob, component string) map[string]string {
	return map[string]string{
		LabelName: "pda", LabelInstance: job.Name, LabelComponent: component,
		LabelManagedBy: ManagedBy, LabelPartOf: "obscura",
		LabelPDAJob: job.Name, LabelPDAJobNamespace: job.Namespace, LabelPDAJobUID: string(job.UID),
	}
}

// pdaSelector identifies a role's pods; it never changes (selectors are immutable). The job's
// namespace is part of it: two jobs of one name in two namespaces may share a trust domain.
func pdaSelector(l map[string]string) map[string]string {
	return map[string]string{LabelName: l[LabelName], LabelInstance: l[LabelInstance], LabelComponent: l[LabelComponent],
		LabelPDAJobNamespace: l[LabelPDAJobNamespace]}
}

// PDAJobSelector selects every object the operator runs for job, in any namespace.
func PDAJobSelector(job *pdav1.AggregationJob) map[string]string {
	return map[string]string{LabelPDAJobUID: string(job.UID)}
}

func (d PDADomain) namespace(job *pdav1.AggregationJob) string {
	if d == PDAProxyDomain {
		return job.Spec.Proxy.Namespace
	}
	return job.Spec.Database.Namespace
}

func (d PDADomain) user() string {
	if d == PDAProxyDomain {
		return PDAProxyUser
	}
	return PDADBUser
}

// PDAName is the name of a job's object for a role or domain, e.g. attackers-db-shard.
func PDAName(job *pdav1.AggregationJob, part string) string { return job.Name + "-" + part }

func pdaServiceAccountName(job *pdav1.AggregationJob, d PDADomain) string {
	return PDAName(job, "pda-"+string(d))
}

// PDANATSSecretName is the Secret holding a domain's NATS user and password.
func PDANATSSecretName(job *pdav1.AggregationJob, d PDADomain) string {
	return PDAName(job, "pda-"+string(d)+"-nats")
}

// PDAParamsName is the ConfigMap holding a domain's view of the job's public parameters.
func PDAParamsName(job *pdav1.AggregationJob) string { return PDAName(job, "pda-params") }

// PDATLSSecretName is the proxy's serving Secret (tls.crt, tls.key and ca.crt, the CA of the
// participants' client certificates), as cert-manager writes it. The operator does not
// create it; the proxy pods wait for it.
func PDATLSSecretName(job *pdav1.AggregationJob) string { return PDAName(job, "proxy-tls") }

// PDAShardIDs are the shard ids of the ring: the shard StatefulSet's pod names.
func PDAShardIDs(job *pdav1.AggregationJob, shards int32) []string {
	ids := make([]string, shards)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", PDAName(job, PDARoleShard), i)
	}
	return ids
}

// PDAServiceAccount runs one domain's pods, bound to nothing and without an API token: no PDA
// role talks to the Kubernetes API.
func PDAServiceAccount(job *pdav1.AggregationJob, d PDADomain) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		ObjectMeta:                   metav1.ObjectMeta{Name: pdaServiceAccountName(job, d), Namespace: d.namespace(job), Labels: pdaLabels(job, string(d))},
		AutomountServiceAccountToken: ptr.To(false),
	}
}

// PDANATSSecret is a domain's NATS credentials.
func PDANATSSecret(job *pdav1.AggregationJob, d PDADomain, password []byte) *corev1.Secret {
	account := pdacontract.DBAccount
	if d == PDAProxyDomain {
		account = pdacontract.ProxyAccount
	}
	return withNATSAccount(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: PDANATSSecretName(job, d), Namespace: d.namespace(job), Labels: pdaLabels(job, string(d))},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"user": []byte(d.user()), "password": password},
	}, account)
}

// PDAWindow returns the window length the services run with and the services' id of the job's
// window: window ids are Unix seconds ÷ length, so a start that is a multiple of the length
// makes the job's window exactly one services window.
func PDAWindow(start, end metav1.Time) (length metav1.Duration, id uint64) {
	l := end.Sub(start.Time).Round(1e9)
	if l < 1e9 {
		l = 1e9
	}
	return metav1.Duration{Duration: l}, uint64(start.Unix()) / uint64(l.Seconds())
}

// pdaChunks is n_chunks of E_PRX(k): a canonical key of L bytes takes ⌈(L + 2) / 30⌉ chunks
// (spec §5, U7); IP keys are at most 16 bytes, so one.
func pdaChunks(k pdav1.KeySpec) int {
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

// PDAParams are the two domains' ConfigMaps of the job's public parameters, as environment
// variables the services read (envFrom). The proxy's also lists the participants. They hold
// nothing secret: both domains and every participant agree on them.
func PDAParams(job *pdav1.AggregationJob, start, end metav1.Time) (proxy, db *corev1.ConfigMap, err error) {
	length, _ := PDAWindow(start, end)
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
		PDAEnv("deployment"):       job.Name,
		PDAEnv("group"):            group,
		PDAEnv("threshold"):        strconv.Itoa(int(job.Spec.Threshold)),
		PDAEnv("count-mode"):       "distinct_participants",
		PDAEnv("chunks"):           strconv.Itoa(pdaChunks(job.Spec.Key)),
		PDAEnv("values"):           strings.Join(values, ","),
		PDAEnv("proxy-public-key"): job.Spec.Proxy.PublicKey,
		PDAEnv("db-public-key"):    job.Spec.Database.PublicKey,
		PDAEnv("window"):           length.Duration.String(),
		PDAEnv("grace"):            job.Spec.Window.Grace.Duration.String(),
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
	proxyData[PDAEnv("participants")] = strings.Join(ids, ",")
	if quota > 0 {
		proxyData[PDAEnv("quota")] = strconv.FormatInt(quota, 10)
	}
	cm := func(d PDADomain, data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: PDAParamsName(job), Namespace: d.namespace(job), Labels: pdaLabels(job, string(d))},
			Data:       data,
		}
	}
	return cm(PDAProxyDomain, proxyData), cm(PDADBDomain, data), nil
}

// PDAParamsHash is the hash a params ConfigMap's pods carry.
func PDAParamsHash(cm *corev1.ConfigMap) string {
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

// pdaPod describes one PDA role's pod.
type pdaPod struct {
	job         *pdav1.AggregationJob
	domain      PDADomain
	role        string
	hash        string
	env         []corev1.EnvVar
	mounts      []corev1.VolumeMount
	volumes     []corev1.Volume
	ports       []corev1.ContainerPort
	cpu, memory string
	// keyless pods get no key file: a shard never decrypts (least privilege).
	keyless bool
}

func (p pdaPod) template(pl PDAPlatform) corev1.PodTemplateSpec {
	td := p.job.Spec.Proxy
	keyFile := PDAProxyKeyFile
	if p.domain == PDADBDomain {
		td, keyFile = p.job.Spec.Database, PDADBKeyFile
	}
	natsSecret := PDANATSSecretName(p.job, p.domain)
	secretEnv := func(name, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: natsSecret}, Key: key}}}
	}
	env := []corev1.EnvVar{
		{Name: EnvPodName, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: PDAEnv("nats-url"), Value: pl.NATSURL},
		secretEnv(PDAEnv("nats-user"), "user"),
		// The services take the password as a flag or variable, not a file.
		secretEnv(PDAEnv("nats-password"), "password"),
		{Name: PDAEnv("metrics-addr"), Value: ":" + strconv.Itoa(PDAMetricsPort)},
	}
	var mounts []corev1.VolumeMount
	var volumes []corev1.Volume
	if ref := td.Keys.SecretRef; ref != nil && !p.keyless {
		item := ref.Key
		if item == "" {
			item = KeyFile
		}
		env = append(env, corev1.EnvVar{Name: PDAEnv("keys"), Value: PDASecretsDir + "/keys/" + keyFile})
		mounts = append(mounts, corev1.VolumeMount{Name: "keys", MountPath: PDASecretsDir + "/keys", ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "keys", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: ref.Name, Items: []corev1.KeyToPath{{Key: item, Path: keyFile}}, DefaultMode: ptr.To[int32](0o400)}}})
	}
	// With keys.vault the role logs in with its domain's service account token (Kubernetes
	// auth) and reads the bundle once at start, like the Mohito roles (vaultKeyEnv).
	automount := false
	if v := td.Keys.Vault; v != nil && !p.keyless {
		env = append(env, vaultKeyEnv(v, pl.VaultAddress)...)
		automount = true
	}
	env = append(env, p.env...)
	mounts = append(mounts, p.mounts...)
	volumes = append(volumes, p.volumes...)
	ports := append([]corev1.ContainerPort{{Name: "metrics", ContainerPort: PDAMetricsPort}}, p.ports...)
	labels := pdaLabels(p.job, p.role)
	t := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{PDAParamsHashAnnotation: p.hash}},
		Spec: corev1.PodSpec{
			ServiceAccountName:           pdaServiceAccountName(p.job, p.domain),
			AutomountServiceAccountToken: ptr.To(automount),
			SecurityContext:              restrictedPod(),
			Containers: []corev1.Container{{
				Name:            p.role,
				Image:           pl.Image,
				ImagePullPolicy: pl.ImagePullPolicy,
				Args:            []string{p.role},
				EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: PDAParamsName(p.job)}}}},
				Env:             env,
				Ports:           ports,
				VolumeMounts:    mounts,
				LivenessProbe:   httpProbe("/healthz", "metrics"),
				ReadinessProbe:  httpProbe("/readyz", "metrics"),
				Resources:       resources(orDefault(pl.CPURequest, p.cpu), p.memory),
				SecurityContext: restrictedContainer(),
			}},
			Volumes:                       volumes,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
		},
	}
	if pl.HostNetwork {
		onHostNetwork(&t.Spec, PDABinary, []string{PDAEnv("metrics-addr")}, []string{PDAEnv("listen")})
	}
	return t
}

func pdaDeployment(p pdaPod, pl PDAPlatform, replicas int32, strategy appsv1.DeploymentStrategyType) *appsv1.Deployment {
	l := pdaLabels(p.job, p.role)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: PDAName(p.job, p.role), Namespace: p.domain.namespace(p.job), Labels: l},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: pdaSelector(l)},
			Strategy: appsv1.DeploymentStrategy{Type: strategy},
			Template: p.template(pl),
		},
	}
}

func replicas(td pdav1.TrustDomain) int32 { return max(td.Replicas, 1) }

// PDAProxy is the participant-facing ingress (mTLS): stateless, any number of replicas behind
// PDAProxyService. It reaches the proxy domain's Redis for sessions, quotas and rates.
func PDAProxy(job *pdav1.AggregationJob, pl PDAPlatform, hash string) *appsv1.Deployment {
	redis := job.Spec.Proxy.Redis
	if redis == "" {
		redis = DefaultProxyRedis
	}
	tls := PDASecretsDir + "/tls/"
	p := pdaPod{job: job, domain: PDAProxyDomain, role: PDARoleProxy, hash: hash, cpu: "500m", memory: "256Mi",
		env: []corev1.EnvVar{
			{Name: PDAEnv("listen"), Value: ":" + strconv.Itoa(PDAProxyPort)},
			{Name: PDAEnv("redis-addr"), Value: redis},
			{Name: PDAEnv("tls-cert"), Value: tls + corev1.TLSCertKey},
			{Name: PDAEnv("tls-key"), Value: tls + corev1.TLSPrivateKeyKey},
			{Name: PDAEnv("client-ca"), Value: tls + "ca.crt"},
		},
		mounts: []corev1.VolumeMount{{Name: "tls", MountPath: PDASecretsDir + "/tls", ReadOnly: true}},
		volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: PDATLSSecretName(job), DefaultMode: ptr.To[int32](0o400)}}}},
		ports: []corev1.ContainerPort{{Name: "https", ContainerPort: PDAProxyPort}},
	}
	return pdaDeployment(p, pl, replicas(job.Spec.Proxy), appsv1.RollingUpdateDeploymentStrategyType)
}

// PDAProxyService is what participants connect to (exposed further by an Ingress or a
// LoadBalancer the proxy operator chooses).
func PDAProxyService(job *pdav1.AggregationJob) *corev1.Service {
	l := pdaLabels(job, PDARoleProxy)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: PDAName(job, PDARoleProxy), Namespace: job.Spec.Proxy.Namespace, Labels: l},
		Spec: corev1.ServiceSpec{
			Selector: pdaSelector(l),
			Ports:    []corev1.ServicePort{{Name: "https", Port: PDAProxyPort, TargetPort: intstr.FromString("https")}},
		},
	}
}

// PDAMixer shuffles a closed window as one permutation. One replica, recreated rather than
// rolled, so that two never seal one window concurrently (a restart resumes the seal).
func PDAMixer(job *pdav1.AggregationJob, pl PDAPlatform, hash string) *appsv1.Deployment {
	p := pdaPod{job: job, domain: PDAProxyDomain, role: PDARoleMixer, hash: hash, cpu: "500m", memory: "512Mi"}
	return pdaDeployment(p, pl, 1, appsv1.RecreateDeploymentStrategyType)
}

// PDAOracle answers the shards' reveal requests.
func PDAOracle(job *pdav1.AggregationJob, pl PDAPlatform, hash string) *appsv1.Deployment {
	p := pdaPod{job: job, domain: PDAProxyDomain, role: PDARoleOracle, hash: hash, cpu: "250m", memory: "128Mi"}
	return pdaDeployment(p, pl, replicas(job.Spec.Proxy), appsv1.RollingUpdateDeploymentStrategyType)
}

// PDAFrontend decrypts the mixer's chunks and routes entries to shards by the ring.
func PDAFrontend(job *pdav1.AggregationJob, pl PDAPlatform, hash string) *appsv1.Deployment {
	p := pdaPod{job: job, domain: PDADBDomain, role: PDARoleFrontend, hash: hash, cpu: "500m", memory: "256Mi"}
	return pdaDeployment(p, pl, replicas(job.Spec.Database), appsv1.RollingUpdateDeploymentStrategyType)
}

// pdaShardRedis turns the database's Redis template into the address a shard pod computes:
// Kubernetes expands $(VAR) references to variables defined before it.
func pdaShardRedis(job *pdav1.AggregationJob) string {
	t := job.Spec.Database.Redis
	if t == "" {
		t = DefaultShardRedis
	}
	return strings.NewReplacer("{shard}", "$("+EnvPodName+")", "{ordinal}", "$(POD_INDEX)").Replace(t)
}

// PDAShards is the database's shard StatefulSet: pod i is shard <job>-db-shard-i on the ring,
// with its own Redis. Pods start in parallel; a shard's identity is its pod name, so a
// restarted pod resumes its durable consumer and its Redis.
func PDAShards(job *pdav1.AggregationJob, pl PDAPlatform, hash string, shards int32) *appsv1.StatefulSet {
	p := pdaPod{job: job, domain: PDADBDomain, role: PDARoleShard, hash: hash, cpu: "500m", memory: "256Mi", keyless: true,
		env: []corev1.EnvVar{
			{Name: "POD_INDEX", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
				FieldPath: "metadata.labels['" + appsv1.PodIndexLabel + "']"}}},
			{Name: PDAEnv("shard-id"), Value: "$(" + EnvPodName + ")"},
			{Name: PDAEnv("redis-addr"), Value: pdaShardRedis(job)},
		}}
	l := pdaLabels(job, PDARoleShard)
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: PDAName(job, PDARoleShard), Namespace: job.Spec.Database.Namespace, Labels: l},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(shards),
			ServiceName:         PDAName(job, PDARoleShard),
			Selector:            &metav1.LabelSelector{MatchLabels: pdaSelector(l)},
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template:            p.template(pl),
		},
	}
}

// PDAShardService is the shard StatefulSet's headless governing Service.
func PDAShardService(job *pdav1.AggregationJob) *corev1.Service {
	l := pdaLabels(job, PDARoleShard)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: PDAName(job, PDARoleShard), Namespace: job.Spec.Database.Namespace, Labels: l},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  pdaSelector(l),
			Ports:     []corev1.ServicePort{{Name: "metrics", Port: PDAMetricsPort, TargetPort: intstr.FromString("metrics")}},
		},
	}
}

// PDAResultConfigMap is the result sink in the job's namespace: the services' merged result
// as they wrote it, and the revealed keys one per line.
func PDAResultConfigMap(job *pdav1.AggregationJob, name string, result []byte, keys []string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: job.Namespace, Labels: pdaResultLabels(job)},
		Data:       map[string]string{"result.json": string(result), "keys": pdaKeyLines(keys)},
	}
}

// PDAResultSecret is the result sink when the revealed keys are sensitive.
func PDAResultSecret(job *pdav1.AggregationJob, name string, result []byte, keys []string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: job.Namespace, Labels: pdaResultLabels(job)},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"result.json": result, "keys": []byte(pdaKeyLines(keys))},
	}
}

// The sink lives in the job's namespace and is owned (garbage-collected) by the job, so it
// carries no job-uid label: the finalizer never deletes a user's results.
func pdaResultLabels(job *pdav1.AggregationJob) map[string]string {
	return map[string]string{LabelName: "pda", LabelInstance: job.Name, LabelComponent: "result",
		LabelManagedBy: ManagedBy, LabelPartOf: "obscura"}
}

func pdaKeyLines(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return strings.Join(keys, "\n") + "\n"
}
