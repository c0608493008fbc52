package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/obscura-iot/obscura/operators/api/common"
)

// VendorSpec describes one device vendor V in the Mohito vendor set 𝒱.
type VendorSpec struct {
	// Index is this vendor's position in the one-hot vendor vector that every user secret-shares
	// (spec §3.6). It is part of every user's ciphertext, so it can never change.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="index is immutable: it is this vendor's position in every user's share vector"
	Index int32 `json:"index"`

	// DisplayName is a human-readable name; it never appears on the wire.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	DisplayName string `json:"displayName,omitempty"`

	// Devices is the vendor's active-device count |𝒟_a(v)|. It weights shuffler selection
	// (smooth weighted round-robin, spec O4) and sizes the response OKVS.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	Devices int64 `json:"devices"`

	// Capacity is the vendor's per-round capacity policy (spec §3.8, G3, G6).
	Capacity VendorCapacity `json:"capacity"`

	// Keys references the vendor's long-term X25519 private key sk_V.
	Keys common.KeyReference `json:"keys"`

	// Agent configures the vendor agent the operator hosts for this vendor; omit when the vendor
	// runs its own.
	// +optional
	Agent *VendorAgent `json:"agent,omitempty"`
}

// VendorCapacity is the per-vendor capacity policy. Each round the integrator draws a secret
// C_v = base + δ + U{0..jitter} (spec G3a) and pads the vendor's OKVS to the public capacity
// paddedEntries = K_v (G3b), so neither the shuffler nor the vendor learns C_v.
//
// +kubebuilder:validation:XValidation:rule="self.paddedEntries >= self.base + (has(self.jitter) ? self.jitter : 0)",message="capacity.paddedEntries (K_v) must be at least capacity.base + capacity.jitter: the padded OKVS has to hold every drawn C_v"
type VendorCapacity struct {
	// Base is base_v, e.g. the (1−ε) quantile of the vendor's real per-round count (spec G5).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000000
	Base int32 `json:"base"`

	// Jitter is w_v, the width of the uniform draw added to C_v each round; 0 keeps C_v fixed
	// (only for benchmarks: a fixed C lets the shuffler learn A, spec G3).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000000
	Jitter int32 `json:"jitter,omitempty"`

	// PaddedEntries is K_v, the public per-round OKVS capacity of this vendor's command OKVS.
	// The Round additionally requires K_v ≥ base + δ + jitter.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000000
	PaddedEntries int32 `json:"paddedEntries"`

	// ResponsePaddedEntries is the coarse public capacity of the vendor's response OKVS (spec G6);
	// 0 or unset means q × devices rounded up to the next power of two.
	// +optional
	// +kubebuilder:validation:Maximum=100000000
	ResponsePaddedEntries int32 `json:"responsePaddedEntries,omitempty"`
}

// VendorAgent is the vendor-side service devices connect to over MQTT.
type VendorAgent struct {
	// Replicas of the vendor agent: one is active (a leader lease per vendor keeps rounds in
	// order at the devices), the others are hot standbys that take over when it stops.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	Replicas int32 `json:"replicas,omitempty"`

	// Devices names the Secret key holding the vendor's device registry as a JSON list of
	// {"id", "prf": base64 k_D^prf} (default key devices.json). It stays in the vendor's trust
	// domain: only the agent mounts it, and the integrator never sees a device id.
	// +optional
	Devices *common.SecretFileReference `json:"devices,omitempty"`
}

// VendorStatus is the observed state of a Vendor.
type VendorStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Progressing, Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ActiveDevices is the number of devices connected in the last round.
	// +optional
	ActiveDevices int64 `json:"activeDevices,omitempty"`

	// RoundsServed counts rounds in which this vendor decoded its OKVS.
	// +optional
	RoundsServed int64 `json:"roundsServed,omitempty"`

	// ShufflerDuty counts rounds in which this vendor was the shuffler V*.
	// +optional
	ShufflerDuty int64 `json:"shufflerDuty,omitempty"`

	// KeyEpochs are the vendor key epochs in the key Secret (keys.secretRef), ascending; the
	// highest becomes current once the workloads have activated it. Empty for Vault keys.
	// +optional
	// +listType=atomic
	KeyEpochs []int32 `json:"keyEpochs,omitempty"`

	// Shufflers is the number of Shuffler resources that name this vendor.
	// +optional
	Shufflers int32 `json:"shufflers,omitempty"`
}

// Vendor is a device vendor taking part in Mohito rounds.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=obscura;mohito
// +kubebuilder:printcolumn:name="Index",type=integer,JSONPath=`.spec.index`
// +kubebuilder:printcolumn:name="Devices",type=integer,JSONPath=`.spec.devices`
// +kubebuilder:printcolumn:name="K_v",type=integer,JSONPath=`.spec.capacity.paddedEntries`,description="public per-round OKVS capacity"
// +kubebuilder:printcolumn:name="Shufflers",type=integer,JSONPath=`.status.shufflers`
// +kubebuilder:printcolumn:name="Served",type=integer,JSONPath=`.status.roundsServed`,priority=1,description="completed rounds in which this vendor decoded its OKVS"
// +kubebuilder:printcolumn:name="Duty",type=integer,JSONPath=`.status.shufflerDuty`,priority=1,description="rounds this vendor was the shuffler V*"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Vendor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   VendorSpec   `json:"spec"`
	Status VendorStatus `json:"status,omitempty"`
}

// VendorList is a list of Vendors.
//
// +kubebuilder:object:root=true
type VendorList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Vendor `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Vendor{}, &VendorList{})
}
