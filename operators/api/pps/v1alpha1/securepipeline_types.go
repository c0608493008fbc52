package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/obscura-iot/obscura/operators/api/common"
)

// Mode is a function's input mode (services/pkg/pps/contract ModeFaithful, ModeHardened).
// +kubebuilder:validation:Enum=faithful;hardened
type Mode string

const (
	// ModeFaithful is the paper's protocol: publisher labels per bit, identity gates and the
	// wire-label consistency check (spec §3.3–3.5).
	ModeFaithful Mode = "faithful"
	// ModeHardened is H1 (spec D21): masked values and OT extension, no identity gates, which
	// defeats a publisher colluding with the broker (§2.6.1).
	ModeHardened Mode = "hardened"
)

// SecurePipelineSpec is one secure publish–process–subscribe function: publishers' values go
// in, a garbled circuit of Source is evaluated by the broker over them without the broker
// seeing them, and only the subscribers can unmask the result (spec §3.3, §5.2).
// +kubebuilder:validation:XValidation:rule="!has(self.check) || !has(self.mode) || self.mode != 'hardened'",message="check applies only to faithful functions: a hardened function has no consistency check (D21)"
type SecurePipelineSpec struct {
	// Source is the function's program in the PPS DSL (spec §4.6, D10). Its function id (fnid)
	// is derived from the canonical form by the services and reported in status.fnID.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=262144
	Source string `json:"source"`

	// Mode is the input mode: faithful (the paper's) or hardened (H1, spec D21).
	// +optional
	// +kubebuilder:default=faithful
	Mode Mode `json:"mode,omitempty"`

	// Check is the consistency check of a faithful function (spec D16): kkrt, the batched OPRF
	// over a base-OT session (the broker's default), or oprf, the per-execution OPRF-PSI. A
	// hardened function has none (D21). Unset, the broker's --check default applies.
	// +optional
	// +kubebuilder:validation:Enum=kkrt;oprf
	Check string `json:"check,omitempty"`

	// Publishers bind every topic the program reads ((val "<topic>"), (window ...),
	// (static ...)) to the device that publishes it. Each device gets a NATS user allowed to
	// publish only to its own pps/dev/<id>/up and pps/pub/<id> topics (spec §5.3, §10 #10).
	// +listType=map
	// +listMapKey=topic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=1000
	Publishers []Publisher `json:"publishers"`

	// Subscribers are the device ids allowed to subscribe to the function's output (the
	// broker's ACL, spec D14). Removing one revokes it: the garbler starts a new key epoch.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^[0-9a-f]{64}$')",message="a subscriber is a device id: 64 lowercase hex characters (its Ed25519 public key)"
	Subscribers []string `json:"subscribers,omitempty"`

	// Window is t: how long after each schedule tick the broker collects inputs (spec D15).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="window must be positive"
	Window metav1.Duration `json:"window"`

	// Schedule is the interval between executions (spec D15).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="schedule must be positive"
	Schedule metav1.Duration `json:"schedule"`

	// SeedTTL bounds how long the garbler retains per-round seeds of this function's
	// publishers (spec D8); forward secrecy starts only once a seed is erased. Unset: 26h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="seedTTL must be positive"
	SeedTTL *metav1.Duration `json:"seedTTL,omitempty"`

	// Broker is the broker's trust domain: this resource's namespace.
	// +optional
	// +kubebuilder:default={}
	Broker Broker `json:"broker,omitempty"`

	// Garbler is the garbler's trust domain: its own namespace, keys and Redis.
	Garbler Garbler `json:"garbler"`

	// TLS names the Secrets of the broker↔garbler mTLS link (spec §5.3).
	// +optional
	// +kubebuilder:default={}
	TLS LinkTLS `json:"tls,omitempty"`
}

// Publisher binds one program topic to its publisher.
type Publisher struct {
	// Topic as the program names it in (val "<topic>").
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Topic string `json:"topic"`

	// DeviceID is the publisher's id: the lowercase hex of its Ed25519 public key.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9a-f]{64}$')",message="deviceID must be 64 lowercase hex characters (the device's Ed25519 public key)"
	DeviceID string `json:"deviceID"`
}

// Broker is how the broker runs, in the resource's namespace.
type Broker struct {
	// Replicas of the broker; one is the scheduling leader at a time (a Redis lock), the others
	// evaluate and take over.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	Replicas int32 `json:"replicas,omitempty"`

	// Workers is the number of evaluator workers per broker pod (`pps broker --workers`).
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	Workers int32 `json:"workers,omitempty"`

	// Redis is the broker domain's own Redis (publisher and function registry, labels,
	// execution records).
	// +optional
	// +kubebuilder:default={}
	Redis Redis `json:"redis,omitempty"`

	// Resources replace the broker container's defaults.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// Garbler is the garbler's trust domain. It runs without any NATS credentials (spec §10 #10):
// it talks to nobody but the broker, over mTLS.
type Garbler struct {
	// Namespace the garbler runs in. It must differ from the resource's namespace: the broker
	// and the garbler are non-colluding parties (spec §5.4).
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`

	// Replicas of the garbler; ratchet writes are single-writer through a Redis lock.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=8
	Replicas int32 `json:"replicas,omitempty"`

	// Keys are the garbler's Ed25519 identity (pinned by devices, spec D20) and the key sealing
	// its ratchet state in Redis.
	Keys GarblerKeys `json:"keys"`

	// Redis is the garbler domain's own Redis (sealed ratchet state and round seeds).
	// +optional
	// +kubebuilder:default={}
	Redis Redis `json:"redis,omitempty"`

	// Resources replace the garbler container's defaults.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// GarblerKeys says where the garbler's identity and sealing keys are: both in Vault Transit
// (production, spec §5.3: the keys never leave Vault), or both in a Secret of the garbler's
// namespace (tests, demos).
//
// +kubebuilder:validation:XValidation:rule="has(self.vault) != has(self.secretRef)",message="set exactly one of keys.vault or keys.secretRef"
type GarblerKeys struct {
	// Vault signs with the identity key and seals with the sealing key through Transit.
	// +optional
	Vault *TransitKeys `json:"vault,omitempty"`

	// SecretRef holds both keys as files.
	// +optional
	SecretRef *GarblerKeySecret `json:"secretRef,omitempty"`
}

// TransitKeys are the garbler's keys in Vault's Transit engine, used through the Kubernetes
// auth method with the garbler's service account.
type TransitKeys struct {
	// Address of the Vault server; empty uses the operator's configured address.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') || self.startsWith('http://')",message="vault.address must be an http:// or https:// URL"
	Address string `json:"address,omitempty"`

	// Role is the Kubernetes auth role the garbler logs in with.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Role string `json:"role"`

	// Mount is the Transit engine's mount point.
	// +optional
	// +kubebuilder:default=transit
	// +kubebuilder:validation:MaxLength=128
	Mount string `json:"mount,omitempty"`

	// IdentityKey is the Transit key (type ed25519) the garbler signs its setup replies with.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+$`
	IdentityKey string `json:"identityKey"`

	// SealKey is the Transit key that envelope-encrypts the ratchet state.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+$`
	SealKey string `json:"sealKey"`
}

// GarblerKeySecret names the Secret holding the garbler's keys as files.
//
// +kubebuilder:validation:XValidation:rule="!has(self.identityKey) || !has(self.sealKey) || self.identityKey != self.sealKey",message="keys.secretRef.identityKey and sealKey must be different entries"
type GarblerKeySecret struct {
	// Name of the Secret, in the garbler's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// IdentityKey is the entry holding the Ed25519 identity key.
	// +optional
	// +kubebuilder:default=identity.key
	// +kubebuilder:validation:MaxLength=253
	IdentityKey string `json:"identityKey,omitempty"`

	// SealKey is the entry holding the 32-byte sealing key.
	// +optional
	// +kubebuilder:default=seal.key
	// +kubebuilder:validation:MaxLength=253
	SealKey string `json:"sealKey,omitempty"`
}

// Redis is one trust domain's own Redis.
type Redis struct {
	// Address is host:port, relative to the domain's namespace.
	// +optional
	// +kubebuilder:default="redis:6379"
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9.-]+:[0-9]{1,5}$`
	Address string `json:"address,omitempty"`

	// PasswordSecret is the Secret entry (in the domain's namespace) holding the Redis
	// password; unset connects without one. Its key defaults to "password".
	// +optional
	PasswordSecret *common.SecretFileReference `json:"passwordSecret,omitempty"`
}

// LinkTLS names the Secrets of the broker↔garbler mTLS link, as cert-manager writes them
// (tls.crt, tls.key, ca.crt). Each domain trusts only the other's CA (spec §5.3). The operator
// does not create them; the pods wait for them and the resource reports TLSSecretNotFound.
type LinkTLS struct {
	// GarblerSecret, in the garbler's namespace: the garbler's serving certificate (valid for
	// <name>-pps-garbler.<garbler namespace>.svc) and, as ca.crt, the CA of the broker's
	// client certificates. Default <name>-pps-garbler-tls.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	GarblerSecret string `json:"garblerSecret,omitempty"`

	// BrokerSecret, in the resource's namespace: the broker's client certificate and, as
	// ca.crt, the CA of the garbler's certificate. Default <name>-pps-broker-tls.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	BrokerSecret string `json:"brokerSecret,omitempty"`
}

// Execution is one execution of the function as the broker recorded it.
type Execution struct {
	// Time the execution finished.
	Time metav1.Time `json:"time"`

	// Round is the function round ρ the output is masked under.
	Round int64 `json:"round"`

	// ValidInputs counts the publishers' values that went in (the others were nullified).
	ValidInputs int64 `json:"validInputs"`

	// Status is the output's status: ok, or insufficient when fewer than the function's
	// minimum inputs were valid (the ideal functionality's ⊥).
	Status string `json:"status"`
}

// SecurePipelineStatus is the observed state of a SecurePipeline.
type SecurePipelineStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: ConfigValid (the spec can run), Ready, Progressing, Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// FnID is the function id the services derived from the canonical source (spec §5.3).
	// +optional
	FnID string `json:"fnID,omitempty"`

	// CircuitHash is the SHA-256 of the compiled circuit both parties agree on (spec D10).
	// +optional
	CircuitHash string `json:"circuitHash,omitempty"`

	// AndGates is the number of AND gates of the circuit (what a garbling costs).
	// +optional
	AndGates int64 `json:"andGates,omitempty"`

	// CircuitBytes is the size of one garbled circuit streamed to the broker.
	// +optional
	CircuitBytes int64 `json:"circuitBytes,omitempty"`

	// Executions counts the executions the broker has completed.
	// +optional
	Executions int64 `json:"executions,omitempty"`

	// LastLatency is how long the last execution took, from the end of the window to the
	// published output (consistency check, garble, stream, evaluate).
	// +optional
	LastLatency *metav1.Duration `json:"lastLatency,omitempty"`

	// LastExecution is the last execution the broker reported.
	// +optional
	LastExecution *Execution `json:"lastExecution,omitempty"`

	// Workers is the number of evaluator workers running: broker replicas × workers.
	// +optional
	Workers int32 `json:"workers,omitempty"`
}

// SecurePipeline runs one secure publish–process–subscribe function across two trust
// domains: the broker in the resource's namespace, the garbler in spec.garbler.namespace.
//
// The name becomes part of NATS account and user names, so it has no dots.
//
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 40 && !self.metadata.name.contains('.')",message="a SecurePipeline name is at most 40 characters without dots: it becomes part of NATS account and user names"
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=obscura;pps,shortName=spipe
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Executions",type=integer,JSONPath=`.status.executions`
// +kubebuilder:printcolumn:name="Last latency",type=string,JSONPath=`.status.lastLatency`
// +kubebuilder:printcolumn:name="AND gates",type=integer,JSONPath=`.status.andGates`
// +kubebuilder:printcolumn:name="Bytes",type=integer,JSONPath=`.status.circuitBytes`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="FnID",type=string,JSONPath=`.status.fnID`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SecurePipeline struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   SecurePipelineSpec   `json:"spec"`
	Status SecurePipelineStatus `json:"status,omitempty"`
}

// SecurePipelineList is a list of SecurePipelines.
//
// +kubebuilder:object:root=true
type SecurePipelineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SecurePipeline `json:"items"`
}

func init() {
	SchemeBuilder.Register(&SecurePipeline{}, &SecurePipelineList{})
}
