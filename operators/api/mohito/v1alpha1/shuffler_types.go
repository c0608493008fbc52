package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/obscura-iot/obscura/operators/api/common"
)

// ShufflerSpec describes the shuffler service V* of one vendor (spec §3.6, §3.8).
type ShufflerSpec struct {
	// VendorRef names the Vendor (same namespace) whose trust domain runs this shuffler. The
	// shuffler decrypts with that vendor's key, so it cannot move to another vendor.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="vendorRef is immutable: a shuffler runs inside its vendor's trust domain"
	VendorRef common.LocalObjectReference `json:"vendorRef"`

	// Replicas of the shuffler: one is active (a leader lease per vendor holds every round's
	// state in one place), the others are hot standbys that take over when it stops.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	Replicas int32 `json:"replicas,omitempty"`

	// FakePool configures the pre-generated fake messages: fakes must come from a pool so the
	// emission cadence never depends on real versus fake (spec G7).
	FakePool FakePool `json:"fakePool"`

	// Weight overrides the vendor's device count as this shuffler's weight in smooth weighted
	// round-robin selection (spec O4). 0 keeps it out of the rotation.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000
	Weight *int64 `json:"weight,omitempty"`
}

// FakePool sizes the shuffler's pool of pre-generated fakes.
//
// +kubebuilder:validation:XValidation:rule="!has(self.refillBelow) || self.refillBelow <= self.size",message="fakePool.refillBelow must not exceed fakePool.size"
type FakePool struct {
	// Size is the number of fakes kept ready. It should cover the largest expected B = C − A
	// plus a burst's |𝒱|·S.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000000
	Size int32 `json:"size"`

	// RefillBelow starts regenerating fakes when the pool falls below this many.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000000
	RefillBelow int32 `json:"refillBelow,omitempty"`
}

// ShufflerStatus is the observed state of a Shuffler.
type ShufflerStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Progressing, Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// VendorIndex is the index of the referenced vendor, once resolved.
	// +optional
	VendorIndex *int32 `json:"vendorIndex,omitempty"`

	// EffectiveWeight is the selection weight in use: spec.weight, else the vendor's devices.
	// +optional
	EffectiveWeight int64 `json:"effectiveWeight,omitempty"`

	// RoundsShuffled counts rounds this shuffler completed as V*.
	// +optional
	RoundsShuffled int64 `json:"roundsShuffled,omitempty"`

	// LastRound is the id t of the last round this shuffler served.
	// +optional
	LastRound *int64 `json:"lastRound,omitempty"`

	// LastResult of that round: Shuffled or Aborted.
	// +optional
	LastResult string `json:"lastResult,omitempty"`
}

// Shuffler is the shuffler service of one vendor; one vendor per round acts as V*.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=obscura;mohito
// +kubebuilder:printcolumn:name="Vendor",type=string,JSONPath=`.spec.vendorRef.name`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Weight",type=integer,JSONPath=`.status.effectiveWeight`
// +kubebuilder:printcolumn:name="Shuffled",type=integer,JSONPath=`.status.roundsShuffled`
// +kubebuilder:printcolumn:name="Last",type=integer,JSONPath=`.status.lastRound`,priority=1
// +kubebuilder:printcolumn:name="Result",type=string,JSONPath=`.status.lastResult`,description="the last round this shuffler was V* for: Open, Completed or Aborted"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Shuffler struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   ShufflerSpec   `json:"spec"`
	Status ShufflerStatus `json:"status,omitempty"`
}

// ShufflerList is a list of Shufflers.
//
// +kubebuilder:object:root=true
type ShufflerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Shuffler `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Shuffler{}, &ShufflerList{})
}
