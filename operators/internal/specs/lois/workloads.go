// Package lois builds the Kubernetes objects of a HeaderGateway (docs/lois.md "HeaderGateway"):
// the cloud interfaces as a StatefulSet following the registrar's session stream, their
// Service, the flow key every replica shares, and the registrar's settings that devices and
// server interfaces register and run with.
package lois

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	apicommon "github.com/obscura-iot/obscura/operators/api/common"
	loisv1 "github.com/obscura-iot/obscura/operators/api/lois/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
)

// How the operator runs `lois ci` (services/cmd/lois): flags through OBSCURA_<FLAG>
// (specs.Env); --metrics-addr and --health-addr come from the shared pod builder.
const (
	// Binary is the image's entrypoint (hack/images), used by exec probes.
	Binary = "/usr/local/bin/lois"

	RoleCloud = "ci"
	// RoleRegistrar is the registrar daemon (`lois registrar`): HELLO, EPOCH_REQ and the SIs'
	// low-water events over NATS.
	RoleRegistrar = "registrar"

	FlagCIP          = "cip"
	FlagUnifiedPort  = "unified-port"
	FlagMTU          = "mtu"
	FlagPaperMode    = "paper-mode"
	FlagSafetyMargin = "safety-margin"
	FlagGrace        = "grace"
	FlagWireListen   = "wire-listen"
	FlagBackends     = "backends"
	FlagFlowKeyFile  = "flow-key-file"
	FlagCloud        = "cloud"
	FlagReplicaName  = "replica-name"
	FlagOrdinalPorts = "ordinal-ports"
	FlagNATSURL      = "nats-url"
	// The registrar's (`lois register`) and the devices' (`lois di`) settings.
	FlagServices   = "services"
	FlagN          = "n"
	FlagLifetime   = "lifetime"
	FlagPartitions = "partitions"
	FlagWaitFor    = "wait-for"
	FlagCloudWire  = "cloud-wire"
	FlagSTP        = "stp"
	FlagSTPPeriod  = "stp-period"
	FlagSTPQ       = "stp-q"
	FlagSTPRate    = "stp-rate"
	FlagSTPTick    = "stp-tick"
	// The registrar daemon's seed store.
	FlagSeedStore         = "seed-store"
	FlagVaultAddr         = "vault-addr"
	FlagVaultRole         = "vault-role"
	FlagVaultTransitMount = "vault-transit-mount"
	FlagVaultTransitKey   = "vault-transit-key"
	// FlagRecordKeyFile is the session record key (services/pkg/lois/roles RecordSeal): the
	// registrar seals every record of the session stream under it, the replicas open them.
	FlagRecordKeyFile = "record-key-file"

	// FlowKeyFile is the flow key's entry in its Secret (32 hex digits).
	FlowKeyFile = "flow.key"
	// RecordKeyFile is the session record key's entry in its Secret (64 hex digits).
	RecordKeyFile = "record.key"
	SecretsDir    = "/var/run/secrets/lois"

	// MetricsHostPortOffset: on the host network replica i serves /metrics on 127.0.0.1 at
	// spec.cloud.wirePort + MetricsHostPortOffset + i, where the operator reads its figures.
	MetricsHostPortOffset = 1000

	// LabelGateway ties an object to its HeaderGateway.
	LabelGateway = "lois.obscura.dev/gateway"
)

// Metric names of the LOIS roles the operator reads (services/pkg/lois/contract; the
// operators may not import it, it links the protocol core).
const (
	MetricPackets  = "lois_packets_total"
	MetricDVT      = "lois_dvt_entries"
	MetricSessions = "lois_sessions_installed"
)

// Platform is what the operator knows about where the LOIS services run.
type Platform struct {
	// Image runs `lois ci`.
	Image string
	specs.Runtime
}

// Validate reports what is missing for workloads to be built.
func (p Platform) Validate() error {
	if p.Image == "" || p.NATSURL == "" {
		return errors.New("the operator needs --lois-image and --nats-url to run LOIS workloads")
	}
	return nil
}

func labels(g *loisv1.HeaderGateway, component string) map[string]string {
	l := specs.Labels("lois", g.Name, component)
	l[LabelGateway] = g.Name
	return l
}

// PodSelector selects the pods of one role of g.
func PodSelector(g *loisv1.HeaderGateway, role string) map[string]string {
	return specs.Selector(labels(g, role))
}

// Name is the name of a gateway's object, e.g. edge-lois-ci.
func Name(g *loisv1.HeaderGateway, part string) string { return g.Name + "-lois-" + part }

// Cloud is the cloud's name in the session subjects.
func Cloud(g *loisv1.HeaderGateway) string {
	if c := g.Spec.Registrar.Cloud; c != "" {
		return c
	}
	return g.Name
}

// CloudReplicas is the number of cloud interface replicas.
func CloudReplicas(g *loisv1.HeaderGateway) int32 { return max(g.Spec.Cloud.Replicas, 1) }

// ServerReplicas is the number of server interface replicas per service.
func ServerReplicas(g *loisv1.HeaderGateway) int32 { return max(g.Spec.Server.Replicas, 1) }

// WirePort is replica 0's wire port.
func WirePort(g *loisv1.HeaderGateway) int {
	if p := g.Spec.Cloud.WirePort; p > 0 {
		return int(p)
	}
	return 7400
}

// CloudReplicaNames are the cloud interfaces' names in install acks: their pod names.
func CloudReplicaNames(g *loisv1.HeaderGateway) []string {
	var out []string
	for i := range CloudReplicas(g) {
		out = append(out, fmt.Sprintf("%s-%d", Name(g, RoleCloud), i))
	}
	return out
}

// ServerReplicaNames are the server interfaces' names in install acks: si-<port>-<i>.
func ServerReplicaNames(g *loisv1.HeaderGateway) []string {
	var out []string
	for _, s := range sortedServices(g) {
		for i := range ServerReplicas(g) {
			out = append(out, fmt.Sprintf("si-%d-%d", s.Port, i))
		}
	}
	return out
}

func sortedServices(g *loisv1.HeaderGateway) []loisv1.Service {
	s := slices.Clone(g.Spec.Services)
	slices.SortFunc(s, func(a, b loisv1.Service) int { return int(a.Port) - int(b.Port) })
	return s
}

// Validate checks what CEL cannot (or what an older API server let through): addresses
// that parse, unique ports, the timing the interfaces accept.
func Validate(g *loisv1.HeaderGateway) error {
	sp := g.Spec
	if a, err := netip.ParseAddr(orDefault(sp.CloudAddress, "198.18.0.1")); err != nil || !a.Is4() {
		return fmt.Errorf("cloudAddress %q is not an IPv4 address", sp.CloudAddress)
	}
	if len(sp.Services) == 0 {
		return errors.New("no services")
	}
	seen := map[int32]string{}
	backends := map[string]string{}
	for _, s := range sp.Services {
		if prev, dup := seen[s.Port]; dup {
			return fmt.Errorf("services %s and %s share port %d", prev, s.Name, s.Port)
		}
		seen[s.Port] = s.Name
		if s.Port == UnifiedPort(g) {
			return fmt.Errorf("service %s: port %d is the unified port", s.Name, s.Port)
		}
		a, err := netip.ParseAddr(s.Backend.Address)
		if err != nil || !a.Is4() {
			return fmt.Errorf("service %s: backend.address %q is not an IPv4 address", s.Name, s.Backend.Address)
		}
		if _, err := netip.ParseAddrPort(s.ServerWire); err != nil {
			return fmt.Errorf("service %s: serverWire %q: %v", s.Name, s.ServerWire, err)
		}
		// The cloud interface sends every packet for one server address to one wire address.
		if w, ok := backends[s.Backend.Address]; ok && w != s.ServerWire {
			return fmt.Errorf("service %s: server %s already has server interface %s", s.Name, s.Backend.Address, w)
		}
		backends[s.Backend.Address] = s.ServerWire
	}
	if err := validateServers(g); err != nil {
		return err
	}
	k := keystreams(g)
	if k.Lifetime.Duration <= k.SafetyMargin.Duration+k.Grace.Duration {
		return fmt.Errorf("keystreams.lifetime %s must exceed safetyMargin %s + grace %s", k.Lifetime.Duration, k.SafetyMargin.Duration, k.Grace.Duration)
	}
	if WirePort(g)+int(CloudReplicas(g))+MetricsHostPortOffset > 65535 {
		return fmt.Errorf("cloud.wirePort %d leaves no room for %d replicas", WirePort(g), CloudReplicas(g))
	}
	return nil
}

// validateServers checks the server interfaces' settings: with placement netns every
// service names its namespace and has a wire address of its own (each SI binds it on the
// node's network), one SI per service, device networks that parse; without, none of these.
func validateServers(g *loisv1.HeaderGateway) error {
	sv := g.Spec.Server
	switch sv.Placement {
	case "", loisv1.ServerPlacementExternal:
		if len(sv.DeviceNetworks) > 0 || sv.Resources != nil || len(sv.NodeSelector) > 0 || len(sv.Tolerations) > 0 {
			return errors.New("server.deviceNetworks, server.resources, server.nodeSelector and server.tolerations apply only with server.placement netns")
		}
		for _, s := range g.Spec.Services {
			if s.NetworkNamespace != "" {
				return fmt.Errorf("service %s: networkNamespace applies only with server.placement netns", s.Name)
			}
		}
		return nil
	case loisv1.ServerPlacementNetns:
	default:
		return fmt.Errorf("server.placement %q: want external or netns", sv.Placement)
	}
	if len(sv.DeviceNetworks) == 0 {
		return errors.New("server.placement netns needs server.deviceNetworks")
	}
	for _, n := range sv.DeviceNetworks {
		if p, err := netip.ParsePrefix(n); err != nil || !p.Addr().Is4() {
			return fmt.Errorf("server.deviceNetworks %q is not an IPv4 prefix", n)
		}
	}
	// Each service's SIs bind serverWire (shared by its replicas) and one metrics port each
	// (ServerMetricsEndpoint) on the node: no two of these may be one port of one address.
	ports := map[netip.AddrPort]string{}
	replicas := int(ServerReplicas(g))
	for _, s := range g.Spec.Services {
		if s.NetworkNamespace == "" || strings.ContainsAny(s.NetworkNamespace, "/") || s.NetworkNamespace == "." || s.NetworkNamespace == ".." {
			return fmt.Errorf("service %s: server.placement netns needs networkNamespace, a name in %s", s.Name, NetnsDir)
		}
		wire := netip.MustParseAddrPort(s.ServerWire) // Validate parsed it
		if int(wire.Port())+ServerMetricsPortOffset+replicas-1 > 65535 {
			return fmt.Errorf("service %s: serverWire %s leaves no port for the server interfaces' metrics (port + %d + replica)", s.Name, s.ServerWire, ServerMetricsPortOffset)
		}
		type port struct {
			ap   netip.AddrPort
			what string
		}
		binds := []port{{wire, "serverWire"}}
		for i := range replicas {
			binds = append(binds, port{netip.MustParseAddrPort(ServerMetricsEndpoint(s, i)), fmt.Sprintf("replica %d's metrics", i)})
		}
		for _, p := range binds {
			if prev, dup := ports[p.ap]; dup {
				return fmt.Errorf("service %s: its server interface's %s %s is taken by %s: each server interface binds serverWire and serverWire's port + %d on the node",
					s.Name, p.what, p.ap, prev, ServerMetricsPortOffset)
			}
			ports[p.ap] = fmt.Sprintf("service %s's %s", s.Name, p.what)
			// A loopback serverWire is reachable only from cloud interfaces on the node's
			// network, which bind 127.0.0.1 at wirePort + i and wirePort + 1000 + i.
			if ci := WirePort(g); p.ap.Addr().IsLoopback() && (inRange(int(p.ap.Port()), ci, int(CloudReplicas(g))) ||
				inRange(int(p.ap.Port()), ci+MetricsHostPortOffset, int(CloudReplicas(g)))) {
				return fmt.Errorf("service %s: its server interface's %s %s is a port of the cloud interfaces on the node (cloud.wirePort %d and + %d, one per replica)",
					s.Name, p.what, p.ap, ci, MetricsHostPortOffset)
			}
		}
	}
	return nil
}

// inRange says whether p is in [from, from+n).
func inRange(p, from, n int) bool { return p >= from && p < from+n }

// UnifiedPort is U.
func UnifiedPort(g *loisv1.HeaderGateway) int32 {
	if g.Spec.UnifiedPort > 0 {
		return g.Spec.UnifiedPort
	}
	return 443
}

// keystreams is spec.keystreams with the API's defaults filled in.
func keystreams(g *loisv1.HeaderGateway) loisv1.Keystreams {
	k := g.Spec.Keystreams
	if k.PerEpoch == 0 {
		k.PerEpoch = 1024
	}
	if k.Lifetime.Duration == 0 {
		k.Lifetime.Duration = time.Hour
	}
	if k.SafetyMargin.Duration == 0 {
		k.SafetyMargin.Duration = time.Minute
	}
	if k.Grace.Duration == 0 {
		k.Grace.Duration = 2 * time.Minute
	}
	return k
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// common are the settings every role of the cloud must agree on.
func common(g *loisv1.HeaderGateway) []corev1.EnvVar {
	k := keystreams(g)
	env := []corev1.EnvVar{
		{Name: specs.Env(FlagCIP), Value: orDefault(g.Spec.CloudAddress, "198.18.0.1")},
		{Name: specs.Env(FlagUnifiedPort), Value: strconv.Itoa(int(UnifiedPort(g)))},
		{Name: specs.Env(FlagMTU), Value: strconv.Itoa(int(g.Spec.MTU))},
		{Name: specs.Env(FlagSafetyMargin), Value: k.SafetyMargin.Duration.String()},
		{Name: specs.Env(FlagGrace), Value: k.Grace.Duration.String()},
		{Name: specs.Env(FlagCloud), Value: Cloud(g)},
	}
	if g.Spec.MTU == 0 {
		env[2].Value = "1400"
	}
	if g.Spec.Mode == loisv1.ModePaper {
		env = append(env, corev1.EnvVar{Name: specs.Env(FlagPaperMode), Value: "true"})
	}
	return env
}

// Backends is the cloud interface's --backends: sid=SIP:P_srv@SI-wire per service.
func Backends(g *loisv1.HeaderGateway) string {
	var parts []string
	for _, s := range sortedServices(g) {
		parts = append(parts, fmt.Sprintf("%d=%s:%d@%s", s.Port, s.Backend.Address, s.Backend.Port, s.ServerWire))
	}
	return strings.Join(parts, ",")
}

// FlowKeySecret is the backend-hash key every cloud interface replica shares (D-16), so
// every replica routes a flow to the same server. Generated once; never rotated under
// running replicas.
func FlowKeySecret(g *loisv1.HeaderGateway) *corev1.Secret {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: Name(g, "flow-key"), Namespace: g.Namespace, Labels: labels(g, "flow-key")},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{FlowKeyFile: []byte(hex.EncodeToString(b))},
	}
}

// RecordKeySecret is the key the registrar seals the session records under and the cloud
// and server interfaces open them with (32 random bytes, hex): the records carry stream
// keys, and whoever else reads the stream learns none. Generated once; a server interface
// (not run by the operator) is given the same Secret.
func RecordKeySecret(g *loisv1.HeaderGateway) *corev1.Secret {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: Name(g, "record-key"), Namespace: g.Namespace, Labels: labels(g, "record-key")},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{RecordKeyFile: []byte(hex.EncodeToString(b))},
	}
}

// recordKeyFile mounts the record key for a role.
func recordKeyFile(g *loisv1.HeaderGateway) specs.File {
	return specs.File{Volume: "record-key", Env: specs.Env(FlagRecordKeyFile), Dir: SecretsDir + "/record", Name: RecordKeyFile,
		Ref: ref(Name(g, "record-key"), RecordKeyFile)}
}

// NATSSecretName is the Secret the cloud interfaces and the registrar connect to NATS with:
// spec.registrar.natsSecret, or on the operator's NATS (no registrar.natsURL) the one the
// operator generates (GeneratedNATSSecret); "" connects without credentials.
func NATSSecretName(g *loisv1.HeaderGateway) string {
	switch {
	case g.Spec.Registrar.NATSSecret != "":
		return g.Spec.Registrar.NATSSecret
	case g.Spec.Registrar.NATSURL == "":
		return Name(g, "nats")
	}
	return ""
}

// GeneratesNATSSecret says whether the operator makes the gateway's NATS credentials: on
// the operator's NATS, whose accounts admit only users the operator rendered, when the spec
// names none.
func GeneratesNATSSecret(g *loisv1.HeaderGateway) bool {
	return g.Spec.Registrar.NATSSecret == "" && g.Spec.Registrar.NATSURL == ""
}

// Account is the gateway's own NATS account on the operator's NATS.
func Account(g *loisv1.HeaderGateway) string {
	return specs.LOISAccountPrefix + g.Namespace + "_" + g.Name
}

// NATSUser is the user the gateway's cloud interfaces and registrar share (user names are
// global on the server).
func NATSUser(g *loisv1.HeaderGateway) string { return "lois." + g.Namespace + "." + g.Name }

// GeneratedNATSSecret is the gateway's NATS credentials in its own account (JetStream: the
// session stream, the registrar's store, the control subjects).
func GeneratedNATSSecret(g *loisv1.HeaderGateway, password []byte) *corev1.Secret {
	return specs.NATSSecret(g.Namespace, Name(g, "nats"), Account(g), NATSUser(g), password, labels(g, "nats"))
}

// NATSURL is the session stream's NATS server: the gateway's own or the operator's.
func NATSURL(g *loisv1.HeaderGateway, pl Platform) string {
	if u := g.Spec.Registrar.NATSURL; u != "" {
		return u
	}
	return pl.NATSURL
}

// RegistrarConfigMap holds the registrar's settings as the variables `lois register`, `lois
// di` and `lois si` read (envFrom): the session stream's cloud name and NATS URL, the
// services, the keystream budget and lifetime, the SI partition count, every replica a
// session must be installed at before the device gets its keys, the cloud's parameters and
// the padding policy.
func RegistrarConfigMap(g *loisv1.HeaderGateway, pl Platform) *corev1.ConfigMap {
	k := keystreams(g)
	var sids []string
	for _, s := range sortedServices(g) {
		sids = append(sids, strconv.Itoa(int(s.Port)))
	}
	data := map[string]string{
		specs.Env(FlagNATSURL):    NATSURL(g, pl),
		specs.Env(FlagServices):   strings.Join(sids, ","),
		specs.Env(FlagN):          strconv.Itoa(int(k.PerEpoch)),
		specs.Env(FlagLifetime):   k.Lifetime.Duration.String(),
		specs.Env(FlagPartitions): strconv.Itoa(int(ServerReplicas(g))),
		specs.Env(FlagWaitFor):    strings.Join(append(CloudReplicaNames(g), ServerReplicaNames(g)...), ","),
		specs.Env(FlagCloudWire):  cloudWire(g, pl),
	}
	for _, e := range common(g) {
		data[e.Name] = e.Value
	}
	for _, e := range padding(g) {
		data[e.Name] = e.Value
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: Name(g, "registrar"), Namespace: g.Namespace, Labels: labels(g, "registrar")},
		Data:       data,
	}
}

// cloudWire is where devices send: replica 0's wire address (127.0.0.1 on the host
// network, the cloud interfaces' Service otherwise).
func cloudWire(g *loisv1.HeaderGateway, pl Platform) string {
	if pl.HostNetwork {
		return "127.0.0.1:" + strconv.Itoa(WirePort(g))
	}
	return Name(g, RoleCloud) + "." + g.Namespace + ".svc:" + strconv.Itoa(WirePort(g))
}

// padding is the senders' STP settings (the DIs' uploads, the SIs' downloads).
func padding(g *loisv1.HeaderGateway) []corev1.EnvVar {
	p := g.Spec.Padding
	if p.Policy != loisv1.PaddingSTP {
		return []corev1.EnvVar{{Name: specs.Env(FlagSTP), Value: "false"}}
	}
	env := []corev1.EnvVar{{Name: specs.Env(FlagSTP), Value: "true"}}
	if p.Period != nil {
		env = append(env, corev1.EnvVar{Name: specs.Env(FlagSTPPeriod), Value: p.Period.Duration.String()})
	}
	if p.ProbabilityPercent != nil {
		env = append(env, corev1.EnvVar{Name: specs.Env(FlagSTPQ), Value: strconv.FormatFloat(float64(*p.ProbabilityPercent)/100, 'f', -1, 64)})
	}
	if p.RateBytesPerSecond != nil {
		env = append(env, corev1.EnvVar{Name: specs.Env(FlagSTPRate), Value: strconv.Itoa(int(*p.RateBytesPerSecond))})
	}
	if p.Tick != nil {
		env = append(env, corev1.EnvVar{Name: specs.Env(FlagSTPTick), Value: p.Tick.Duration.String()})
	}
	return env
}

// CloudInterface runs the cloud interfaces: a StatefulSet whose pod names are the replica
// names the registrar waits for, each following the session stream into its table, all
// sharing the flow key. On the host network replica i listens on wirePort + i and serves
// its metrics on 127.0.0.1:wirePort + MetricsHostPortOffset + i.
func CloudInterface(g *loisv1.HeaderGateway, pl Platform) *appsv1.StatefulSet {
	env := append(common(g),
		corev1.EnvVar{Name: specs.Env(FlagNATSURL), Value: NATSURL(g, pl)},
		corev1.EnvVar{Name: specs.Env(FlagBackends), Value: Backends(g)},
		corev1.EnvVar{Name: specs.Env(FlagReplicaName), Value: "$(" + specs.EnvPodName + ")"},
		corev1.EnvVar{Name: specs.Env(FlagWireListen), Value: "0.0.0.0:" + strconv.Itoa(WirePort(g))},
	)
	sp := specs.Pod{Role: RoleCloud, Image: pl.Image, Binary: Binary, Labels: labels(g, RoleCloud),
		CPU: "250m", Memory: "256Mi", Resources: g.Spec.Cloud.Resources,
		Files: []specs.File{{Volume: "flow-key", Env: specs.Env(FlagFlowKeyFile), Dir: SecretsDir + "/flow", Name: FlowKeyFile,
			Ref: ref(Name(g, "flow-key"), FlowKeyFile)}, recordKeyFile(g)},
		Env:   env,
		Ports: []corev1.ContainerPort{{Name: "wire", ContainerPort: int32(WirePort(g)), Protocol: corev1.ProtocolUDP}},
	}
	sp.NATSSecret = NATSSecretName(g)
	rt := pl.Runtime
	rt.NATSURL = NATSURL(g, pl)
	t := sp.Template(rt)
	c := &t.Spec.Containers[0]
	if pl.HostNetwork {
		setEnv(c, specs.EnvMetricsAddr, "127.0.0.1:"+strconv.Itoa(WirePort(g)+MetricsHostPortOffset))
		setEnv(c, specs.Env(FlagWireListen), "127.0.0.1:"+strconv.Itoa(WirePort(g)))
		c.Env = append(c.Env, corev1.EnvVar{Name: specs.Env(FlagOrdinalPorts), Value: "true"})
	}
	// The pod builder sets the NATS URL only with credentials; the role needs it either way.
	dedupEnv(c)
	pin(&t.Spec, g.Spec.Cloud.NodeSelector, g.Spec.Cloud.Tolerations)
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: Name(g, RoleCloud), Namespace: g.Namespace, Labels: sp.Labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(CloudReplicas(g)),
			ServiceName:         Name(g, RoleCloud),
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: specs.Selector(sp.Labels)},
			Template:            t,
		},
	}
}

// pin adds the spec's node selector and tolerations to a pod template (the shared builder
// sets neither).
func pin(pod *corev1.PodSpec, sel map[string]loisv1.LabelValue, tol []corev1.Toleration) {
	if len(sel) > 0 {
		if pod.NodeSelector == nil {
			pod.NodeSelector = map[string]string{}
		}
		for k, v := range sel {
			pod.NodeSelector[k] = string(v)
		}
	}
	pod.Tolerations = append(pod.Tolerations, tol...)
}

func ref(name, key string) *apicommon.SecretFileReference {
	return &apicommon.SecretFileReference{Name: name, Key: key}
}

// setEnv sets the variable name of c, which the builder has already set.
func setEnv(c *corev1.Container, name, value string) {
	for i := range c.Env {
		if c.Env[i].Name == name {
			c.Env[i].Value = value
		}
	}
}

// dedupEnv keeps the first of repeated variables (the shared builder's NATS URL and ours).
func dedupEnv(c *corev1.Container) {
	seen := map[string]bool{}
	out := c.Env[:0]
	for _, e := range c.Env {
		if seen[e.Name] {
			continue
		}
		seen[e.Name] = true
		out = append(out, e)
	}
	c.Env = out
}

// CloudService is the cloud interfaces' headless Service: the StatefulSet's pod names and
// the wire and metrics ports (a Prometheus scrapes them).
func CloudService(g *loisv1.HeaderGateway) *corev1.Service {
	l := labels(g, RoleCloud)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: Name(g, RoleCloud), Namespace: g.Namespace, Labels: l},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  specs.Selector(l),
			Ports: []corev1.ServicePort{
				{Name: "wire", Port: int32(WirePort(g)), Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("wire")},
				{Name: "metrics", Port: specs.MetricsPort, TargetPort: intstr.FromString("metrics")},
			},
		},
	}
}

// MetricsEndpoint is where replica ordinal of the cloud interfaces serves /metrics, given
// its pod IP.
func MetricsEndpoint(g *loisv1.HeaderGateway, pl Platform, podIP string, ordinal int) string {
	if pl.HostNetwork {
		return "127.0.0.1:" + strconv.Itoa(WirePort(g)+MetricsHostPortOffset+ordinal)
	}
	return podIP + ":" + strconv.Itoa(specs.MetricsPort)
}

// RegistrarServiceAccount runs the registrar; with registrar.vault it is the account the
// Vault Kubernetes auth role binds (the only pod of the gateway that gets its token).
func RegistrarServiceAccount(g *loisv1.HeaderGateway) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		ObjectMeta:                   metav1.ObjectMeta{Name: Name(g, RoleRegistrar), Namespace: g.Namespace, Labels: labels(g, RoleRegistrar)},
		AutomountServiceAccountToken: ptr.To(false),
	}
}

// Registrar runs the registrar daemon: one replica (the single writer of the cloud's
// deduplicating table; Recreate, so two never run at once), answering HELLO and EPOCH_REQ
// over NATS and granting every session and epoch only once every cloud and server interface
// acknowledged installing it. With registrar.vault its sessions are stored with their seeds
// wrapped by Vault Transit (a restart carries on); without, seeds stay in memory.
func Registrar(g *loisv1.HeaderGateway, pl Platform) *appsv1.Deployment {
	k := keystreams(g)
	var sids []string
	for _, s := range sortedServices(g) {
		sids = append(sids, strconv.Itoa(int(s.Port)))
	}
	env := []corev1.EnvVar{
		{Name: specs.Env(FlagNATSURL), Value: NATSURL(g, pl)},
		{Name: specs.Env(FlagCloud), Value: Cloud(g)},
		{Name: specs.Env(FlagServices), Value: strings.Join(sids, ",")},
		{Name: specs.Env(FlagN), Value: strconv.Itoa(int(k.PerEpoch))},
		{Name: specs.Env(FlagLifetime), Value: k.Lifetime.Duration.String()},
		{Name: specs.Env(FlagPartitions), Value: strconv.Itoa(int(ServerReplicas(g)))},
		{Name: specs.Env(FlagWaitFor), Value: strings.Join(append(CloudReplicaNames(g), ServerReplicaNames(g)...), ",")},
	}
	sp := specs.Pod{Role: RoleRegistrar, Image: pl.Image, Binary: Binary, Labels: labels(g, RoleRegistrar),
		ServiceAccount: Name(g, RoleRegistrar), CPU: "100m", Memory: "128Mi", NATSSecret: NATSSecretName(g),
		Files: []specs.File{recordKeyFile(g)}}
	if v := g.Spec.Registrar.Vault; v != nil {
		addr := v.Address
		if addr == "" {
			addr = pl.VaultAddress
		}
		sp.ServiceAccountToken = true
		env = append(env,
			corev1.EnvVar{Name: specs.Env(FlagSeedStore), Value: "vault"},
			corev1.EnvVar{Name: specs.Env(FlagVaultAddr), Value: addr},
			corev1.EnvVar{Name: specs.Env(FlagVaultRole), Value: v.Role},
			corev1.EnvVar{Name: specs.Env(FlagVaultTransitMount), Value: orDefault(v.Mount, "transit")},
			corev1.EnvVar{Name: specs.Env(FlagVaultTransitKey), Value: v.SeedKey},
		)
	} else {
		env = append(env, corev1.EnvVar{Name: specs.Env(FlagSeedStore), Value: "memory"})
	}
	sp.Env = env
	rt := pl.Runtime
	rt.NATSURL = NATSURL(g, pl)
	t := sp.Template(rt)
	dedupEnv(&t.Spec.Containers[0])
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: Name(g, RoleRegistrar), Namespace: g.Namespace, Labels: sp.Labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: specs.Selector(sp.Labels)},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: t,
		},
	}
}

// RoleServer is the server interface (`lois si`) the operator runs with server.placement
// netns.
const RoleServer = "si"

// Flags of `lois si` the operator sets for its server interfaces.
const (
	FlagTUN       = "tun"
	FlagNetns     = "netns"
	FlagTUNAddr   = "tun-addr"
	FlagTUNRoutes = "tun-routes"
	FlagReplica   = "replica"
	// With server.replicas above 1 (placement netns).
	FlagTUNMultiQueue = "tun-multi-queue"
	FlagWireReusePort = "wire-reuse-port"
	// EnvPodIndex is the server interface pod's StatefulSet index (its pod index label).
	EnvPodIndex = "POD_INDEX"
	// NetnsDir is where `ip netns add` keeps the named network namespaces (a host path).
	NetnsDir = "/run/netns"
	// TUNDevice is the TUN clone device (a host path).
	TUNDevice = "/dev/net/tun"
)

// RunsServerInterfaces says whether the operator runs g's server interfaces.
func RunsServerInterfaces(g *loisv1.HeaderGateway) bool {
	return g.Spec.Server.Placement == loisv1.ServerPlacementNetns
}

// ServerName is the StatefulSet of the server interface in front of service port, e.g.
// edge-lois-si-8080.
func ServerName(g *loisv1.HeaderGateway, port int32) string {
	return Name(g, RoleServer) + "-" + strconv.Itoa(int(port))
}

// ServerTUN is the SI's TUN device name for service port (at most 15 bytes).
func ServerTUN(port int32) string { return "lois-si-" + strconv.Itoa(int(port)) }

// ServerInterfaces runs, with server.placement netns, the server interfaces of each service:
// a StatefulSet of server.replicas pods on the node's network (`lois si`, its wire socket on
// serverWire), whose TUN the SI makes inside the service's network namespace on the node,
// gives the backend's address and routes server.deviceNetworks into. Replica i's name in
// install acks is si-<port>-<i> and its download partition i, the names the registrar waits
// for; several replicas share one multi-queue TUN (one address, one set of routes, the
// replies spread by flow) and serverWire (SO_REUSEPORT). The pod is privileged-level: root with NET_ADMIN (the TUN and its routes) and SYS_ADMIN (setns),
// the host paths /dev/net/tun and /run/netns, the host network. nil without netns.
func ServerInterfaces(g *loisv1.HeaderGateway, pl Platform) []*appsv1.StatefulSet {
	if !RunsServerInterfaces(g) {
		return nil
	}
	var out []*appsv1.StatefulSet
	R := ServerReplicas(g)
	for _, s := range sortedServices(g) {
		l := labels(g, RoleServer)
		l[LabelService] = strconv.Itoa(int(s.Port))
		env := append(common(g), padding(g)...)
		// One replica is si-<port>-0; several take their index from the StatefulSet's pod
		// index label, share one multi-queue TUN and serverWire, and each serves its metrics
		// at its own port (--ordinal-ports moves only the metrics port with a shared wire).
		name, index := fmt.Sprintf("si-%d-0", s.Port), "0"
		if R > 1 {
			env = append(env, corev1.EnvVar{Name: EnvPodIndex, ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['" + appsv1.PodIndexLabel + "']"}}})
			name, index = fmt.Sprintf("si-%d-$(%s)", s.Port, EnvPodIndex), "$("+EnvPodIndex+")"
		}
		env = append(env,
			corev1.EnvVar{Name: specs.Env(FlagNATSURL), Value: NATSURL(g, pl)},
			corev1.EnvVar{Name: specs.Env(FlagServices), Value: fmt.Sprintf("%d=%d", s.Backend.Port, s.Port)},
			corev1.EnvVar{Name: specs.Env(FlagReplicaName), Value: name},
			corev1.EnvVar{Name: specs.Env(FlagReplica), Value: index},
			corev1.EnvVar{Name: specs.Env(FlagWireListen), Value: s.ServerWire},
			corev1.EnvVar{Name: specs.Env(FlagTUN), Value: ServerTUN(s.Port)},
			corev1.EnvVar{Name: specs.Env(FlagNetns), Value: NetnsDir + "/" + s.NetworkNamespace},
			corev1.EnvVar{Name: specs.Env(FlagTUNAddr), Value: s.Backend.Address},
			corev1.EnvVar{Name: specs.Env(FlagTUNRoutes), Value: strings.Join(g.Spec.Server.DeviceNetworks, ",")},
		)
		if R > 1 {
			env = append(env,
				corev1.EnvVar{Name: specs.Env(FlagTUNMultiQueue), Value: "true"},
				corev1.EnvVar{Name: specs.Env(FlagWireReusePort), Value: "true"},
				corev1.EnvVar{Name: specs.Env(FlagOrdinalPorts), Value: "true"})
		}
		sp := specs.Pod{Role: RoleServer, Image: pl.Image, Binary: Binary, Labels: l,
			CPU: "100m", Memory: "128Mi", Resources: g.Spec.Server.Resources,
			Files: []specs.File{recordKeyFile(g)}, NATSSecret: NATSSecretName(g), Env: env}
		rt := pl.Runtime
		rt.NATSURL = NATSURL(g, pl)
		// The SI's wire socket is on serverWire, an address of the node: the pod is on the
		// node's network whatever the runtime (dynamic metrics and health ports, exec probes).
		rt.HostNetwork = true
		t := sp.Template(rt)
		c := &t.Spec.Containers[0]
		// A fixed metrics address beside the wire, where the operator reads the SI's figures
		// (ServerMetricsEndpoint); health stays on a dynamic port (exec probes).
		setEnv(c, specs.EnvMetricsAddr, ServerMetricsEndpoint(s, 0))
		dedupEnv(c)
		pin(&t.Spec, g.Spec.Server.NodeSelector, g.Spec.Server.Tolerations)
		// The pod security exception (docs/lois.md): root with NET_ADMIN and SYS_ADMIN only.
		c.SecurityContext.RunAsNonRoot = ptr.To(false)
		c.SecurityContext.RunAsUser = ptr.To[int64](0)
		c.SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN", "SYS_ADMIN"}
		t.Spec.SecurityContext.RunAsNonRoot = ptr.To(false)
		c.VolumeMounts = append(c.VolumeMounts,
			corev1.VolumeMount{Name: "tun", MountPath: TUNDevice},
			corev1.VolumeMount{Name: "netns", MountPath: NetnsDir, ReadOnly: true, MountPropagation: ptr.To(corev1.MountPropagationHostToContainer)})
		t.Spec.Volumes = append(t.Spec.Volumes,
			corev1.Volume{Name: "tun", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: TUNDevice, Type: ptr.To(corev1.HostPathCharDev)}}},
			corev1.Volume{Name: "netns", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: NetnsDir, Type: ptr.To(corev1.HostPathDirectory)}}})
		out = append(out, &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: ServerName(g, s.Port), Namespace: g.Namespace, Labels: sp.Labels},
			Spec: appsv1.StatefulSetSpec{
				Replicas:            ptr.To(R),
				ServiceName:         ServerName(g, s.Port),
				PodManagementPolicy: appsv1.ParallelPodManagement,
				Selector:            &metav1.LabelSelector{MatchLabels: ServerSelector(g, s.Port)},
				Template:            t,
			},
		})
	}
	return out
}

// ServerMetricsPortOffset: the server interface the operator runs for a service serves
// /metrics at serverWire's address on serverWire's port + ServerMetricsPortOffset.
const ServerMetricsPortOffset = 1000

// ServerMetricsEndpoint is where replica i of the operator's server interfaces of service s
// serves /metrics: serverWire's address (an address of the node, 127.0.0.1 on the local
// cluster) at serverWire's port + ServerMetricsPortOffset + i. Validate keeps it within the
// port range and off the other services' ports.
func ServerMetricsEndpoint(s loisv1.Service, i int) string {
	ap, err := netip.ParseAddrPort(s.ServerWire)
	if err != nil || int(ap.Port())+ServerMetricsPortOffset+i > 65535 {
		return ""
	}
	return netip.AddrPortFrom(ap.Addr(), ap.Port()+ServerMetricsPortOffset+uint16(i)).String()
}

// ServerSelector selects the server interface pods of service port.
func ServerSelector(g *loisv1.HeaderGateway, port int32) map[string]string {
	sel := PodSelector(g, RoleServer)
	sel[LabelService] = strconv.Itoa(int(port))
	return sel
}

// LabelService ties a server interface's objects to its service's port.
const LabelService = "lois.obscura.dev/service"
