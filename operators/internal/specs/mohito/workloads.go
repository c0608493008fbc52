package mohito

import (
	"encoding/json"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/obscura-iot/obscura/operators/api/common"
	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// Platform is what the operator knows about where it deploys Mohito.
type Platform struct {
	// Image runs every Mohito role.
	Image string
	// IntegratorRedis is the integrator's Redis (round state, mailboxes).
	IntegratorRedis string
	specs.Runtime
}

// KeyActivation is the activation delay the workloads use, for messages.
func (p Platform) KeyActivation() string {
	if p.KeyActivationDelay > 0 {
		return p.KeyActivationDelay.String()
	}
	return contract.DefaultKeyActivationDelay.String()
}

// Validate reports what is missing for workloads to be built.
func (p Platform) Validate() error {
	if p.Image == "" || p.NATSURL == "" {
		return fmt.Errorf("the operator needs --mohito-image and --nats-url to run Mohito workloads")
	}
	return nil
}

func roundLabels(rd *mohitov1.Round, component string) map[string]string {
	return specs.Labels("mohito", rd.Name, component)
}

func vendorLabels(name, component string) map[string]string {
	return specs.Labels("mohito", name, component)
}

// WorkerSelector is the decryption workers' pod selector as a string (the scale subresource).
func WorkerSelector(rd *mohitov1.Round) string {
	l := specs.Selector(roundLabels(rd, contract.RoleDecryptWorker))
	return fmt.Sprintf("%s=%s,%s=%s,%s=%s", specs.LabelComponent, l[specs.LabelComponent], specs.LabelInstance, l[specs.LabelInstance],
		specs.LabelName, l[specs.LabelName])
}

// IntegratorServiceAccount runs the integrator's pods. It is bound to nothing and mounts no
// token: no Mohito role talks to the Kubernetes API, so least privilege is no privilege.
func IntegratorServiceAccount(rd *mohitov1.Round) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		ObjectMeta:                   metav1.ObjectMeta{Name: rd.Name + "-integrator", Namespace: rd.Namespace, Labels: roundLabels(rd, "integrator")},
		AutomountServiceAccountToken: ptr.To(false),
	}
}

// VendorServiceAccount runs one vendor's pods, again with no API access.
func VendorServiceAccount(v *mohitov1.Vendor) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		ObjectMeta:                   metav1.ObjectMeta{Name: v.Name + "-vendor", Namespace: v.Namespace, Labels: vendorLabels(v.Name, "vendor")},
		AutomountServiceAccountToken: ptr.To(false),
	}
}

// NATSSecretName is the Secret holding a party's NATS user and password; the operator creates
// it with a random password.
func NATSSecretName(owner string) string { return owner + "-nats" }

// RoundNATSUser is a Round's user in the integrator account. It is unique per Round (a
// namespace name never contains a dot), so every series has its own password and a deleted
// Round's user leaves the server.
func RoundNATSUser(rd *mohitov1.Round) string { return "round-" + rd.Namespace + "." + rd.Name }

// RoundNATSSecret is the integrator's NATS credentials for a Round's workloads: the Round's
// own user (RoundNATSUser) in the integrator account.
func RoundNATSSecret(rd *mohitov1.Round, password []byte) *corev1.Secret {
	return specs.NATSSecret(rd.Namespace, NATSSecretName(rd.Name), contract.IntegratorAccount, RoundNATSUser(rd), password, roundLabels(rd, "integrator"))
}

// VendorNATSSecret is a vendor's NATS credentials: its service user (shuffler and agent) and
// one login per device of its registry, devices (id → password): entries
// <id>specs.DeviceUserSuffix = contract.DeviceUser and <id>specs.DevicePasswordSuffix. Each
// device reaches only its own two subjects (contract.DevicePermissions); a device left out of
// devices is revoked, and no login is shared between devices.
func VendorNATSSecret(v *mohitov1.Vendor, password []byte, devices map[string][]byte) *corev1.Secret {
	idx := int(v.Spec.Index)
	s := specs.NATSSecret(v.Namespace, NATSSecretName(v.Name), contract.VendorAccount(idx), contract.VendorUser(idx), password, vendorLabels(v.Name, "vendor"))
	for id, pw := range devices {
		s.Data[id+specs.DeviceUserSuffix] = []byte(contract.DeviceUser(idx, id))
		s.Data[id+specs.DevicePasswordSuffix] = pw
	}
	return s
}

// RegistryDeviceIDs are the device ids of a vendor's device registry (the agent's devices
// file, a JSON list of {"id", "prf"}), in registry order: the devices the operator issues NATS
// logins to. Only ids are read; a duplicate or invalid id is an error.
func RegistryDeviceIDs(registry []byte) ([]string, error) {
	var list []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(registry, &list); err != nil {
		return nil, fmt.Errorf(`want a JSON list of {"id", "prf"}: %w`, err)
	}
	ids := make([]string, 0, len(list))
	seen := map[string]bool{}
	for i, d := range list {
		if err := contract.ValidDeviceID(d.ID); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		if seen[d.ID] {
			return nil, fmt.Errorf("entry %d: device id repeated", i)
		}
		seen[d.ID] = true
		ids = append(ids, d.ID)
	}
	return ids, nil
}

// pod is the shared pod builder's description of one Mohito role, before the Round or Vendor
// it serves fills in the rest (forRound, forVendor).
type pod struct {
	specs.Pod
	key *common.KeyReference // the party's private key, nil for roles that hold none
}

func (p pod) template(pl Platform) corev1.PodTemplateSpec {
	p.Image, p.Binary = pl.Image, Binary
	if p.key != nil {
		p.Key = &specs.Key{Ref: p.key, Env: EnvKeyFile, Dir: KeysDir, File: specs.KeyFile, ActivationDelay: pl.KeyActivationDelay}
	}
	return p.Template(pl.Runtime)
}

func deployment(name, namespace string, replicas int32, p pod, pl Platform, strategy appsv1.DeploymentStrategyType) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: p.Labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: specs.Selector(p.Labels)},
			Strategy: appsv1.DeploymentStrategy{Type: strategy},
			Template: p.template(pl),
		},
	}
}

// uses fills in what a pod reads from the series' deployment ConfigMap.
func (p pod) uses(series *mohitov1.Round, configHash string) pod {
	p.Config = &specs.ConfigFile{Volume: "deployment", Env: EnvDeployment, Dir: ConfigDir, Key: contract.DeploymentKey, ConfigMap: DeploymentConfigName(series)}
	p.Annotations = map[string]string{}
	if configHash != "" {
		p.Annotations[ConfigHashAnnotation] = configHash
	}
	return p
}

func (p pod) forRound(rd *mohitov1.Round, role, configHash string) pod {
	p.Role = role
	p.Labels = roundLabels(rd, role)
	p.ServiceAccount = rd.Name + "-integrator"
	p.NATSSecret = NATSSecretName(rd.Name)
	return p.uses(rd, configHash)
}

// Coordinator is the round clock: one replica, with leader election in JetStream KV so that a
// second one during a rollout never runs rounds. A rolling update starts the new pod as a
// standby; on SIGTERM the old one opens no new round, finishes the ones in flight and releases
// the lease, and the standby leads at once: no round aborts (docs/services.md).
//
// It holds sk_I: it announces pk_I to the vendors and takes part in the G2 share check.
func Coordinator(rd *mohitov1.Round, pl Platform, configHash string) *appsv1.Deployment {
	p := pod{key: &rd.Spec.Keys, Pod: specs.Pod{Redis: pl.IntegratorRedis, CPU: "100m", Memory: "128Mi"}}.forRound(rd, contract.RoleCoordinator, configHash)
	if n := rd.Spec.Rounds; n != nil {
		// spec.rounds: the coordinator stops once the series has opened this many rounds.
		p.Env = append(p.Env, corev1.EnvVar{Name: EnvMaxRounds, Value: strconv.FormatInt(*n, 10)})
	}
	return deployment(rd.Name+"-"+contract.RoleCoordinator, rd.Namespace, 1, p, pl, appsv1.RollingUpdateDeploymentStrategyType)
}

// Gateway is the user API; any number of replicas run behind GatewayService.
func Gateway(rd *mohitov1.Round, pl Platform, configHash string) *appsv1.Deployment {
	p := pod{Pod: specs.Pod{Redis: pl.IntegratorRedis, CPU: "200m", Memory: "256Mi",
		Env:   []corev1.EnvVar{{Name: specs.EnvListen, Value: ":" + strconv.Itoa(GatewayPort)}},
		Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: GatewayPort}},
	}}.forRound(rd, contract.RoleGateway, configHash)
	if t := rd.Spec.Gateway.Tokens; t != nil {
		p.Files = append(p.Files, specs.File{Volume: "tokens", Env: EnvTokensFile, Dir: TokensDir, Name: TokensFile, Ref: t})
	}
	return deployment(rd.Name+"-"+contract.RoleGateway, rd.Namespace, rd.Spec.Gateway.Replicas, p, pl, appsv1.RollingUpdateDeploymentStrategyType)
}

// GatewayService fronts the gateways (Envoy routes users to it).
func GatewayService(rd *mohitov1.Round) *corev1.Service {
	l := roundLabels(rd, contract.RoleGateway)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: rd.Name + "-" + contract.RoleGateway, Namespace: rd.Namespace, Labels: l},
		Spec: corev1.ServiceSpec{
			Selector: specs.Selector(l),
			Ports:    []corev1.ServicePort{{Name: "grpc", Port: GatewayPort, TargetPort: intstr.FromString("grpc"), AppProtocol: ptr.To("kubernetes.io/h2c")}},
		},
	}
}

// DecryptWorkers open the integrator layer of the shuffled stream (spec §4.5 stage A); they are
// stateless and scaled by the operator or through the Round's scale subresource.
func DecryptWorkers(rd *mohitov1.Round, pl Platform, configHash string, replicas int32) *appsv1.Deployment {
	p := pod{key: &rd.Spec.Keys, Pod: specs.Pod{CPU: "500m", Memory: "256Mi", Resources: rd.Spec.DecryptWorkers.Resources}}.forRound(rd, contract.RoleDecryptWorker, configHash)
	p.Spread = specs.Selector(p.Labels)
	return deployment(rd.Name+"-"+contract.RoleDecryptWorker, rd.Namespace, replicas, p, pl, appsv1.RollingUpdateDeploymentStrategyType)
}

// Responder assembles the response layer and routes answers into user mailboxes. It holds no
// private key: the G1 response layers use per-command symmetric keys.
func Responder(rd *mohitov1.Round, pl Platform, configHash string) *appsv1.Deployment {
	p := pod{Pod: specs.Pod{Redis: pl.IntegratorRedis, CPU: "200m", Memory: "256Mi"}}.forRound(rd, contract.RoleResponder, configHash)
	return deployment(rd.Name+"-"+contract.RoleResponder, rd.Namespace, 1, p, pl, appsv1.RollingUpdateDeploymentStrategyType)
}

// Encoders are the OKVS encoder partitions (spec §4.5 stage C): partition = pod ordinal, so a
// StatefulSet gives each partition a stable identity across restarts.
func Encoders(rd *mohitov1.Round, pl Platform, configHash string) *appsv1.StatefulSet {
	p := pod{Pod: specs.Pod{Redis: pl.IntegratorRedis, CPU: "500m", Memory: "512Mi", Resources: rd.Spec.Encoders.Resources,
		Env: []corev1.EnvVar{{Name: EnvPartition, Value: "auto"}}}}.forRound(rd, contract.RoleEncoder, configHash)
	p.Spread = specs.Selector(p.Labels)
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: rd.Name + "-" + contract.RoleEncoder, Namespace: rd.Namespace, Labels: p.Labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(rd.Spec.Encoders.Partitions),
			ServiceName:         rd.Name + "-" + contract.RoleEncoder,
			Selector:            &metav1.LabelSelector{MatchLabels: specs.Selector(p.Labels)},
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template:            p.template(pl),
		},
	}
}

// EncoderService is the StatefulSet's headless governing Service.
func EncoderService(rd *mohitov1.Round) *corev1.Service {
	l := roundLabels(rd, contract.RoleEncoder)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: rd.Name + "-" + contract.RoleEncoder, Namespace: rd.Namespace, Labels: l},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  specs.Selector(l),
			Ports:     []corev1.ServicePort{{Name: "metrics", Port: specs.MetricsPort, TargetPort: intstr.FromString("metrics")}},
		},
	}
}

// DisruptionBudgets keep voluntary evictions to one pod at a time for the replicated roles.
// The coordinator has none: it is one pod, and a budget would block node drains; a round in
// progress when it moves is aborted and retried by clients (spec G7).
func DisruptionBudgets(rd *mohitov1.Round) []*policyv1.PodDisruptionBudget {
	var out []*policyv1.PodDisruptionBudget
	for _, role := range []string{contract.RoleGateway, contract.RoleDecryptWorker, contract.RoleEncoder} {
		l := roundLabels(rd, role)
		out = append(out, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: rd.Name + "-" + role, Namespace: rd.Namespace, Labels: l},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MaxUnavailable: ptr.To(intstr.FromInt32(1)),
				Selector:       &metav1.LabelSelector{MatchLabels: specs.Selector(l)},
			},
		})
	}
	return out
}

// forVendor fills in a vendor role's pod. The vendor's roles read the deployment of the Round
// series that selects the vendor (one series per vendor).
func (p pod) forVendor(v *mohitov1.Vendor, series *mohitov1.Round, configHash, name, role string) pod {
	p.Role = role
	p.Labels = vendorLabels(name, role)
	p.ServiceAccount = v.Name + "-vendor"
	p.NATSSecret = NATSSecretName(v.Name)
	p.key = &v.Spec.Keys
	p.Env = append(p.Env, corev1.EnvVar{Name: EnvVendorIndex, Value: strconv.Itoa(int(v.Spec.Index))})
	return p.uses(series, configHash)
}

// VendorAgent is the vendor-side service devices connect to over MQTT; nil when the vendor
// runs its own (spec.agent unset).
func VendorAgent(v *mohitov1.Vendor, series *mohitov1.Round, pl Platform, configHash string) *appsv1.Deployment {
	if v.Spec.Agent == nil {
		return nil
	}
	p := pod{Pod: specs.Pod{CPU: "200m", Memory: "256Mi"}}.forVendor(v, series, configHash, v.Name, contract.RoleVendorAgent)
	if d := v.Spec.Agent.Devices; d != nil {
		p.Files = append(p.Files, specs.File{Volume: "devices", Env: EnvDevicesFile, Dir: DevicesDir, Name: DevicesFile, Ref: d})
	}
	return deployment(v.Name+"-"+contract.RoleVendorAgent, v.Namespace, v.Spec.Agent.Replicas, p, pl, appsv1.RollingUpdateDeploymentStrategyType)
}

// Shuffler is the shuffler service of one vendor, decrypting with that vendor's key.
func Shuffler(s *mohitov1.Shuffler, v *mohitov1.Vendor, series *mohitov1.Round, pl Platform, configHash string) *appsv1.Deployment {
	p := pod{Pod: specs.Pod{CPU: "500m", Memory: "512Mi", Env: []corev1.EnvVar{
		{Name: "OBSCURA_FAKE_POOL_SIZE", Value: strconv.Itoa(int(s.Spec.FakePool.Size))},
		{Name: "OBSCURA_FAKE_POOL_REFILL_BELOW", Value: strconv.Itoa(int(s.Spec.FakePool.RefillBelow))},
	}}}.forVendor(v, series, configHash, s.Name, contract.RoleShuffler)
	return deployment(s.Name, s.Namespace, s.Spec.Replicas, p, pl, appsv1.RollingUpdateDeploymentStrategyType)
}
