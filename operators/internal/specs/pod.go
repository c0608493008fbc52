package specs

import (
	"maps"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/obscura-iot/obscura/operators/api/common"
)

// Runtime is what every system's workloads share (the operator's flags, the chart's values):
// how images are pulled, where NATS and Vault are, how pods are placed and sized.
type Runtime struct {
	ImagePullPolicy corev1.PullPolicy
	// NATSURL reaches the NATS server; each party authenticates as its own user.
	NATSURL string
	// NATSReplicas, above 1, is every role's --nats-replicas: the replicas of the streams,
	// buckets and object stores it creates (3 on a three-node JetStream cluster). 0 or 1 keeps
	// the services' default (1) and sets nothing.
	NATSReplicas int
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
	// ScrapeAnnotations adds prometheus.io/scrape, /port (MetricsPort) and /path (/metrics) to
	// every pod (--scrape-annotations: for a Prometheus that discovers pods by annotation, when
	// no PodMonitor covers them). Not on the host network, where the metrics port is dynamic.
	ScrapeAnnotations bool
	// TopologySpread is the whenUnsatisfiable of the spread constraint of the roles that run as
	// many interchangeable pods (Pod.Spread: decrypt workers, encoders, PDA database shards):
	// maxSkew 1 over kubernetes.io/hostname. ScheduleAnyway (the operator's default) only
	// prefers spreading and never leaves a pod pending (one node, or too few); DoNotSchedule
	// requires it; "" adds no constraint (--topology-spread).
	TopologySpread corev1.UnsatisfiableConstraintAction
}

// Pod is one role's pod as a system's builder describes it; Template is the one place that
// turns it into a pod template, so every system's roles run the same way: NATS user from the
// party's credentials Secret and its password mounted as a file (never in the environment),
// /metrics on MetricsPort and /healthz, /readyz on HealthPort, secrets mounted read-only with
// mode 0400, the restricted security context, host-network mode when the runtime asks for it.
type Pod struct {
	// Role is the container's name and its argument: the image runs `<Binary> <Role>`.
	Role string
	// Image runs the role; Binary is its entrypoint, whose `probe` subcommand the exec probes
	// of host-network pods run.
	Image, Binary string
	Labels        map[string]string
	Annotations   map[string]string
	// ServiceAccount runs the pod; its token is mounted only for a Vault key.
	ServiceAccount string
	// NATSSecret is the party's credentials Secret (NATSSecret); "" for a role that must hold
	// no NATS credentials at all (the PPS garbler, spec §10 #10): no NATS variable or volume.
	NATSSecret string
	// ServiceAccountToken mounts the service account's token for a role that logs in to
	// Vault by itself (Kubernetes auth) without a Key: the PPS garbler's Transit keys.
	ServiceAccountToken bool
	// Config, when set, is a ConfigMap entry the role reads as a file.
	Config *ConfigFile
	// EnvFrom, when set, names a ConfigMap whose entries are variables of the role.
	EnvFrom string
	// Key is the party's private key; nil for roles that hold none (least privilege).
	Key *Key
	// Redis, when set, is the role's Redis address.
	Redis string
	// Files are Secret entries the role reads as files; Dirs are Secrets mounted whole.
	Files []File
	Dirs  []SecretDir
	// Env comes last, so it may refer to every variable above with $(VAR).
	Env []corev1.EnvVar
	// Ports are the role's own listeners besides metrics and health.
	Ports       []corev1.ContainerPort
	CPU, Memory string
	// Resources, when set, replace the requests and limits made of CPU and Memory (a
	// resource's own spec.…resources).
	Resources *corev1.ResourceRequirements
	// Spread, when set, selects the pods of the role's workload (its selector): they are spread
	// over the nodes as Runtime.TopologySpread says.
	Spread map[string]string
}

// ConfigFile is a ConfigMap entry mounted as Dir/Key and named by the variable Env.
type ConfigFile struct {
	Volume, Env, Dir, Key, ConfigMap string
}

// Key says where a role finds its party's private key: a Secret entry mounted as Dir/File
// (a key ring Secret mounted whole as Dir, so the kubelet updates it in place), or Vault.
type Key struct {
	Ref *common.KeyReference
	// Env names the key file (the ring directory) to the role.
	Env, Dir, File string
	// ActivationDelay, when positive, is the role's --key-activation-delay.
	ActivationDelay time.Duration
}

// File is a Secret entry a role reads as Dir/Name, named by the variable Env.
type File struct {
	Volume, Env, Dir, Name string
	Ref                    *common.SecretFileReference
}

func (f File) key() string {
	if f.Ref.Key != "" {
		return f.Ref.Key
	}
	return f.Name
}

// SecretDir is a whole Secret mounted at Dir (variables in Pod.Env name its files).
type SecretDir struct {
	Volume, Dir, Secret string
}

// Template is the pod template of p under runtime rt.
func (p Pod) Template(rt Runtime) corev1.PodTemplateSpec {
	var env []corev1.EnvVar
	var mounts []corev1.VolumeMount
	var volumes []corev1.Volume
	if p.NATSSecret != "" {
		env = []corev1.EnvVar{
			{Name: EnvNATSURL, Value: rt.NATSURL},
			{Name: EnvNATSUser, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: p.NATSSecret}, Key: NATSUserKey}}},
			{Name: EnvNATSPasswordFile, Value: NATSDir + "/" + NATSPasswordKey},
		}
		if rt.NATSReplicas > 1 {
			env = append(env, corev1.EnvVar{Name: EnvNATSReplicas, Value: strconv.Itoa(rt.NATSReplicas)})
		}
		mounts = []corev1.VolumeMount{{Name: "nats", MountPath: NATSDir, ReadOnly: true}}
		volumes = []corev1.Volume{{Name: "nats", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: p.NATSSecret, Items: []corev1.KeyToPath{{Key: NATSPasswordKey, Path: NATSPasswordKey}}, DefaultMode: ptr.To[int32](0o400)}}}}
	}
	env = append(env,
		corev1.EnvVar{Name: EnvMetricsAddr, Value: ":" + strconv.Itoa(MetricsPort)},
		corev1.EnvVar{Name: EnvHealthAddr, Value: ":" + strconv.Itoa(HealthPort)},
		corev1.EnvVar{Name: EnvPodName, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
	)
	if c := p.Config; c != nil {
		env = append(env, corev1.EnvVar{Name: c.Env, Value: c.Dir + "/" + c.Key})
		mounts = append(mounts, corev1.VolumeMount{Name: c.Volume, MountPath: c.Dir + "/" + c.Key, SubPath: c.Key, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: c.Volume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: c.ConfigMap}}}})
	}
	automount := p.ServiceAccountToken
	if k := p.Key; k != nil {
		switch ref := k.Ref; {
		case ref.SecretRef != nil && ref.SecretRef.Epochs:
			// A key ring: the Secret mounted whole (no items, no subPath), so the kubelet updates
			// the directory in place when an epoch is added and the role stages it live.
			env = append(env, corev1.EnvVar{Name: k.Env, Value: k.Dir})
			mounts = append(mounts, corev1.VolumeMount{Name: "keys", MountPath: k.Dir, ReadOnly: true})
			volumes = append(volumes, corev1.Volume{Name: "keys", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: ref.SecretRef.Name, DefaultMode: ptr.To[int32](0o400)}}})
		case ref.SecretRef != nil:
			item := ref.SecretRef.Key
			if item == "" {
				item = KeyFile
			}
			env = append(env, corev1.EnvVar{Name: k.Env, Value: k.Dir + "/" + k.File})
			mounts = append(mounts, corev1.VolumeMount{Name: "keys", MountPath: k.Dir, ReadOnly: true})
			volumes = append(volumes, corev1.Volume{Name: "keys", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: ref.SecretRef.Name, Items: []corev1.KeyToPath{{Key: item, Path: k.File}}, DefaultMode: ptr.To[int32](0o400)}}})
		case ref.Vault != nil:
			// The role logs in to Vault with its service account token (Kubernetes auth), reads
			// the key once and holds it in memory; the token is the only API credential it gets.
			env = append(env, vaultKeyEnv(ref.Vault, rt.VaultAddress)...)
			automount = true
		}
		if k.ActivationDelay > 0 {
			env = append(env, corev1.EnvVar{Name: EnvKeyActivationDelay, Value: k.ActivationDelay.String()})
		}
	}
	if p.Redis != "" {
		env = append(env, corev1.EnvVar{Name: EnvRedisAddr, Value: p.Redis})
	}
	for _, f := range p.Files {
		env = append(env, corev1.EnvVar{Name: f.Env, Value: f.Dir + "/" + f.Name})
		mounts = append(mounts, corev1.VolumeMount{Name: f.Volume, MountPath: f.Dir, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: f.Volume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: f.Ref.Name, Items: []corev1.KeyToPath{{Key: f.key(), Path: f.Name}}, DefaultMode: ptr.To[int32](0o400)}}})
	}
	for _, d := range p.Dirs {
		mounts = append(mounts, corev1.VolumeMount{Name: d.Volume, MountPath: d.Dir, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: d.Volume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: d.Secret, DefaultMode: ptr.To[int32](0o400)}}})
	}
	env = append(env, p.Env...)
	var envFrom []corev1.EnvFromSource
	if p.EnvFrom != "" {
		envFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: p.EnvFrom}}}}
	}
	ports := append([]corev1.ContainerPort{
		{Name: "metrics", ContainerPort: MetricsPort},
		{Name: "health", ContainerPort: HealthPort},
	}, p.Ports...)
	t := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: p.Labels, Annotations: p.annotations(rt)},
		Spec: corev1.PodSpec{
			ServiceAccountName:           p.ServiceAccount,
			AutomountServiceAccountToken: ptr.To(automount),
			SecurityContext:              restrictedPod(),
			Containers: []corev1.Container{{
				Name:            p.Role,
				Image:           p.Image,
				ImagePullPolicy: rt.ImagePullPolicy,
				Args:            []string{p.Role},
				EnvFrom:         envFrom,
				Env:             env,
				Ports:           ports,
				VolumeMounts:    mounts,
				LivenessProbe:   httpProbe("/healthz", "health"),
				ReadinessProbe:  httpProbe("/readyz", "health"),
				Resources:       p.resources(rt),
				SecurityContext: restrictedContainer(),
			}},
			Volumes:                       volumes,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
		},
	}
	if p.Spread != nil && rt.TopologySpread != "" {
		t.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: rt.TopologySpread,
			LabelSelector: &metav1.LabelSelector{MatchLabels: maps.Clone(p.Spread)},
		}}
	}
	if rt.HostNetwork {
		onHostNetwork(&t.Spec, p.Binary)
	}
	return t
}

// TopologySpreads are the values of Runtime.TopologySpread (--topology-spread): "" is none.
var TopologySpreads = []corev1.UnsatisfiableConstraintAction{corev1.ScheduleAnyway, corev1.DoNotSchedule, ""}

// annotations are the caller's, with the prometheus.io ones when the runtime asks for them.
func (p Pod) annotations(rt Runtime) map[string]string {
	if !rt.ScrapeAnnotations || rt.HostNetwork {
		return p.Annotations
	}
	out := make(map[string]string, len(p.Annotations)+3)
	maps.Copy(out, p.Annotations)
	out[AnnotationScrape] = "true"
	out[AnnotationScrapePort] = strconv.Itoa(MetricsPort)
	out[AnnotationScrapePath] = "/metrics"
	return out
}

// The annotations an annotation-based Prometheus discovers pods by.
const (
	AnnotationScrape     = "prometheus.io/scrape"
	AnnotationScrapePort = "prometheus.io/port"
	AnnotationScrapePath = "prometheus.io/path"
)

// resources are the container's requests and limits: the resource's own when it sets them,
// else the role's defaults (with the runtime's CPU request for small clusters).
func (p Pod) resources(rt Runtime) corev1.ResourceRequirements {
	if p.Resources != nil {
		return *p.Resources.DeepCopy()
	}
	return resources(orDefault(rt.CPURequest, p.CPU), p.Memory)
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
