package specs

import (
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/obscura-iot/obscura/operators/api/common"
	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// Runtime is what Mohito's and PDA's workloads share (the operator's flags, the chart's values):
// how images are pulled, where NATS and Vault are, how pods are placed and sized.
type Runtime struct {
	ImagePullPolicy corev1.PullPolicy
	// NATSURL reaches the NATS server; each party authenticates as its own user.
	NATSURL string
	// VaultAddress is the default Vault address for key references without their own.
	VaultAddress string
	// HostNetwork runs every pod on the node's network on 127.0.0.1 (hostnetwork.go).
	HostNetwork bool
	// CPURequest, when set, replaces every workload's CPU request (small clusters: the local
	// one has 2 CPUs for everything).
	CPURequest string
	// KeyActivationDelay, when set, is every key-holding role's --key-activation-delay: how long
	// after loading a new key epoch it starts naming and announcing it (longer than a Secret
	// update takes to reach every pod). Zero keeps the services' default.
	KeyActivationDelay time.Duration
}

// KeyActivation is the activation delay the workloads use, for messages.
func (r Runtime) KeyActivation() string {
	if r.KeyActivationDelay > 0 {
		return r.KeyActivationDelay.String()
	}
	return contract.DefaultKeyActivationDelay.String()
}

// Platform is what the operator knows about where it deploys Mohito.
type Platform struct {
	// Image runs every Mohito role.
	Image string
	// IntegratorRedis is the integrator's Redis (round state, mailboxes).
	IntegratorRedis string
	Runtime
}

// Validate reports what is missing for workloads to be built.
func (p Platform) Validate() error {
	if p.Image == "" || p.NATSURL == "" {
		return fmt.Errorf("the operator needs --mohito-image and --nats-url to run Mohito workloads")
	}
	return nil
}

func roundLabels(rd *mohitov1.Round, component string) map[string]string {
	return map[string]string{
		LabelName: "mohito", LabelInstance: rd.Name, LabelComponent: component,
		LabelManagedBy: ManagedBy, LabelPartOf: "obscura",
	}
}

func vendorLabels(name, component string) map[string]string {
	return map[string]string{
		LabelName: "mohito", LabelInstance: name, LabelComponent: component,
		LabelManagedBy: ManagedBy, LabelPartOf: "obscura",
	}
}

// selector is the subset of labels that identifies a workload's pods; it never changes, so
// Deployments and StatefulSets keep their (immutable) selectors across upgrades.
func selector(labels map[string]string) map[string]string {
	return map[string]string{LabelName: labels[LabelName], LabelInstance: labels[LabelInstance], LabelComponent: labels[LabelComponent]}
}

// WorkerSelector is the decryption workers' pod selector as a string (the scale subresource).
func WorkerSelector(rd *mohitov1.Round) string {
	l := selector(roundLabels(rd, contract.RoleDecryptWorker))
	return fmt.Sprintf("%s=%s,%s=%s,%s=%s", LabelComponent, l[LabelComponent], LabelInstance, l[LabelInstance], LabelName, l[LabelName])
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

// NATSSecret is a party's NATS credentials.
func NATSSecret(namespace, owner, user string, password []byte, labels map[string]string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: NATSSecretName(owner), Namespace: namespace, Labels: labels},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"user": []byte(user), "password": password},
	}
}

// RoundNATSSecret is the integrator's NATS credentials for a Round's workloads: the Round's
// own user (RoundNATSUser) in the integrator account.
func RoundNATSSecret(rd *mohitov1.Round, password []byte) *corev1.Secret {
	return withNATSAccount(NATSSecret(rd.Namespace, rd.Name, RoundNATSUser(rd), password, roundLabels(rd, "integrator")), contract.IntegratorAccount)
}

// VendorNATSSecret is a vendor's NATS credentials: its service user (shuffler and agent) and
// the restricted user its devices connect as (NATSDeviceUserKey, NATSDevicePasswordKey).
func VendorNATSSecret(v *mohitov1.Vendor, password, devicePassword []byte) *corev1.Secret {
	idx := int(v.Spec.Index)
	s := withNATSAccount(NATSSecret(v.Namespace, v.Name, contract.VendorUser(idx), password, vendorLabels(v.Name, "vendor")), contract.VendorAccount(idx))
	s.Data[NATSDeviceUserKey] = []byte(contract.DeviceUser(idx))
	s.Data[NATSDevicePasswordKey] = devicePassword
	return s
}

// secretFile is a Secret key a role reads as a file at dir/file, named by env.
type secretFile struct {
	volume, env, dir, file string
	ref                    *common.SecretFileReference
}

func (f secretFile) key() string {
	if f.ref.Key != "" {
		return f.ref.Key
	}
	return f.file
}

// pod is the shared description of one role's pod.
type pod struct {
	role        string
	labels      map[string]string
	sa          string
	configMap   string               // deployment ConfigMap, "" for none
	key         *common.KeyReference // the party's private key, nil for roles that hold none
	natsSecret  string
	redis       string
	configHash  string
	extraEnv    []corev1.EnvVar
	extraPorts  []corev1.ContainerPort
	files       []secretFile
	cpu, memory string
}

func (p pod) template(pl Platform) corev1.PodTemplateSpec {
	env := []corev1.EnvVar{
		{Name: EnvNATSURL, Value: pl.NATSURL},
		{Name: EnvNATSUser, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: p.natsSecret}, Key: "user"}}},
		{Name: EnvNATSPasswordFile, Value: NATSDir + "/password"},
		{Name: EnvMetricsAddr, Value: ":" + strconv.Itoa(MetricsPort)},
		{Name: EnvHealthAddr, Value: ":" + strconv.Itoa(HealthPort)},
		{Name: EnvPodName, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
	}
	mounts := []corev1.VolumeMount{{Name: "nats", MountPath: NATSDir, ReadOnly: true}}
	volumes := []corev1.Volume{{Name: "nats", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: p.natsSecret, Items: []corev1.KeyToPath{{Key: "password", Path: "password"}}, DefaultMode: ptr.To[int32](0o400)}}}}
	if p.configMap != "" {
		env = append(env, corev1.EnvVar{Name: EnvDeployment, Value: ConfigDir + "/" + contract.DeploymentKey})
		mounts = append(mounts, corev1.VolumeMount{Name: "deployment", MountPath: ConfigDir + "/" + contract.DeploymentKey, SubPath: contract.DeploymentKey, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "deployment", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: p.configMap}}}})
	}
	automount := false
	switch k := p.key; {
	case k != nil && k.SecretRef != nil && k.SecretRef.Epochs:
		// A key ring: the Secret mounted whole (no items, no subPath), so the kubelet updates
		// the directory in place when an epoch is added and the role stages it live.
		env = append(env, corev1.EnvVar{Name: EnvKeyFile, Value: KeysDir})
		mounts = append(mounts, corev1.VolumeMount{Name: "keys", MountPath: KeysDir, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "keys", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: k.SecretRef.Name, DefaultMode: ptr.To[int32](0o400)}}})
	case k != nil && k.SecretRef != nil:
		item := k.SecretRef.Key
		if item == "" {
			item = KeyFile
		}
		env = append(env, corev1.EnvVar{Name: EnvKeyFile, Value: KeysDir + "/" + KeyFile})
		mounts = append(mounts, corev1.VolumeMount{Name: "keys", MountPath: KeysDir, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "keys", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: k.SecretRef.Name, Items: []corev1.KeyToPath{{Key: item, Path: KeyFile}}, DefaultMode: ptr.To[int32](0o400)}}})
	case k != nil && k.Vault != nil:
		// The role logs in to Vault with its service account token (Kubernetes auth), reads
		// the key once and holds it in memory; the token is the only API credential it gets.
		env = append(env, vaultKeyEnv(k.Vault, pl.VaultAddress)...)
		automount = true
	}
	if p.key != nil && pl.KeyActivationDelay > 0 {
		env = append(env, corev1.EnvVar{Name: EnvKeyActivationDelay, Value: pl.KeyActivationDelay.String()})
	}
	if p.redis != "" {
		env = append(env, corev1.EnvVar{Name: EnvRedisAddr, Value: p.redis})
	}
	for _, f := range p.files {
		env = append(env, corev1.EnvVar{Name: f.env, Value: f.dir + "/" + f.file})
		mounts = append(mounts, corev1.VolumeMount{Name: f.volume, MountPath: f.dir, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: f.volume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: f.ref.Name, Items: []corev1.KeyToPath{{Key: f.key(), Path: f.file}}, DefaultMode: ptr.To[int32](0o400)}}})
	}
	env = append(env, p.extraEnv...)
	ports := append([]corev1.ContainerPort{
		{Name: "metrics", ContainerPort: MetricsPort},
		{Name: "health", ContainerPort: HealthPort},
	}, p.extraPorts...)
	annotations := map[string]string{}
	if p.configHash != "" {
		annotations[ConfigHashAnnotation] = p.configHash
	}
	t := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: p.labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			ServiceAccountName:           p.sa,
			AutomountServiceAccountToken: ptr.To(automount),
			SecurityContext:              restrictedPod(),
			Containers: []corev1.Container{{
				Name:            p.role,
				Image:           pl.Image,
				ImagePullPolicy: pl.ImagePullPolicy,
				Args:            []string{p.role},
				Env:             env,
				Ports:           ports,
				VolumeMounts:    mounts,
				LivenessProbe:   httpProbe("/healthz", "health"),
				ReadinessProbe:  httpProbe("/readyz", "health"),
				Resources:       resources(orDefault(pl.CPURequest, p.cpu), p.memory),
				SecurityContext: restrictedContainer(),
			}},
			Volumes:                       volumes,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
		},
	}
	if pl.HostNetwork {
		onHostNetwork(&t.Spec, MohitoBinary, []string{EnvMetricsAddr, EnvHealthAddr}, []string{EnvListen})
	}
	return t
}

func deployment(name, namespace string, replicas int32, p pod, pl Platform, strategy appsv1.DeploymentStrategyType) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: p.labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: selector(p.labels)},
			Strategy: appsv1.DeploymentStrategy{Type: strategy},
			Template: p.template(pl),
		},
	}
}

func (p pod) forRound(rd *mohitov1.Round, role, configHash string) pod {
	p.role = role
	p.labels = roundLabels(rd, role)
	p.sa = rd.Name + "-integrator"
	p.configMap = DeploymentConfigName(rd)
	p.natsSecret = NATSSecretName(rd.Name)
	p.configHash = configHash
	return p
}

// vaultKeyEnv is how a role learns where its key is in Vault (services/pkg/keys reads these
// variables in every binary); defaultAddr serves references without their own address.
func vaultKeyEnv(v *common.VaultKeyReference, defaultAddr string) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: EnvVaultAddr, Value: orDefault(v.Address, defaultAddr)},
		{Name: EnvVaultRole, Value: v.Role},
		{Name: EnvVaultMount, Value: orDefault(v.Mount, "secret")},
		{Name: EnvVaultPath, Value: v.Path},
		{Name: EnvVaultField, Value: orDefault(v.Field, "private_key")},
	}
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// Coordinator is the round clock: one replica, with leader election in JetStream KV so that a
// second one during a rollout never runs rounds. A rolling update starts the new pod as a
// standby; on SIGTERM the old one opens no new round, finishes the ones in flight and releases
// the lease, and the standby leads at once: no round aborts (docs/services.md).
//
// It holds sk_I: it announces pk_I to the vendors and takes part in the G2 share check.
func Coordinator(rd *mohitov1.Round, pl Platform, configHash string) *appsv1.Deployment {
	p := pod{key: &rd.Spec.Keys, redis: pl.IntegratorRedis, cpu: "100m", memory: "128Mi"}.forRound(rd, contract.RoleCoordinator, configHash)
	return deployment(rd.Name+"-"+contract.RoleCoordinator, rd.Namespace, 1, p, pl, appsv1.RollingUpdateDeploymentStrategyType)
}

// Gateway is the user API; any number of replicas run behind GatewayService.
func Gateway(rd *mohitov1.Round, pl Platform, configHash string) *appsv1.Deployment {
	p := pod{redis: pl.IntegratorRedis, cpu: "200m", memory: "256Mi",
		extraEnv:   []corev1.EnvVar{{Name: EnvListen, Value: ":" + strconv.Itoa(GatewayPort)}},
		extraPorts: []corev1.ContainerPort{{Name: "grpc", ContainerPort: GatewayPort}},
	}.forRound(rd, contract.RoleGateway, configHash)
	if t := rd.Spec.Gateway.Tokens; t != nil {
		p.files = append(p.files, secretFile{volume: "tokens", env: EnvTokensFile, dir: TokensDir, file: TokensFile, ref: t})
	}
	return deployment(rd.Name+"-"+contract.RoleGateway, rd.Namespace, rd.Spec.Gateway.Replicas, p, pl, appsv1.RollingUpdateDeploymentStrategyType)
}

// GatewayService fronts the gateways (Envoy routes users to it).
func GatewayService(rd *mohitov1.Round) *corev1.Service {
	l := roundLabels(rd, contract.RoleGateway)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: rd.Name + "-" + contract.RoleGateway, Namespace: rd.Namespace, Labels: l},
		Spec: corev1.ServiceSpec{
			Selector: selector(l),
			Ports:    []corev1.ServicePort{{Name: "grpc", Port: GatewayPort, TargetPort: intstr.FromString("grpc"), AppProtocol: ptr.To("kubernetes.io/h2c")}},
		},
	}
}

// DecryptWorkers open the integrator layer of the shuffled stream (spec §4.5 stage A); they are
// stateless and scaled by the operator or through the Round's scale subresource.
func DecryptWorkers(rd *mohitov1.Round, pl Platform, configHash string, replicas int32) *appsv1.Deployment {
	p := pod{key: &rd.Spec.Keys, cpu: "500m", memory: "256Mi"}.forRound(rd, contract.RoleDecryptWorker, configHash)
	return deployment(rd.Name+"-"+contract.RoleDecryptWorker, rd.Namespace, replicas, p, pl, appsv1.RollingUpdateDeploymentStrategyType)
}

// Responder assembles the response layer and routes answers into user mailboxes. It holds no
// private key: the G1 response layers use per-command symmetric keys.
func Responder(rd *mohitov1.Round, pl Platform, configHash string) *appsv1.Deployment {
	p := pod{redis: pl.IntegratorRedis, cpu: "200m", memory: "256Mi"}.forRound(rd, contract.RoleResponder, configHash)
	return deployment(rd.Name+"-"+contract.RoleResponder, rd.Namespace, 1, p, pl, appsv1.RollingUpdateDeploymentStrategyType)
}

// Encoders are the OKVS encoder partitions (spec §4.5 stage C): partition = pod ordinal, so a
// StatefulSet gives each partition a stable identity across restarts.
func Encoders(rd *mohitov1.Round, pl Platform, configHash string) *appsv1.StatefulSet {
	p := pod{redis: pl.IntegratorRedis, cpu: "500m", memory: "512Mi",
		extraEnv: []corev1.EnvVar{{Name: EnvPartition, Value: "auto"}}}.forRound(rd, contract.RoleEncoder, configHash)
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: rd.Name + "-" + contract.RoleEncoder, Namespace: rd.Namespace, Labels: p.labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(rd.Spec.Encoders.Partitions),
			ServiceName:         rd.Name + "-" + contract.RoleEncoder,
			Selector:            &metav1.LabelSelector{MatchLabels: selector(p.labels)},
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
			Selector:  selector(l),
			Ports:     []corev1.ServicePort{{Name: "metrics", Port: MetricsPort, TargetPort: intstr.FromString("metrics")}},
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
				Selector:       &metav1.LabelSelector{MatchLabels: selector(l)},
			},
		})
	}
	return out
}

// forVendor fills in a vendor role's pod. The vendor's roles read the deployment of the Round
// series that selects the vendor (one series per vendor).
func (p pod) forVendor(v *mohitov1.Vendor, series *mohitov1.Round, configHash, name, role string) pod {
	p.role = role
	p.configMap = DeploymentConfigName(series)
	p.configHash = configHash
	p.labels = vendorLabels(name, role)
	p.sa = v.Name + "-vendor"
	p.natsSecret = NATSSecretName(v.Name)
	p.key = &v.Spec.Keys
	p.extraEnv = append(p.extraEnv, corev1.EnvVar{Name: EnvVendorIndex, Value: strconv.Itoa(int(v.Spec.Index))})
	return p
}

// VendorAgent is the vendor-side service devices connect to over MQTT; nil when the vendor
// runs its own (spec.agent unset).
func VendorAgent(v *mohitov1.Vendor, series *mohitov1.Round, pl Platform, configHash string) *appsv1.Deployment {
	if v.Spec.Agent == nil {
		return nil
	}
	p := pod{cpu: "200m", memory: "256Mi"}.forVendor(v, series, configHash, v.Name, contract.RoleVendorAgent)
	if d := v.Spec.Agent.Devices; d != nil {
		p.files = append(p.files, secretFile{volume: "devices", env: EnvDevicesFile, dir: DevicesDir, file: DevicesFile, ref: d})
	}
	return deployment(v.Name+"-"+contract.RoleVendorAgent, v.Namespace, v.Spec.Agent.Replicas, p, pl, appsv1.RollingUpdateDeploymentStrategyType)
}

// Shuffler is the shuffler service of one vendor, decrypting with that vendor's key.
func Shuffler(s *mohitov1.Shuffler, v *mohitov1.Vendor, series *mohitov1.Round, pl Platform, configHash string) *appsv1.Deployment {
	p := pod{cpu: "500m", memory: "512Mi", extraEnv: []corev1.EnvVar{
		{Name: "OBSCURA_FAKE_POOL_SIZE", Value: strconv.Itoa(int(s.Spec.FakePool.Size))},
		{Name: "OBSCURA_FAKE_POOL_REFILL_BELOW", Value: strconv.Itoa(int(s.Spec.FakePool.RefillBelow))},
	}}.forVendor(v, series, configHash, s.Name, contract.RoleShuffler)
	return deployment(s.Name, s.Namespace, s.Spec.Replicas, p, pl, appsv1.RollingUpdateDeploymentStrategyType)
}
