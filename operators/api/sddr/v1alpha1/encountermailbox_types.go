package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/obscura-iot/obscura/operators/api/common"
)

// Bounds of a sealed message the mailbox accepts (services/pkg/sddr/client: a version byte,
// a 24-byte nonce and a 16-byte tag around a plaintext padded to 64-byte blocks, at most
// 4096 bytes).
const (
	// MinMessageBytes is the smallest sealed message: one padding block.
	MinMessageBytes = 41 + 64
	// MaxMessageBytes is the largest sealed message the protocol produces.
	MaxMessageBytes = 41 + 4096
)

// EncounterMailboxSpec is one encounter mailbox (shared/specs/sddr.md §2.1, §7.1): the
// untrusted rendezvous where devices that met leave each other AEAD-sealed messages under an
// opaque address derived from their encounter. The service stores only ciphertexts, in its
// own Redis with a TTL, rate-limits each client (bearer token) and learns no identity and no
// key. Every replica is stateless (the messages are in Redis), so the mailbox scales
// horizontally: spec.replicas is the scale subresource an HPA drives.
type EncounterMailboxSpec struct {
	// Replicas of the mailbox API. Each replica keeps its own per-client token buckets, so a
	// client's rate is at most Replicas × rateLimit (the edge's per-client limit is in front).
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32
	Replicas int32 `json:"replicas,omitempty"`

	// Redis is the mailbox's own Redis (no other service shares it): the sealed messages live
	// there under their opaque addresses, each until its TTL.
	Redis MailboxRedis `json:"redis"`

	// MessageTTL is how long a message is kept (`sddr mailbox --ttl`), between 1s and 720h.
	// +optional
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('720h')",message="messageTTL must be within [1s, 720h]"
	MessageTTL metav1.Duration `json:"messageTTL,omitempty"`

	// MaxMessages bounds the unexpired messages one mailbox address holds
	// (`--max-messages`); a put beyond it is refused (HTTP 507, reason mailbox_full).
	// +optional
	// +kubebuilder:default=64
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxMessages int32 `json:"maxMessages,omitempty"`

	// MaxMessageBytes is the largest sealed message accepted (`--max-message-bytes`): at
	// least one padding block (105 bytes), at most what the protocol produces (4137 bytes, a
	// 4094-byte plaintext). A larger put is refused (HTTP 413, reason too_large).
	// +optional
	// +kubebuilder:default=4137
	// +kubebuilder:validation:Minimum=105
	// +kubebuilder:validation:Maximum=4137
	MaxMessageBytes int32 `json:"maxMessageBytes,omitempty"`

	// RateLimit is each client's token bucket, per replica.
	// +optional
	// +kubebuilder:default={}
	RateLimit MailboxRateLimit `json:"rateLimit,omitempty"`

	// Port is where the mailbox API listens (HTTP/1.1 and cleartext HTTP/2): the Service's
	// port and, on a host network, the node's.
	// +optional
	// +kubebuilder:default=8090
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// Resources replace the mailbox container's defaults (50m CPU, 64Mi memory).
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// MailboxRedis is the mailbox's own Redis.
type MailboxRedis struct {
	// Address is host:port, relative to the resource's namespace.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9.-]+:[0-9]{1,5}$`
	Address string `json:"address"`

	// PasswordSecret is the Secret entry (in the resource's namespace) holding the Redis
	// password, mounted as a file; unset connects without one. Its key defaults to "password".
	// +optional
	PasswordSecret *common.SecretFileReference `json:"passwordSecret,omitempty"`
}

// MailboxRateLimit is one client's token bucket: a client is the hash of its bearer token, which the
// app draws and rotates (not a device identity).
type MailboxRateLimit struct {
	// RequestsPerSecond refills each client's bucket (`--rate`).
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	RequestsPerSecond int32 `json:"requestsPerSecond,omitempty"`

	// Burst is the bucket's size (`--burst`).
	// +optional
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	Burst int32 `json:"burst,omitempty"`

	// MaxClients bounds the buckets a replica keeps, least recently used evicted
	// (`--max-clients`); an evicted client starts again with a full bucket.
	// +optional
	// +kubebuilder:default=100000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000000
	MaxClients int32 `json:"maxClients,omitempty"`
}

// EncounterMailboxStatus is the observed state of an EncounterMailbox.
type EncounterMailboxStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Progressing, Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Replicas is the number of mailbox pods (the scale subresource's status).
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// ReadyReplicas is the number of mailbox pods ready (their Redis answers).
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// Selector selects the mailbox pods (the scale subresource's, for an HPA).
	// +optional
	Selector string `json:"selector,omitempty"`

	// Endpoint is the in-cluster URL of the mailbox API (the edge's upstream).
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
}

// EncounterMailbox runs an SDDR encounter mailbox: its API as a Deployment and a Service, in
// front of its own Redis.
//
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 40 && !self.metadata.name.contains('.')",message="an EncounterMailbox name is at most 40 characters without dots: it becomes part of object names"
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:categories=obscura;sddr,shortName=mailbox
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready Replicas",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="TTL",type=string,JSONPath=`.spec.messageTTL`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EncounterMailbox struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   EncounterMailboxSpec   `json:"spec"`
	Status EncounterMailboxStatus `json:"status,omitempty"`
}

// EncounterMailboxList is a list of EncounterMailboxes.
//
// +kubebuilder:object:root=true
type EncounterMailboxList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EncounterMailbox `json:"items"`
}

func init() {
	SchemeBuilder.Register(&EncounterMailbox{}, &EncounterMailboxList{})
}
