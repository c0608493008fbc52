// Package sddr builds the Kubernetes objects of an EncounterMailbox (docs/operators.md
// "EncounterMailbox"): the mailbox API (`sddr mailbox`) as a Deployment in front of its own
// Redis, and its Service.
package sddr

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	sddrv1 "github.com/obscura-iot/obscura/operators/api/sddr/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
)

// How the operator runs `sddr mailbox` (services/cmd/sddr/mailbox.go): flags through
// OBSCURA_<FLAG> (specs.Env); --metrics-addr and --health-addr come from the shared pod builder.
const (
	// Binary is the image's entrypoint (hack/images), used by exec probes.
	Binary = "/usr/local/bin/sddr"

	RoleMailbox = "mailbox"

	FlagListenAddr        = "listen-addr"
	FlagReusePort         = "reuse-port"
	FlagRedisAddr         = "redis-addr"
	FlagRedisPasswordFile = "redis-password-file"
	FlagTTL               = "ttl"
	FlagMaxMessages       = "max-messages"
	FlagMaxMessageBytes   = "max-message-bytes"
	FlagRate              = "rate"
	FlagBurst             = "burst"
	FlagMaxClients        = "max-clients"

	// RedisPasswordKey is the default entry of a Redis password Secret (and its file name).
	RedisPasswordKey = "password"
	SecretsDir       = "/var/run/secrets/sddr"

	// DefaultPort is the mailbox API's port when the resource names none.
	DefaultPort = 8090

	// LabelMailbox ties an object to its EncounterMailbox.
	LabelMailbox = "sddr.obscura.dev/mailbox"
)

// Platform is what the operator knows about where the SDDR services run.
type Platform struct {
	// Image runs `sddr mailbox`.
	Image string
	specs.Runtime
}

// Validate reports what is missing for workloads to be built.
func (p Platform) Validate() error {
	if p.Image == "" {
		return errors.New("the operator needs --sddr-image to run EncounterMailboxes")
	}
	return nil
}

func podLabels(m *sddrv1.EncounterMailbox) map[string]string {
	l := specs.Labels("sddr", m.Name, RoleMailbox)
	l[LabelMailbox] = m.Name
	return l
}

// PodSelector selects the mailbox pods of m.
func PodSelector(m *sddrv1.EncounterMailbox) map[string]string { return specs.Selector(podLabels(m)) }

// SelectorString is PodSelector as the scale subresource's label selector.
func SelectorString(m *sddrv1.EncounterMailbox) string {
	return labels.SelectorFromSet(PodSelector(m)).String()
}

// Name is the name of the mailbox's Deployment and Service, e.g. mailbox-sddr-mailbox.
func Name(m *sddrv1.EncounterMailbox) string { return m.Name + "-sddr-mailbox" }

// Replicas is spec.replicas with its default.
func Replicas(m *sddrv1.EncounterMailbox) int32 { return max(m.Spec.Replicas, 1) }

// Port is the API's port.
func Port(m *sddrv1.EncounterMailbox) int32 {
	if m.Spec.Port > 0 {
		return m.Spec.Port
	}
	return DefaultPort
}

// Settings are the mailbox's flags with the API's defaults filled in.
type Settings struct {
	TTL                          time.Duration
	MaxMessages, MaxMessageBytes int32
	Rate, Burst, MaxClients      int32
}

// SettingsOf fills in the defaults of m's spec.
func SettingsOf(m *sddrv1.EncounterMailbox) Settings {
	sp := m.Spec
	s := Settings{TTL: sp.MessageTTL.Duration, MaxMessages: sp.MaxMessages, MaxMessageBytes: sp.MaxMessageBytes,
		Rate: sp.RateLimit.RequestsPerSecond, Burst: sp.RateLimit.Burst, MaxClients: sp.RateLimit.MaxClients}
	def := func(v *int32, d int32) {
		if *v == 0 {
			*v = d
		}
	}
	if s.TTL == 0 {
		s.TTL = 24 * time.Hour
	}
	def(&s.MaxMessages, 64)
	def(&s.MaxMessageBytes, sddrv1.MaxMessageBytes)
	def(&s.Rate, 5)
	def(&s.Burst, 20)
	def(&s.MaxClients, 100000)
	return s
}

// Validate checks what CEL cannot (or what an older API server let through), with the
// bounds `sddr mailbox` enforces at start.
func Validate(m *sddrv1.EncounterMailbox) error {
	var errs []error
	host, port, err := net.SplitHostPort(m.Spec.Redis.Address)
	if err != nil || host == "" {
		errs = append(errs, fmt.Errorf("redis.address %q is not host:port", m.Spec.Redis.Address))
	} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		errs = append(errs, fmt.Errorf("redis.address %q: port out of range", m.Spec.Redis.Address))
	}
	s := SettingsOf(m)
	if s.TTL < time.Second || s.TTL > 720*time.Hour {
		errs = append(errs, fmt.Errorf("messageTTL %s must be within [1s, 720h]", s.TTL))
	}
	if s.MaxMessages < 1 || s.MaxMessages > 10000 {
		errs = append(errs, fmt.Errorf("maxMessages %d must be within [1, 10000]", s.MaxMessages))
	}
	if s.MaxMessageBytes < sddrv1.MinMessageBytes || s.MaxMessageBytes > sddrv1.MaxMessageBytes {
		errs = append(errs, fmt.Errorf("maxMessageBytes %d must be within [%d, %d]", s.MaxMessageBytes, sddrv1.MinMessageBytes, sddrv1.MaxMessageBytes))
	}
	if s.Rate < 1 || s.Burst < 1 || s.MaxClients < 1 {
		errs = append(errs, errors.New("rateLimit: requestsPerSecond, burst and maxClients must be positive"))
	}
	if r := Replicas(m); r > 32 {
		errs = append(errs, fmt.Errorf("replicas %d must be at most 32", r))
	}
	return errors.Join(errs...)
}

// Endpoint is the mailbox API's in-cluster URL: its Service, or 127.0.0.1 on a host network.
func Endpoint(m *sddrv1.EncounterMailbox, pl Platform) string {
	if pl.HostNetwork {
		return "http://127.0.0.1:" + strconv.Itoa(int(Port(m)))
	}
	return "http://" + Name(m) + "." + m.Namespace + ".svc:" + strconv.Itoa(int(Port(m)))
}

// Mailbox runs the mailbox API: a Deployment of stateless replicas (the messages live in the
// mailbox's Redis), each with the resource's TTL, size bound and rate limit, and the Redis
// password mounted as a file. On a host network the replicas share the node's port with
// SO_REUSEPORT.
func Mailbox(m *sddrv1.EncounterMailbox, pl Platform) *appsv1.Deployment {
	s := SettingsOf(m)
	env := []corev1.EnvVar{
		{Name: specs.Env(FlagListenAddr), Value: ":" + strconv.Itoa(int(Port(m)))},
		{Name: specs.Env(FlagRedisAddr), Value: m.Spec.Redis.Address},
		{Name: specs.Env(FlagTTL), Value: s.TTL.String()},
		{Name: specs.Env(FlagMaxMessages), Value: strconv.Itoa(int(s.MaxMessages))},
		{Name: specs.Env(FlagMaxMessageBytes), Value: strconv.Itoa(int(s.MaxMessageBytes))},
		{Name: specs.Env(FlagRate), Value: strconv.Itoa(int(s.Rate))},
		{Name: specs.Env(FlagBurst), Value: strconv.Itoa(int(s.Burst))},
		{Name: specs.Env(FlagMaxClients), Value: strconv.Itoa(int(s.MaxClients))},
	}
	if pl.HostNetwork {
		env[0].Value = "127.0.0.1:" + strconv.Itoa(int(Port(m)))
		env = append(env, corev1.EnvVar{Name: specs.Env(FlagReusePort), Value: "true"})
	}
	sp := specs.Pod{Role: RoleMailbox, Image: pl.Image, Binary: Binary, Labels: podLabels(m),
		CPU: "50m", Memory: "64Mi", Resources: m.Spec.Resources, Env: env,
		Ports: []corev1.ContainerPort{{Name: "api", ContainerPort: Port(m)}},
	}
	if ref := m.Spec.Redis.PasswordSecret; ref != nil {
		ref = ref.DeepCopy()
		if ref.Key == "" {
			ref.Key = RedisPasswordKey
		}
		sp.Files = []specs.File{{Volume: "redis", Env: specs.Env(FlagRedisPasswordFile), Dir: SecretsDir + "/redis", Name: RedisPasswordKey, Ref: ref}}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: Name(m), Namespace: m.Namespace, Labels: sp.Labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(Replicas(m)),
			Selector: &metav1.LabelSelector{MatchLabels: PodSelector(m)},
			Template: sp.Template(pl.Runtime),
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1))}},
		},
	}
}

// Service is the mailbox API's Service (the edge's upstream) with the metrics port a
// Prometheus scrapes.
func Service(m *sddrv1.EncounterMailbox) *corev1.Service {
	l := podLabels(m)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: Name(m), Namespace: m.Namespace, Labels: l},
		Spec: corev1.ServiceSpec{
			Selector: PodSelector(m),
			Ports: []corev1.ServicePort{
				{Name: "api", Port: Port(m), TargetPort: intstr.FromString("api"), AppProtocol: ptr.To("kubernetes.io/h2c")},
				{Name: "metrics", Port: specs.MetricsPort, TargetPort: intstr.FromString("metrics")},
			},
		},
	}
}

// Summary describes the mailbox as the Ready condition does.
func Summary(m *sddrv1.EncounterMailbox) string {
	s := SettingsOf(m)
	return strings.Join([]string{
		fmt.Sprintf("%d replicas on port %d", Replicas(m), Port(m)),
		"redis " + m.Spec.Redis.Address,
		"ttl " + s.TTL.String(),
		fmt.Sprintf("at most %d messages of %d bytes per mailbox", s.MaxMessages, s.MaxMessageBytes),
		fmt.Sprintf("%d req/s (burst %d) per client", s.Rate, s.Burst),
	}, "; ")
}
