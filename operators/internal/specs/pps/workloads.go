package pps

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/obscura-iot/obscura/operators/api/common"
	ppsv1 "github.com/obscura-iot/obscura/operators/api/pps/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
)

// How the operator runs the PPS services (docs/pps.md): one image runs both parties as
// `pps broker` and `pps garbler`; flags, environment (specs.Env), the NATS password file and
// the ports follow the conventions every system shares (package specs, services/pkg/daemon).
const (
	// Binary is the image's entrypoint (hack/images), used by exec probes.
	Binary = "/usr/local/bin/pps"

	RoleBroker  = "broker"
	RoleGarbler = "garbler"

	// GarblerPort is the garbler's gRPC (mTLS) port, the only one the broker reaches.
	GarblerPort = 7443

	// On the host network (specs.Runtime.HostNetwork) every pod shares the node's port space,
	// where the Mohito gateway already holds 7443, and the operator can reach a pod only on
	// 127.0.0.1 at a port it knows. Each pipeline therefore gets two fixed loopback ports of
	// its own, derived from its namespace and name so that the broker, the garbler and the
	// operator agree without any state: the garbler's gRPC port and the broker's metrics port
	// (which the operator scrapes for status). hostPortPairs pairs fit below the kernel's
	// ephemeral range (32768+), so no outgoing connection can take them first.
	hostPortBase  = 17000
	hostPortPairs = 500

	// ConfigDir holds the pipelines file; SecretsDir the TLS, key and Redis password files.
	ConfigDir  = "/etc/obscura/pps"
	SecretsDir = "/var/run/secrets/pps"
	// PipelinesKey is the pipelines file's entry in its ConfigMap.
	PipelinesKey = "pipelines.json"
	// RedisPasswordKey is the default entry of a Redis password Secret.
	RedisPasswordKey = "password"

	// Labels tying an object in either trust domain to its SecurePipeline: owner references
	// cannot reach the garbler's namespace, so these and the pipeline's finalizer do their work.
	LabelPipeline          = "pps.obscura.dev/pipeline"
	LabelPipelineNamespace = "pps.obscura.dev/pipeline-namespace"
	LabelPipelineUID       = "pps.obscura.dev/pipeline-uid"

	// ConfigHashAnnotation on a pod template carries the hash of the pipelines file, so that a
	// change rolls the pods.
	ConfigHashAnnotation = "pps.obscura.dev/config-hash"

	// DefaultRedis is a domain's Redis when the pipeline names none (in its namespace).
	DefaultRedis = "redis:6379"
)

// The flags of `pps broker` and `pps garbler` the operator sets, each through its
// OBSCURA_<FLAG> variable (specs.Env); --nats-url, --nats-user, --nats-password-file,
// --metrics-addr and --health-addr come from the shared pod builder.
const (
	FlagListen            = "listen"
	FlagTLSCert           = "tls-cert"
	FlagTLSKey            = "tls-key"
	FlagClientCA          = "client-ca"
	FlagGarblerAddr       = "garbler-addr"
	FlagGarblerServerName = "garbler-server-name"
	FlagGarblerCA         = "garbler-ca"
	FlagRedisAddr         = "redis-addr"
	FlagRedisPasswordFile = "redis-password-file"
	FlagPipelinesFile     = "pipelines-file"
	FlagWorkers           = "workers"
	FlagSeal              = "seal"
	FlagSealKeyFile       = "seal-key-file"
	FlagIdentity          = "identity"
	FlagIdentityKeyFile   = "identity-key-file"
	FlagVaultAddr         = "vault-addr"
	FlagVaultRole         = "vault-role"
	FlagVaultTransitMount = "vault-transit-mount"
	FlagVaultSealKey      = "vault-seal-key"
	FlagVaultIdentityKey  = "vault-identity-key"

	// KeysVault and KeysFile are the values of --seal and --identity.
	KeysVault = "vault"
	KeysFile  = "file"
)

// Platform is what the operator knows about where the PPS services run.
type Platform struct {
	// Image runs both parties (`pps broker`, `pps garbler`).
	Image string
	specs.Runtime
}

// Validate reports what is missing for workloads to be built.
func (p Platform) Validate() error {
	if p.Image == "" || p.NATSURL == "" {
		return errors.New("the operator needs --pps-image and --nats-url to run PPS workloads")
	}
	return nil
}

// Domain names one trust domain of a pipeline.
type Domain string

const (
	BrokerDomain  Domain = "broker"
	GarblerDomain Domain = "garbler"
)

// Namespace is the domain's namespace: the pipeline's own for the broker.
func (d Domain) Namespace(p *ppsv1.SecurePipeline) string {
	if d == GarblerDomain {
		return p.Spec.Garbler.Namespace
	}
	return p.Namespace
}

func labels(p *ppsv1.SecurePipeline, component string) map[string]string {
	l := specs.Labels("pps", p.Name, component)
	l[LabelPipeline], l[LabelPipelineNamespace], l[LabelPipelineUID] = p.Name, p.Namespace, string(p.UID)
	return l
}

// selector identifies a role's pods; it never changes (selectors are immutable). The
// pipeline's namespace is part of it: two pipelines of one name in two namespaces may share a
// garbler namespace.
func selector(l map[string]string) map[string]string {
	s := specs.Selector(l)
	s[LabelPipelineNamespace] = l[LabelPipelineNamespace]
	return s
}

// Selector selects every object the operator runs for p, in either namespace.
func Selector(p *ppsv1.SecurePipeline) map[string]string {
	return map[string]string{LabelPipelineUID: string(p.UID)}
}

// PodSelector selects the pods of one role of p.
func PodSelector(p *ppsv1.SecurePipeline, role string) map[string]string {
	return selector(labels(p, role))
}

// Name is the name of a pipeline's object for a role, e.g. parking-pps-garbler.
func Name(p *ppsv1.SecurePipeline, part string) string { return p.Name + "-pps-" + part }

// PipelineName is the pipeline's name in the pipelines file and in the broker's metrics.
func PipelineName(p *ppsv1.SecurePipeline) string { return p.Namespace + "/" + p.Name }

// NATSSecretName is the Secret holding the broker's and the devices' NATS users.
func NATSSecretName(p *ppsv1.SecurePipeline) string { return Name(p, "nats") }

// PipelinesConfigMapName is the ConfigMap holding the pipelines file, in both domains.
func PipelinesConfigMapName(p *ppsv1.SecurePipeline) string { return Name(p, "pipelines") }

// GarblerTLSSecret and BrokerTLSSecret are the link's Secrets (spec.tls, or their defaults).
func GarblerTLSSecret(p *ppsv1.SecurePipeline) string {
	if s := p.Spec.TLS.GarblerSecret; s != "" {
		return s
	}
	return Name(p, "garbler-tls")
}

func BrokerTLSSecret(p *ppsv1.SecurePipeline) string {
	if s := p.Spec.TLS.BrokerSecret; s != "" {
		return s
	}
	return Name(p, "broker-tls")
}

// GarblerHost is the DNS name the broker dials and the garbler's certificate must carry.
func GarblerHost(p *ppsv1.SecurePipeline) string {
	return Name(p, RoleGarbler) + "." + p.Spec.Garbler.Namespace + ".svc"
}

// HostPorts are the loopback ports of p's garbler gRPC listener and broker metrics listener
// on the host network. Two pipelines collide with a chance of 1 in hostPortPairs; the second
// one's pods then fail to bind and say so in their logs. One broker replica per pipeline can
// bind the metrics port (scale with spec.broker.workers on the host network).
func HostPorts(p *ppsv1.SecurePipeline) (garbler, metrics int) {
	h := fnv.New32a()
	h.Write([]byte(p.Namespace + "/" + p.Name))
	base := hostPortBase + 2*int(h.Sum32()%hostPortPairs)
	return base, base + 1
}

// NATS names of a pipeline (docs/pps.md "NATS"). Each pipeline is its own NATS account, so
// its streams (PPS_PUB, PPS_DEV, PPS_OUT) and its broker's durable consumers are its own;
// user names are global on the server, so they carry the namespace and the name (neither
// holds a dot: a DNS label, and a name the CRD refuses dots in).
func Account(p *ppsv1.SecurePipeline) string {
	return specs.PPSAccountPrefix + p.Namespace + "_" + p.Name
}

// BrokerUser is the broker's NATS user.
func BrokerUser(p *ppsv1.SecurePipeline) string {
	return contract.BrokerUser + "." + p.Namespace + "." + p.Name
}

// DeviceUser is device id's NATS (MQTT) user in p's account.
func DeviceUser(p *ppsv1.SecurePipeline, id string) string {
	return "pps." + p.Namespace + "." + p.Name + "." + id
}

// Devices are the pipeline's device ids, publishers and subscribers, sorted, each once.
func Devices(p *ppsv1.SecurePipeline) []string {
	var ids []string
	for _, pub := range p.Spec.Publishers {
		ids = append(ids, pub.DeviceID)
	}
	ids = append(ids, p.Spec.Subscribers...)
	slices.Sort(ids)
	return slices.Compact(ids)
}

// NATSSecret is the pipeline's NATS credentials: the broker's user and one user per device
// (entries <id>.user and <id>.password, which device provisioning reads), in the
// pipeline's account. passwords gives each user's password; it is called only for users the
// Secret is created with (the controller keeps existing passwords). The annotations tell
// the accounts renderer which devices subscribe and to which function (spec §10 #10): a
// subscriber may read pps.fn.<fnid>.out only once fnID is known.
func NATSSecret(p *ppsv1.SecurePipeline, fnID string, password func(user string) []byte) *corev1.Secret {
	s := specs.NATSSecret(p.Namespace, NATSSecretName(p), Account(p), BrokerUser(p), password(BrokerUser(p)), labels(p, "nats"))
	for _, id := range Devices(p) {
		u := DeviceUser(p, id)
		s.Data[id+specs.PPSDeviceUserSuffix] = []byte(u)
		s.Data[id+specs.PPSDevicePasswordSuffix] = password(u)
	}
	subs := slices.Clone(p.Spec.Subscribers)
	slices.Sort(subs)
	s.Annotations[specs.AnnotationPPSSubscribers] = joinIDs(subs)
	if fnID != "" {
		s.Annotations[specs.AnnotationPPSFn] = fnID
	}
	return s
}

func joinIDs(ids []string) string {
	b, _ := json.Marshal(ids)
	return string(b)
}

// Pipeline is the pipeline as the services read it.
func Pipeline(p *ppsv1.SecurePipeline) contract.Pipeline {
	cp := contract.Pipeline{
		Name:        PipelineName(p),
		Source:      p.Spec.Source,
		Mode:        string(p.Spec.Mode),
		Check:       p.Spec.Check,
		Subscribers: slices.Clone(p.Spec.Subscribers),
		Window:      contract.Duration{Duration: p.Spec.Window.Duration},
		Schedule:    contract.Duration{Duration: p.Spec.Schedule.Duration},
	}
	if cp.Mode == "" {
		cp.Mode = contract.ModeFaithful
	}
	if cp.Subscribers == nil {
		cp.Subscribers = []string{}
	}
	if p.Spec.SeedTTL != nil {
		cp.SeedTTL = contract.Duration{Duration: p.Spec.SeedTTL.Duration}
	}
	for _, pub := range p.Spec.Publishers {
		cp.Publishers = append(cp.Publishers, contract.PipelinePublisher{Topic: pub.Topic, DeviceID: pub.DeviceID})
	}
	return cp
}

// PipelinesConfigMap is the pipelines file of domain d (the same file in both: the garbler
// learns device ids, never an address). It fails when the services would refuse the
// pipeline (contract.Pipeline.Validate).
func PipelinesConfigMap(p *ppsv1.SecurePipeline, d Domain) (*corev1.ConfigMap, error) {
	cp := Pipeline(p)
	if err := cp.Validate(); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(contract.PipelinesFile{Pipelines: []contract.Pipeline{cp}}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode the pipelines file: %w", err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: PipelinesConfigMapName(p), Namespace: d.Namespace(p), Labels: labels(p, "pipelines")},
		Data:       map[string]string{PipelinesKey: string(b) + "\n"},
	}, nil
}

// ConfigHash is the hash the pods of a pipelines ConfigMap carry.
func ConfigHash(cm *corev1.ConfigMap) string {
	sum := sha256.Sum256([]byte(cm.Data[PipelinesKey]))
	return hex.EncodeToString(sum[:8])
}

// ServiceAccount runs one domain's pods. No PPS role talks to the Kubernetes API; only a
// garbler with Vault keys gets its token, to log in to Vault.
func ServiceAccount(p *ppsv1.SecurePipeline, d Domain) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		ObjectMeta:                   metav1.ObjectMeta{Name: Name(p, string(d)), Namespace: d.Namespace(p), Labels: labels(p, string(d))},
		AutomountServiceAccountToken: ptr.To(false),
	}
}

// redis is a domain's Redis address and, when it has one, its password file.
func redis(r ppsv1.Redis, dir string) (addr string, files []specs.File) {
	addr = r.Address
	if addr == "" {
		addr = DefaultRedis
	}
	if ref := r.PasswordSecret; ref != nil {
		ref = ref.DeepCopy()
		if ref.Key == "" {
			ref.Key = RedisPasswordKey
		}
		files = []specs.File{{Volume: "redis", Env: specs.Env(FlagRedisPasswordFile), Dir: dir, Name: RedisPasswordKey, Ref: ref}}
	}
	return addr, files
}

// pod is the shared pod builder's description of one PPS role, with what every role reads:
// the pipelines file, its domain's Redis and TLS.
func pod(p *ppsv1.SecurePipeline, d Domain, hash string, r ppsv1.Redis, res *corev1.ResourceRequirements, sp specs.Pod) specs.Pod {
	role := string(d)
	addr, files := redis(r, SecretsDir+"/redis")
	sp.Role = role
	sp.Labels = labels(p, role)
	sp.Annotations = map[string]string{ConfigHashAnnotation: hash}
	sp.ServiceAccount = Name(p, role)
	sp.Config = &specs.ConfigFile{Volume: "pipelines", Env: specs.Env(FlagPipelinesFile), Dir: ConfigDir, Key: PipelinesKey, ConfigMap: PipelinesConfigMapName(p)}
	sp.Redis = addr
	sp.Files = append(files, sp.Files...)
	sp.Resources = res
	return sp
}

func deployment(p *ppsv1.SecurePipeline, d Domain, sp specs.Pod, pl Platform, replicas int32) *appsv1.Deployment {
	sp.Image, sp.Binary = pl.Image, Binary
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: Name(p, sp.Role), Namespace: d.Namespace(p), Labels: sp.Labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: selector(sp.Labels)},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType},
			Template: sp.Template(pl.Runtime),
		},
	}
}

// Broker runs the broker's evaluator workers in the pipeline's namespace: its NATS user,
// its Redis, and the client side of the mTLS link to the garbler.
func Broker(p *ppsv1.SecurePipeline, pl Platform, hash string) *appsv1.Deployment {
	tls := SecretsDir + "/tls"
	env := []corev1.EnvVar{
		{Name: specs.Env(FlagGarblerAddr), Value: GarblerHost(p) + ":" + strconv.Itoa(GarblerPort)},
		{Name: specs.Env(FlagTLSCert), Value: tls + "/" + corev1.TLSCertKey},
		{Name: specs.Env(FlagTLSKey), Value: tls + "/" + corev1.TLSPrivateKeyKey},
		{Name: specs.Env(FlagGarblerCA), Value: tls + "/ca.crt"},
		{Name: specs.Env(FlagWorkers), Value: strconv.Itoa(int(Workers(p)))},
	}
	if pl.HostNetwork {
		// Every pod shares the node's loopback (specs.onHostNetwork). The garbler's
		// certificate still names its Service, as cert-manager issues it, so that name is
		// checked rather than the address dialled.
		port, _ := HostPorts(p)
		env[0].Value = "127.0.0.1:" + strconv.Itoa(port)
		env = append(env, corev1.EnvVar{Name: specs.Env(FlagGarblerServerName), Value: GarblerHost(p)})
	}
	b := p.Spec.Broker
	sp := pod(p, BrokerDomain, hash, b.Redis, b.Resources, specs.Pod{CPU: "500m", Memory: "512Mi",
		NATSSecret: NATSSecretName(p),
		Dirs:       []specs.SecretDir{{Volume: "tls", Dir: tls, Secret: BrokerTLSSecret(p)}},
		Env:        env,
	})
	d := deployment(p, BrokerDomain, sp, pl, max(b.Replicas, 1))
	if pl.HostNetwork {
		// The operator reads the broker's figures at 127.0.0.1:<metrics port> (HostPorts);
		// the health listener stays dynamic, probed through the address file.
		_, metrics := HostPorts(p)
		setEnv(&d.Spec.Template.Spec.Containers[0], specs.EnvMetricsAddr, "127.0.0.1:"+strconv.Itoa(metrics))
	}
	return d
}

// setEnv sets the variable name of c, which the builder has already set.
func setEnv(c *corev1.Container, name, value string) {
	for i := range c.Env {
		if c.Env[i].Name == name {
			c.Env[i].Value = value
		}
	}
}

// Workers is the number of evaluator workers per broker pod.
func Workers(p *ppsv1.SecurePipeline) int32 { return max(p.Spec.Broker.Workers, 1) }

// BrokerService is the broker's headless metrics Service (the operator reads each
// replica's figures; a Prometheus scrapes them).
func BrokerService(p *ppsv1.SecurePipeline) *corev1.Service {
	l := labels(p, RoleBroker)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: Name(p, RoleBroker), Namespace: p.Namespace, Labels: l},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  selector(l),
			Ports:     []corev1.ServicePort{{Name: "metrics", Port: specs.MetricsPort, TargetPort: intstr.FromString("metrics")}},
		},
	}
}

// Garbler runs the garbler in its own namespace: no NATS credentials at all (it never sees a
// device's traffic or an output, spec §10 #10), its own Redis for the sealed ratchet state,
// its keys in Vault Transit or a Secret, and the server side of the mTLS link trusting only
// the broker domain's CA.
func Garbler(p *ppsv1.SecurePipeline, pl Platform, hash string) *appsv1.Deployment {
	g := p.Spec.Garbler
	tls := SecretsDir + "/tls"
	listen := GarblerPort
	if pl.HostNetwork {
		listen, _ = HostPorts(p)
	}
	env := []corev1.EnvVar{
		{Name: specs.Env(FlagListen), Value: ":" + strconv.Itoa(listen)},
		{Name: specs.Env(FlagTLSCert), Value: tls + "/" + corev1.TLSCertKey},
		{Name: specs.Env(FlagTLSKey), Value: tls + "/" + corev1.TLSPrivateKeyKey},
		{Name: specs.Env(FlagClientCA), Value: tls + "/ca.crt"},
	}
	sp := specs.Pod{CPU: "500m", Memory: "512Mi",
		Dirs:  []specs.SecretDir{{Volume: "tls", Dir: tls, Secret: GarblerTLSSecret(p)}},
		Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: GarblerPort}},
	}
	switch k := g.Keys; {
	case k.Vault != nil:
		mount := k.Vault.Mount
		if mount == "" {
			mount = "transit"
		}
		addr := k.Vault.Address
		if addr == "" {
			addr = pl.VaultAddress
		}
		sp.ServiceAccountToken = true
		env = append(env,
			corev1.EnvVar{Name: specs.Env(FlagSeal), Value: KeysVault},
			corev1.EnvVar{Name: specs.Env(FlagIdentity), Value: KeysVault},
			corev1.EnvVar{Name: specs.Env(FlagVaultAddr), Value: addr},
			corev1.EnvVar{Name: specs.Env(FlagVaultRole), Value: k.Vault.Role},
			corev1.EnvVar{Name: specs.Env(FlagVaultTransitMount), Value: mount},
			corev1.EnvVar{Name: specs.Env(FlagVaultSealKey), Value: k.Vault.SealKey},
			corev1.EnvVar{Name: specs.Env(FlagVaultIdentityKey), Value: k.Vault.IdentityKey},
		)
	case k.SecretRef != nil:
		id, seal := orDefault(k.SecretRef.IdentityKey, "identity.key"), orDefault(k.SecretRef.SealKey, "seal.key")
		env = append(env,
			corev1.EnvVar{Name: specs.Env(FlagSeal), Value: KeysFile},
			corev1.EnvVar{Name: specs.Env(FlagIdentity), Value: KeysFile},
		)
		sp.Files = []specs.File{
			{Volume: "identity", Env: specs.Env(FlagIdentityKeyFile), Dir: SecretsDir + "/identity", Name: "identity.key",
				Ref: &common.SecretFileReference{Name: k.SecretRef.Name, Key: id}},
			{Volume: "seal", Env: specs.Env(FlagSealKeyFile), Dir: SecretsDir + "/seal", Name: "seal.key",
				Ref: &common.SecretFileReference{Name: k.SecretRef.Name, Key: seal}},
		}
	}
	sp.Env = env
	sp = pod(p, GarblerDomain, hash, g.Redis, g.Resources, sp)
	return deployment(p, GarblerDomain, sp, pl, max(g.Replicas, 1))
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// GarblerService is what the broker dials.
func GarblerService(p *ppsv1.SecurePipeline) *corev1.Service {
	l := labels(p, RoleGarbler)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: Name(p, RoleGarbler), Namespace: p.Spec.Garbler.Namespace, Labels: l},
		Spec: corev1.ServiceSpec{
			Selector: selector(l),
			Ports:    []corev1.ServicePort{{Name: "grpc", Port: GarblerPort, TargetPort: intstr.FromString("grpc")}},
		},
	}
}

// GarblerNetworkPolicy lets into the garbler's pods only the pipeline's broker pods, only on
// the gRPC port (spec §5.4: NetworkPolicies allow only the link). Nothing else in either
// namespace, and no other namespace, reaches the garbler.
func GarblerNetworkPolicy(p *ppsv1.SecurePipeline) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: Name(p, RoleGarbler), Namespace: p.Spec.Garbler.Namespace, Labels: labels(p, RoleGarbler)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: PodSelector(p, RoleGarbler)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: p.Namespace}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: PodSelector(p, RoleBroker)},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr.To(intstr.FromInt32(GarblerPort))}},
			}},
		},
	}
}

// Latency is a status duration rounded for display (the printer column).
func Latency(d time.Duration) *metav1.Duration {
	switch {
	case d >= time.Second:
		d = d.Round(time.Millisecond)
	default:
		d = d.Round(10 * time.Microsecond)
	}
	return &metav1.Duration{Duration: d}
}
