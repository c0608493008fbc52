package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Mode is how the interfaces treat the header fields LOIS does not hide (spec D-10/D-11).
// +kubebuilder:validation:Enum=hardened;paper
type Mode string

const (
	// ModeHardened normalises IP ID, TTL, TCP timestamps and SACK options and uses MASK 0xFF
	// (the default).
	ModeHardened Mode = "hardened"
	// ModePaper is the paper's behaviour: no normalisation, MASK 0x3F (`lois --paper-mode`).
	ModePaper Mode = "paper"
)

// LabelValue is a node label's value in a nodeSelector.
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`
type LabelValue string

// PaddingPolicy says whether the senders pad their traffic (spec §4).
// +kubebuilder:validation:Enum=off;stp
type PaddingPolicy string

const (
	// PaddingOff sends no cover packets.
	PaddingOff PaddingPolicy = "off"
	// PaddingSTP is stochastic traffic padding at the SIs' downloads (`lois si --stp`); the
	// devices pad their uploads with the same parameters (the registrar's settings).
	PaddingSTP PaddingPolicy = "stp"
)

// ServerPlacement is who runs the server interfaces and where (docs/lois.md "Server
// interfaces run by the operator").
// +kubebuilder:validation:Enum=external;netns
type ServerPlacement string

const (
	// ServerPlacementExternal: the server interfaces run beside their servers, started by
	// whoever runs the servers (as si-<port>-<i>); the operator waits for them (the default).
	ServerPlacementExternal ServerPlacement = "external"
	// ServerPlacementNetns: the operator runs each service's server interfaces (server.replicas)
	// as pods on the node's network whose TUN they make inside the service's network namespace on the node
	// (services[].networkNamespace, /run/netns/<name>), addressed with backend.address and
	// routed to server.deviceNetworks. Needs a privileged-level namespace (NET_ADMIN,
	// SYS_ADMIN, /dev/net/tun, host paths, the host network).
	ServerPlacementNetns ServerPlacement = "netns"
)

// HeaderGatewaySpec is one LOIS cloud: devices hide their packets' headers with one-time
// keystreams and send them to CloudAddress:UnifiedPort; the cloud interfaces look the
// keystream up, pick a service's server and forward; the server interfaces recover the
// headers for the servers and hide their replies (shared/specs/lois.md §2, §3.9).
//
// +kubebuilder:validation:XValidation:rule="self.services.all(s, s.port != self.unifiedPort)",message="a service's port (its SID) must differ from the unified port: devices would not tell them apart"
// +kubebuilder:validation:XValidation:rule="duration(self.keystreams.lifetime) > duration(self.keystreams.safetyMargin) + duration(self.keystreams.grace)",message="keystreams.lifetime must exceed safetyMargin + grace (spec §3.12)"
// +kubebuilder:validation:XValidation:rule="!has(self.server.placement) || self.server.placement != 'netns' || self.services.all(s, has(s.networkNamespace))",message="server.placement netns needs every service's networkNamespace"
// +kubebuilder:validation:XValidation:rule="(has(self.server.placement) && self.server.placement == 'netns') || self.services.all(s, !has(s.networkNamespace))",message="services[].networkNamespace applies only with server.placement netns"
type HeaderGatewaySpec struct {
	// CloudAddress is the cloud address CIP every device sends to and every reply comes from
	// (IPv4; `lois --cip`).
	// +optional
	// +kubebuilder:default="198.18.0.1"
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="cloudAddress must be an IPv4 address"
	CloudAddress string `json:"cloudAddress,omitempty"`

	// UnifiedPort is the one destination port every LOIS packet shows (U; `lois --unified-port`).
	// +optional
	// +kubebuilder:default=443
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	UnifiedPort int32 `json:"unifiedPort,omitempty"`

	// Mode is hardened (the default: IP ID, TTL and TCP options normalised) or paper.
	// +optional
	// +kubebuilder:default=hardened
	Mode Mode `json:"mode,omitempty"`

	// MTU of the devices' and servers' TUN path: a hardened SYN's MSS is clamped to MTU − 52.
	// +optional
	// +kubebuilder:default=1400
	// +kubebuilder:validation:Minimum=576
	// +kubebuilder:validation:Maximum=9000
	MTU int32 `json:"mtu,omitempty"`

	// Services are what devices reach behind the unified port, each by its service id (the
	// port the device dials).
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.exists_one(b, b.port == a.port))",message="service ports (SIDs) must be unique"
	Services []Service `json:"services"`

	// Cloud runs the cloud interfaces.
	// +optional
	// +kubebuilder:default={}
	Cloud CloudInterface `json:"cloud,omitempty"`

	// Server is how many server interfaces run in front of each service.
	// +optional
	// +kubebuilder:default={}
	Server ServerInterface `json:"server,omitempty"`

	// Keystreams is the keystream budget and its rotation (spec §3.12).
	// +optional
	// +kubebuilder:default={}
	Keystreams Keystreams `json:"keystreams,omitempty"`

	// Padding is the traffic padding policy (spec §4).
	// +optional
	// +kubebuilder:default={}
	Padding Padding `json:"padding,omitempty"`

	// Registrar is where the device sessions are recorded: the session stream on NATS
	// JetStream every interface follows (install before use, spec §3.2).
	// +optional
	// +kubebuilder:default={}
	Registrar Registrar `json:"registrar,omitempty"`
}

// Service is one service behind the unified port.
type Service struct {
	// Name identifies the service in this resource.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=40
	Name string `json:"name"`

	// Port is the service id (SID): the destination port devices dial at the cloud address.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// Backend is the server's address and port (SIP:P_srv) the cloud interfaces rewrite the
	// destination to.
	Backend Backend `json:"backend"`

	// ServerWire is the UDP address (IPv4:port) of the server interface in front of this
	// service, where the cloud interfaces forward its packets (spec §10's emulated wire).
	// +kubebuilder:validation:MaxLength=21
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]{1,3}(\\\\.[0-9]{1,3}){3}:[0-9]{1,5}$') && isIP(self.split(':')[0])",message="serverWire must be IPv4:port"
	ServerWire string `json:"serverWire"`

	// NetworkNamespace is, with server.placement netns, the network namespace on the node in
	// which this service's server runs (/run/netns/<name>, as `ip netns add` makes it): the
	// operator's server interface makes its TUN there, with backend.address and routes to
	// server.deviceNetworks, and listens on serverWire on the node's network.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.-]*$`
	NetworkNamespace string `json:"networkNamespace,omitempty"`
}

// Backend is one server.
type Backend struct {
	// Address is the server's IPv4 address (SIP).
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="backend.address must be an IPv4 address"
	Address string `json:"address"`

	// Port is the server's port (P_srv).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// CloudInterface is the horizontally scaled cloud edge.
type CloudInterface struct {
	// Replicas of the cloud interface. Every replica installs every session's upload
	// keystreams and shares one flow key, so any replica routes a flow alike (D-16); the
	// registrar waits for each replica's install acknowledgement.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	Replicas int32 `json:"replicas,omitempty"`

	// WirePort is the UDP port of replica 0's wire socket; replica i listens on WirePort + i
	// (on a host network replicas share one port space).
	// +optional
	// +kubebuilder:default=7400
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=65000
	WirePort int32 `json:"wirePort,omitempty"`

	// Resources replace the cloud interface container's defaults.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	// NodeSelector pins the cloud interface pods to the nodes that carry these labels.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() <= 253 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",message="nodeSelector keys must be label keys ([prefix/]name)"
	NodeSelector map[string]LabelValue `json:"nodeSelector,omitempty"`

	// Tolerations let the cloud interface pods run on nodes with these taints.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.operator) || t.operator in ['Exists', 'Equal'])",message="a toleration's operator is Exists or Equal"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.effect) || t.effect in ['', 'NoSchedule', 'PreferNoSchedule', 'NoExecute'])",message="a toleration's effect is NoSchedule, PreferNoSchedule or NoExecute (empty: all)"
	// +kubebuilder:validation:XValidation:rule="self.all(t, (has(t.key) && t.key != '') || (has(t.operator) && t.operator == 'Exists'))",message="a toleration without a key needs operator Exists"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.operator) || t.operator != 'Exists' || !has(t.value) || t.value == '')",message="a toleration with operator Exists has no value"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.tolerationSeconds) || (has(t.effect) && t.effect == 'NoExecute'))",message="tolerationSeconds applies only to effect NoExecute"
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// ServerInterface says how many server interfaces serve each service, and who runs them.
//
// +kubebuilder:validation:XValidation:rule="!has(self.placement) || self.placement != 'netns' || (has(self.deviceNetworks) && size(self.deviceNetworks) > 0)",message="server.placement netns needs server.deviceNetworks (the device addresses the servers' replies are routed to the TUN for)"
// +kubebuilder:validation:XValidation:rule="(has(self.placement) && self.placement == 'netns') || !has(self.deviceNetworks)",message="server.deviceNetworks applies only with server.placement netns"
// +kubebuilder:validation:XValidation:rule="!has(self.resources) || (has(self.placement) && self.placement == 'netns')",message="server.resources applies only to server interfaces the operator runs (server.placement netns)"
// +kubebuilder:validation:XValidation:rule="(!has(self.nodeSelector) && !has(self.tolerations)) || (has(self.placement) && self.placement == 'netns')",message="server.nodeSelector and server.tolerations apply only to server interfaces the operator runs (server.placement netns)"
type ServerInterface struct {
	// Replicas of the server interface per service: the download keystreams of every
	// session are partitioned i mod Replicas (spec §3.11), so no two replicas ever hold the
	// same keystream. The server interfaces are named si-<port>-<i>, i < Replicas; the
	// registrar waits for each. With placement netns the operator runs them as one
	// StatefulSet per service whose replicas share one multi-queue TUN in the service's
	// namespace and one serverWire (SO_REUSEPORT).
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	Replicas int32 `json:"replicas,omitempty"`

	// Placement is external (the default: the server interfaces run beside their servers,
	// not by the operator) or netns (the operator runs each service's server interface, its
	// TUN in services[].networkNamespace).
	// +optional
	// +kubebuilder:default=external
	Placement ServerPlacement `json:"placement,omitempty"`

	// DeviceNetworks are, with placement netns, the IPv4 prefixes of the device addresses
	// (DIP) routed into each server interface's TUN in the server's namespace, so the server's
	// replies reach it.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=18
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4",message="server.deviceNetworks must be IPv4 prefixes"
	DeviceNetworks []string `json:"deviceNetworks,omitempty"`

	// Resources replace the server interface container's defaults (placement netns).
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	// NodeSelector pins the server interface pods (placement netns) to the nodes that carry these labels.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() <= 253 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",message="nodeSelector keys must be label keys ([prefix/]name)"
	NodeSelector map[string]LabelValue `json:"nodeSelector,omitempty"`

	// Tolerations let the server interface pods (placement netns) run on nodes with these taints.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.operator) || t.operator in ['Exists', 'Equal'])",message="a toleration's operator is Exists or Equal"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.effect) || t.effect in ['', 'NoSchedule', 'PreferNoSchedule', 'NoExecute'])",message="a toleration's effect is NoSchedule, PreferNoSchedule or NoExecute (empty: all)"
	// +kubebuilder:validation:XValidation:rule="self.all(t, (has(t.key) && t.key != '') || (has(t.operator) && t.operator == 'Exists'))",message="a toleration without a key needs operator Exists"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.operator) || t.operator != 'Exists' || !has(t.value) || t.value == '')",message="a toleration with operator Exists has no value"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.tolerationSeconds) || (has(t.effect) && t.effect == 'NoExecute'))",message="tolerationSeconds applies only to effect NoExecute"
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// Keystreams is the keystream budget and rotation.
type Keystreams struct {
	// PerEpoch is the number of keystreams per device, service and direction in one epoch
	// (n, spec §3.12).
	// +optional
	// +kubebuilder:default=1024
	// +kubebuilder:validation:Minimum=16
	// +kubebuilder:validation:Maximum=1048576
	PerEpoch int32 `json:"perEpoch,omitempty"`

	// Lifetime is an epoch's length: its keystreams expire this long after registration.
	// +optional
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	Lifetime metav1.Duration `json:"lifetime,omitempty"`

	// SafetyMargin: senders stop using an epoch this long before its expiry.
	// +optional
	// +kubebuilder:default="60s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	SafetyMargin metav1.Duration `json:"safetyMargin,omitempty"`

	// Grace: receivers keep an epoch's entries this long after its expiry.
	// +optional
	// +kubebuilder:default="120s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	Grace metav1.Duration `json:"grace,omitempty"`
}

// Padding is the stochastic traffic padding (STP) policy.
//
// +kubebuilder:validation:XValidation:rule="self.policy == 'stp' || (!has(self.period) && !has(self.probabilityPercent) && !has(self.rateBytesPerSecond) && !has(self.tick))",message="STP parameters apply only with policy stp"
// +kubebuilder:validation:XValidation:rule="!has(self.period) || !has(self.tick) || duration(self.period) >= duration(self.tick)",message="padding.period must be at least padding.tick"
type Padding struct {
	// Policy is off (no cover packets) or stp.
	// +optional
	// +kubebuilder:default=off
	Policy PaddingPolicy `json:"policy,omitempty"`

	// Period is the STP period T (and window length). Default 60s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	Period *metav1.Duration `json:"period,omitempty"`

	// ProbabilityPercent is q in percent: the chance that a period gets a random shaping
	// window. Default 10.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	ProbabilityPercent *int32 `json:"probabilityPercent,omitempty"`

	// RateBytesPerSecond is R: the rate a window is filled to. Default 2000.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=125000000
	RateBytesPerSecond *int32 `json:"rateBytesPerSecond,omitempty"`

	// Tick is Δ: how often the padder tops a window up. Default 10ms.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="padding.tick must be positive"
	Tick *metav1.Duration `json:"tick,omitempty"`
}

// Registrar is the session stream the interfaces follow.
type Registrar struct {
	// Cloud is the cloud's name in the session subjects (lois.<cloud>.session.open,
	// lois.<cloud>.ack.…). Default: the resource's name.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+$`
	Cloud string `json:"cloud,omitempty"`

	// NATSURL is the NATS server of the session stream; unset uses the operator's
	// (--nats-url).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.startsWith('nats://') || self.startsWith('tls://')",message="registrar.natsURL must be a nats:// or tls:// URL"
	NATSURL string `json:"natsURL,omitempty"`

	// NATSSecret names a Secret in the resource's namespace whose entries user and password
	// are the NATS user the interfaces connect with (the password mounted as a file); unset
	// connects without a user.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NATSSecret string `json:"natsSecret,omitempty"`

	// RecordKeyRotation is how often the operator rotates the record key the session records
	// are sealed under (Secret <name>-lois-record-key, spec §10): it adds a key with the next
	// id while records are still sealed under the current one (staged, so every pod's mounted
	// Secret has it before a record needs it), then makes it current (the registrar follows
	// its file without a restart), and removes a superseded key once no record sealed under
	// it can be left in the session stream (its max age). Unset: the key is never rotated.
	// Server interfaces outside the cluster must read the Secret as it changes.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="registrar.recordKeyRotation must be at least 1s"
	RecordKeyRotation *metav1.Duration `json:"recordKeyRotation,omitempty"`

	// Vault wraps the seeds the registrar stores with Vault Transit (spec §10), so that a
	// restarted registrar carries on with the open sessions. Unset, the registrar keeps seeds
	// in memory only: a restart loses every session and devices HELLO again.
	// +optional
	Vault *SeedVault `json:"vault,omitempty"`
}

// SeedVault is the Transit key the registrar wraps session seeds with, used through the
// Kubernetes auth method with the registrar's service account (<name>-lois-registrar).
type SeedVault struct {
	// Address of the Vault server; empty uses the operator's configured address.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') || self.startsWith('http://')",message="registrar.vault.address must be an http:// or https:// URL"
	Address string `json:"address,omitempty"`

	// Role is the Kubernetes auth role the registrar logs in with.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Role string `json:"role"`

	// Mount is the Transit engine's mount point.
	// +optional
	// +kubebuilder:default=transit
	// +kubebuilder:validation:MaxLength=128
	Mount string `json:"mount,omitempty"`

	// SeedKey is the Transit key the seeds are wrapped under.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+$`
	SeedKey string `json:"seedKey"`
}

// HeaderGatewayStatus is the observed state of a HeaderGateway.
type HeaderGatewayStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Progressing, Degraded; ServerInterfaces (whether the operator's
	// server interfaces run and are ready, or that they are external).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// CloudReplicas is the number of cloud interface replicas running and ready.
	// +optional
	CloudReplicas int32 `json:"cloudReplicas,omitempty"`

	// ServerReplicas is the number of server interfaces the operator runs that are ready,
	// over every service (server.placement netns; 0 otherwise).
	// +optional
	ServerReplicas int32 `json:"serverReplicas,omitempty"`

	// Devices is the number of device sessions the cloud interfaces have installed (the
	// smallest count over the replicas that answered: a session counts once every replica
	// can take its packets).
	// +optional
	Devices int64 `json:"devices,omitempty"`

	// KeystreamsInstalled is the number of live upload keystream entries in a cloud
	// interface's table (the largest over the replicas; every replica holds them all).
	// +optional
	KeystreamsInstalled int64 `json:"keystreamsInstalled,omitempty"`

	// KeystreamsConsumed is the number of uploads the cloud interfaces forwarded, each with a
	// keystream used once and deleted (summed over the replicas since they started).
	// +optional
	KeystreamsConsumed int64 `json:"keystreamsConsumed,omitempty"`

	// PacketsPerSecond is the rate of forwarded uploads between the last two observations.
	// +optional
	PacketsPerSecond string `json:"packetsPerSecond,omitempty"`

	// Rejected counts the cloud interfaces' rejected uploads by reason (unknown_id, replay,
	// malformed, …).
	// +optional
	Rejected map[string]int64 `json:"rejected,omitempty"`

	// LastObserved is when the cloud interfaces' figures were last read.
	// +optional
	LastObserved *metav1.Time `json:"lastObserved,omitempty"`

	// PadRatio is the share of cover packets (stochastic traffic padding) among the packets
	// the operator's server interfaces handled since they started, e.g. "0.27": the cover
	// uploads they recovered and dropped plus the cover downloads they sent, over every upload
	// they recovered and download they hid. Only the server interfaces tell a cover packet
	// from a real one (a cloud interface forwards both alike, each consuming a keystream), so
	// it is empty with server.placement external and until a packet passed.
	// +optional
	PadRatio string `json:"padRatio,omitempty"`

	// Server is what the server interfaces the operator runs report (server.placement
	// netns); unset otherwise.
	// +optional
	Server *ServerInterfaceStatus `json:"server,omitempty"`

	// RecordKey is the state of the record key rotation (spec.registrar.recordKeyRotation);
	// unset when the key is not rotated.
	// +optional
	RecordKey *RecordKeyStatus `json:"recordKey,omitempty"`
}

// ServerInterfaceStatus is what the operator's server interfaces report, summed over them
// (every service, every replica) since they started.
type ServerInterfaceStatus struct {
	// Replicas is the number of server interfaces that answered.
	Replicas int32 `json:"replicas"`

	// Devices is the smallest number of device sessions installed over the server
	// interfaces that answered.
	// +optional
	Devices int64 `json:"devices,omitempty"`

	// UploadsRecovered counts the real uploads whose headers the server interfaces recovered
	// and handed to their servers.
	// +optional
	UploadsRecovered int64 `json:"uploadsRecovered,omitempty"`

	// DownloadsHidden counts the servers' replies the server interfaces hid and sent.
	// +optional
	DownloadsHidden int64 `json:"downloadsHidden,omitempty"`

	// CoverReceived counts the devices' cover uploads recovered and dropped.
	// +optional
	CoverReceived int64 `json:"coverReceived,omitempty"`

	// CoverSent counts the cover downloads the server interfaces sent.
	// +optional
	CoverSent int64 `json:"coverSent,omitempty"`

	// DownloadKeystreams is the number of unused download keystreams the server interfaces
	// hold: each replica holds only its partition (spec §3.11), so this is their sum.
	// +optional
	DownloadKeystreams int64 `json:"downloadKeystreams,omitempty"`

	// PacketsPerSecond is the rate of the packets above (real and cover, both directions)
	// between the last two observations.
	// +optional
	PacketsPerSecond string `json:"packetsPerSecond,omitempty"`

	// Rejected counts the packets the server interfaces refused, by direction and reason
	// ("up/unknown_id", "down/exhausted", …).
	// +optional
	Rejected map[string]int64 `json:"rejected,omitempty"`

	// LastObserved is when the server interfaces' figures were last read.
	// +optional
	LastObserved *metav1.Time `json:"lastObserved,omitempty"`
}

// RecordKeyStatus is where the record key rotation stands.
type RecordKeyStatus struct {
	// CurrentID is the id of the key new session records are sealed under.
	CurrentID int64 `json:"currentID"`

	// StagedID is a key in the Secret that is not current yet: the pods' mounted Secrets are
	// being given it; it becomes current at PromoteAt.
	// +optional
	StagedID *int64 `json:"stagedID,omitempty"`

	// PromoteAt is when the staged key becomes current.
	// +optional
	PromoteAt *metav1.Time `json:"promoteAt,omitempty"`

	// Rotations counts the rotations the operator made (a staged key made current).
	// +optional
	Rotations int64 `json:"rotations,omitempty"`

	// LastRotation is when the current key was made current by a rotation.
	// +optional
	LastRotation *metav1.Time `json:"lastRotation,omitempty"`

	// NextRotation is when the next key is made current.
	// +optional
	NextRotation *metav1.Time `json:"nextRotation,omitempty"`

	// Retiring are the superseded keys still in the Secret, for the records sealed under them
	// that the session stream may still hold; each is removed at its time.
	// +optional
	// +listType=map
	// +listMapKey=id
	Retiring []RetiringRecordKey `json:"retiring,omitempty"`
}

// RetiringRecordKey is a superseded record key and when it leaves the Secret.
type RetiringRecordKey struct {
	// ID is the key's id in the record key file.
	ID int64 `json:"id"`
	// RemoveAt is when no record sealed under it can be left in the session stream.
	RemoveAt metav1.Time `json:"removeAt"`
}

// HeaderGateway runs one LOIS cloud: its cloud interfaces behind one unified port, and the
// registrar's settings its devices register with.
//
// The name becomes part of subjects and object names, so it has no dots.
//
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 40 && !self.metadata.name.contains('.')",message="a HeaderGateway name is at most 40 characters without dots: it becomes part of NATS subjects and object names"
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=obscura;lois,shortName=hgw
// +kubebuilder:printcolumn:name="Devices",type=integer,JSONPath=`.status.devices`
// +kubebuilder:printcolumn:name="Installed",type=integer,JSONPath=`.status.keystreamsInstalled`
// +kubebuilder:printcolumn:name="Consumed",type=integer,JSONPath=`.status.keystreamsConsumed`
// +kubebuilder:printcolumn:name="Pkts/s",type=string,JSONPath=`.status.packetsPerSecond`
// +kubebuilder:printcolumn:name="Pad",type=string,JSONPath=`.status.padRatio`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="CI",type=integer,JSONPath=`.status.cloudReplicas`,priority=1
// +kubebuilder:printcolumn:name="SI",type=integer,JSONPath=`.status.serverReplicas`,priority=1
// +kubebuilder:printcolumn:name="SI-Pkts/s",type=string,JSONPath=`.status.server.packetsPerSecond`,priority=1
// +kubebuilder:printcolumn:name="Record-Key",type=integer,JSONPath=`.status.recordKey.currentID`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type HeaderGateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   HeaderGatewaySpec   `json:"spec"`
	Status HeaderGatewayStatus `json:"status,omitempty"`
}

// HeaderGatewayList is a list of HeaderGateways.
//
// +kubebuilder:object:root=true
type HeaderGatewayList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HeaderGateway `json:"items"`
}

func init() {
	SchemeBuilder.Register(&HeaderGateway{}, &HeaderGatewayList{})
}
