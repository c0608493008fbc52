package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/obscura-iot/obscura/operators/api/common"
)

// RoundSpec describes a series of Mohito rounds run by one integrator. One Round resource is
// one series; per-round state lives in NATS JetStream KV, never in etcd (DESIGN.md).
//
// +kubebuilder:validation:XValidation:rule="duration(self.shufflerPolicy.responseTimeout) < duration(self.period)",message="shufflerPolicy.responseTimeout must be shorter than period: a round whose shuffler has not answered by then is aborted, never skipped (spec G7)"
type RoundSpec struct {
	// Period is the fixed round duration T_round (spec §3.5). Rounds never wait for
	// participants: cover traffic keeps counts constant.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('100ms') && duration(self) <= duration('1h')",message="period must be between 100ms and 1h"
	Period metav1.Duration `json:"period"`

	// CommandsPerUser is q, the most commands a user may send per round; vendors decode q
	// ephemeral ids per active device, so vendor cost grows with q (spec O1).
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4
	CommandsPerUser int32 `json:"commandsPerUser,omitempty"`

	// Delta is δ, the most messages per round colluding users and devices may inject. Every
	// vendor's C_v must exceed it (spec §3.8).
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	Delta int32 `json:"delta,omitempty"`

	// CommandSize is L_c, the padded command plaintext size in bytes. Every command on the wire
	// has this size (padding is a privacy property). It must hold the 90-byte header of spec O5.
	// +optional
	// +kubebuilder:default=1024
	// +kubebuilder:validation:Minimum=128
	// +kubebuilder:validation:Maximum=65536
	CommandSize int32 `json:"commandSize,omitempty"`

	// ResponseSize is L_r, the padded response plaintext size in bytes.
	// +optional
	// +kubebuilder:default=1024
	// +kubebuilder:validation:Minimum=32
	// +kubebuilder:validation:Maximum=65536
	ResponseSize int32 `json:"responseSize,omitempty"`

	// Mode selects the protocol variant. Hardened applies every [R] fix of the spec (G1–G7);
	// PaperLiteral reproduces the paper for benchmarks only and leaks real counts (G1).
	// +optional
	// +kubebuilder:default=Hardened
	// +kubebuilder:validation:Enum=Hardened;PaperLiteral
	Mode ProtocolMode `json:"mode,omitempty"`

	// Suite is the HPKE suite of the onion layers: X25519 (DHKEM X25519, HKDF-SHA256,
	// ChaCha20-Poly1305) or the post-quantum hybrid MLKEM768X25519.
	// +optional
	// +kubebuilder:default=X25519
	// +kubebuilder:validation:Enum=X25519;MLKEM768X25519
	Suite string `json:"suite,omitempty"`

	// Capacity is the round-level capacity policy; per-vendor figures are on each Vendor.
	// +optional
	// +kubebuilder:default={}
	Capacity RoundCapacity `json:"capacity,omitempty"`

	// VendorSelector selects the Vendors (same namespace) that take part in this series.
	VendorSelector metav1.LabelSelector `json:"vendorSelector"`

	// ShufflerPolicy says how V* is chosen each round and how long it may take.
	ShufflerPolicy ShufflerPolicy `json:"shufflerPolicy"`

	// DecryptWorkers scales the integrator's stateless decryption workers (spec §4.5 stage A).
	// +optional
	// +kubebuilder:default={}
	DecryptWorkers DecryptWorkers `json:"decryptWorkers,omitempty"`

	// Gateway sizes the user-facing gateways.
	// +optional
	// +kubebuilder:default={}
	Gateway Gateway `json:"gateway,omitempty"`

	// Encoders partitions the integrator's OKVS encoders by vendor (spec §4.5 stage C).
	// +optional
	// +kubebuilder:default={}
	Encoders Encoders `json:"encoders,omitempty"`

	// Rounds limits the series to this many rounds; unset runs until deleted.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Rounds *int64 `json:"rounds,omitempty"`

	// Keys references the integrator's X25519 private key sk_I.
	Keys common.KeyReference `json:"keys"`
}

// ProtocolMode selects the hardened protocol or the paper-literal one.
type ProtocolMode string

const (
	// ProtocolHardened applies every [R] fix of shared/specs/mohito.md §8.1.
	ProtocolHardened ProtocolMode = "Hardened"
	// ProtocolPaperLiteral follows the paper exactly; for benchmarks only.
	ProtocolPaperLiteral ProtocolMode = "PaperLiteral"
)

// RoundCapacity is the round-level capacity policy (spec §3.8, G3, G5).
type RoundCapacity struct {
	// Draw says how C_v is chosen each round: Random draws a fresh secret C_v per round (G3a),
	// Fixed uses base + δ (benchmarks only: it lets the shuffler learn real counts).
	// +optional
	// +kubebuilder:default=Random
	// +kubebuilder:validation:Enum=Random;Fixed
	Draw CapacityDraw `json:"draw,omitempty"`

	// A round whose vendor list overflows K_v (a burst beyond the padding) uses the next public
	// size class, 2K_v, then 4K_v, … (G3b, mohito.CommandCapacity); the classes are fixed by
	// K_v, so there is no knob for them.

	// Classes lets the coordinator move every vendor's C_v with demand (spec §3.8, App. B, G5):
	// each round C_v = base × percent / 100 + δ + U{0..jitter} for the series' current class.
	// Unset, C_v follows the Vendors' base as set.
	// +optional
	Classes *CapacityClasses `json:"classes,omitempty"`
}

// CapacityClasses moves the series' capacity between size classes from what the integrator
// observes — which rounds burst and their share of fakes — never per vendor, which the integrator
// does not learn (docs/operators.md, "Capacity classes"). Every vendor's K_v must hold the
// largest class's draw, so no class change is visible in the vendors' table sizes.
type CapacityClasses struct {
	// Percent are the classes in percent of each vendor's base, ascending, the first 100.
	// +kubebuilder:validation:MinItems=2
	// +kubebuilder:validation:MaxItems=16
	// +listType=set
	// +kubebuilder:validation:items:Minimum=100
	// +kubebuilder:validation:items:Maximum=10000
	// +kubebuilder:validation:XValidation:rule="self[0] == 100 && self.isSorted()",message="capacity.classes.percent must start at 100 and ascend"
	Percent []int32 `json:"percent"`

	// Hold is the least time between two class changes, and the window each decision observes;
	// at least ten periods (the Round reports InvalidCapacityClasses otherwise).
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	Hold metav1.Duration `json:"hold,omitempty"`

	// BurstPercent raises the class one step when more than this percent of the rounds in a
	// hold burst (some A_v > C_v, spec G5).
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=99
	BurstPercent int32 `json:"burstPercent,omitempty"`

	// LowerFakePercent lowers the class one step when no round in a hold burst and each had at
	// least this percent of fakes. It must be at least 100 × (1 − smaller ÷ larger) for every
	// step between two classes, so that the demand that allowed lowering fits the lower class.
	// +optional
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=99
	LowerFakePercent int32 `json:"lowerFakePercent,omitempty"`
}

// CapacityChange is the last move of the series' capacity class.
type CapacityChange struct {
	// Time the coordinator changed the class.
	Time metav1.Time `json:"time"`
	// FromPercent and ToPercent are the classes before and after.
	FromPercent int32 `json:"fromPercent"`
	ToPercent   int32 `json:"toPercent"`
	// Message has the figures that caused it.
	Message string `json:"message"`
}

// CapacityDraw says how C_v is drawn.
type CapacityDraw string

const (
	// CapacityRandom draws C_v = base + δ + U{0..jitter} each round, secret to the integrator.
	CapacityRandom CapacityDraw = "Random"
	// CapacityFixed uses C_v = base + δ every round.
	CapacityFixed CapacityDraw = "Fixed"
)

// ShufflerPolicy configures shuffler selection (spec O4) and the abort rule (G7).
type ShufflerPolicy struct {
	// Selection is the selection algorithm. Selection never depends on user data.
	// +optional
	// +kubebuilder:default=SmoothWeightedRoundRobin
	// +kubebuilder:validation:Enum=SmoothWeightedRoundRobin
	Selection string `json:"selection,omitempty"`

	// Selector narrows the Shufflers (same namespace) eligible for this series; empty selects
	// every Shuffler whose vendor is in the series.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// ResponseTimeout aborts the round when the shuffler has not returned its output in time.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	ResponseTimeout metav1.Duration `json:"responseTimeout"`
}

// DecryptWorkers bounds the integrator's decryption worker pool. The operator scales it from
// JetStream consumer lag and round durations; an HPA or KEDA can drive it instead through the
// Round's scale subresource, which writes replicas.
//
// +kubebuilder:validation:XValidation:rule="!has(self.min) || !has(self.max) || self.min <= self.max",message="decryptWorkers.min must not exceed decryptWorkers.max"
type DecryptWorkers struct {
	// Min is the fewest workers.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	Min int32 `json:"min,omitempty"`

	// Max is the most workers.
	// +optional
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	Max int32 `json:"max,omitempty"`

	// TargetLag is the JetStream consumer lag (pending shuffled messages) per worker the
	// autoscaler aims for.
	// +optional
	// +kubebuilder:default=10000
	// +kubebuilder:validation:Minimum=1
	TargetLag int64 `json:"targetLag,omitempty"`

	// Autoscaler says who sets replicas: Operator (the operator scales from consumer lag and
	// round time) or External (an HPA or KEDA ScaledObject targeting the Round's scale
	// subresource, or a person with kubectl scale).
	// +optional
	// +kubebuilder:default=Operator
	// +kubebuilder:validation:Enum=Operator;External
	Autoscaler string `json:"autoscaler,omitempty"`

	// Replicas is the worker count, read and written through the Round's scale subresource.
	// The operator initialises it to min and, with autoscaler Operator, updates it with every
	// scaling decision. Values outside [min, max] are clamped.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	Replicas *int32 `json:"replicas,omitempty"`

	// Resources replace a worker's default requests and limits (cpu 500m, memory 256Mi), so one
	// worker has a known capacity and scaling it is measurable.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// Autoscaler values.
const (
	AutoscalerOperator = "Operator"
	AutoscalerExternal = "External"
)

// Gateway configures the user API gateways.
type Gateway struct {
	// Replicas of the gateway; each keeps its own partial state, so any number can run.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	Replicas int32 `json:"replicas,omitempty"`

	// Tokens names the Secret key holding the users' access tokens as a JSON object
	// {"<token>": "<user>"} (default key tokens.json); the gateways read it at start. Without
	// it the gateways accept no user.
	// +optional
	Tokens *common.SecretFileReference `json:"tokens,omitempty"`
}

// Encoders configures the OKVS encoder partitions.
//
// +kubebuilder:validation:XValidation:rule="!has(self.min) || !has(self.max) || self.min <= self.max",message="encoders.min must not exceed encoders.max"
type Encoders struct {
	// Partitions is the number of encoder partitions; vendors are placed on them by rendezvous
	// hashing with bounded loads (largest expected C_v first, no partition above 1.25 × its share).
	// With autoscale on, the operator sets it within [min, max].
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	Partitions int32 `json:"partitions,omitempty"`

	// Autoscale lets the operator set partitions from the encoders' backlog (records not yet
	// delivered to their consumers) and round time, like the decrypt workers; a rescale hands
	// the moved vendors' tables over without an aborted round (docs/services.md).
	// +optional
	Autoscale bool `json:"autoscale,omitempty"`

	// Min is the fewest partitions when autoscaling.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	Min int32 `json:"min,omitempty"`

	// Max is the most partitions when autoscaling.
	// +optional
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	Max int32 `json:"max,omitempty"`

	// TargetLag is the undelivered work records (each a batch of up to 256 shuffled entries)
	// per partition the autoscaler aims for.
	// +optional
	// +kubebuilder:default=64
	// +kubebuilder:validation:Minimum=1
	TargetLag int64 `json:"targetLag,omitempty"`

	// Resources replace an encoder's default requests and limits (cpu 500m, memory 512Mi).
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// RoundStatus is the observed state of a round series.
type RoundStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Progressing, Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Vendors is the number of Vendors the selector matches.
	// +optional
	Vendors int32 `json:"vendors,omitempty"`

	// Shufflers is the number of eligible Shufflers with a positive weight.
	// +optional
	Shufflers int32 `json:"shufflers,omitempty"`

	// PaddedCapacity is Σ K_v over the selected vendors: the commands one round can carry.
	// +optional
	PaddedCapacity int64 `json:"paddedCapacity,omitempty"`

	// CurrentRound is the id t of the round in progress.
	// +optional
	CurrentRound *int64 `json:"currentRound,omitempty"`

	// CompletedRounds counts rounds that delivered.
	// +optional
	CompletedRounds int64 `json:"completedRounds,omitempty"`

	// AbortedRounds counts rounds aborted (shuffler timeout, G7).
	// +optional
	AbortedRounds int64 `json:"abortedRounds,omitempty"`

	// ResponseDeadline is when every vendor releases its response table after its commands went
	// to its devices (spec O12, G7: a fixed offset, never "all answered"); the services set it to
	// one period, so every round lasts at least the shuffler exchange plus this. A device that
	// answers later is dropped for that round (mohito_dropped_total{reason="device_response_late"}).
	// +optional
	ResponseDeadline *metav1.Duration `json:"responseDeadline,omitempty"`

	// DeviceAnswerAfter is when devices answer after a delivery, whatever they executed (G7):
	// a quarter of the response deadline. Commands must execute within it.
	// +optional
	DeviceAnswerAfter *metav1.Duration `json:"deviceAnswerAfter,omitempty"`

	// CapacityPercent is the series' capacity class in percent of each vendor's base (100
	// without capacity.classes, until the coordinator reports).
	// +optional
	CapacityPercent int32 `json:"capacityPercent,omitempty"`

	// LastCapacityChange is the last class change and its figures (Events CapacityRaised,
	// CapacityLowered).
	// +optional
	LastCapacityChange *CapacityChange `json:"lastCapacityChange,omitempty"`

	// LastRoundSeconds is the duration of the last completed round.
	// +optional
	LastRoundSeconds *resource.Quantity `json:"lastRoundSeconds,omitempty"`

	// LastRoundWork is the work in the last completed round: its time from close to release
	// less the vendors' fixed response deadline (the shuffler exchange, decryption, encoding,
	// the responder). Every round lasts at least period + response deadline whatever the load,
	// so this, not LastRoundSeconds, is what the autoscalers compare with the period.
	// +optional
	LastRoundWork *metav1.Duration `json:"lastRoundWork,omitempty"`

	// CommandsPerSecond is the real-command rate over recent rounds.
	// +optional
	CommandsPerSecond int64 `json:"commandsPerSecond,omitempty"`

	// FakeRatio is fakes ÷ all messages over recent rounds.
	// +optional
	FakeRatio *resource.Quantity `json:"fakeRatio,omitempty"`

	// Bursts counts rounds with a burst (some A_v > C_v); a security metric (spec G5).
	// +optional
	Bursts int64 `json:"bursts,omitempty"`

	// WorkerReplicas is the current number of decryption workers.
	// +optional
	WorkerReplicas int32 `json:"workerReplicas,omitempty"`

	// WorkerSelector is the label selector of the decryption worker pods (for the scale
	// subresource, so an HPA can read their metrics).
	// +optional
	WorkerSelector string `json:"workerSelector,omitempty"`

	// KeyEpochs are the integrator key epochs in the key Secret (keys.secretRef), ascending; the
	// highest becomes current once the workloads have activated it. Empty for Vault keys.
	// +optional
	// +listType=atomic
	KeyEpochs []int32 `json:"keyEpochs,omitempty"`

	// LastEncoderScaleTime is when the operator last changed the encoder partitions.
	// +optional
	LastEncoderScaleTime *metav1.Time `json:"lastEncoderScaleTime,omitempty"`

	// LastScaleTime is when the operator last changed the worker count.
	// +optional
	LastScaleTime *metav1.Time `json:"lastScaleTime,omitempty"`

	// StatusUpdated is when the coordinator last reported round figures.
	// +optional
	StatusUpdated *metav1.Time `json:"statusUpdated,omitempty"`
}

// Round is a series of fixed-period Mohito rounds.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.decryptWorkers.replicas,statuspath=.status.workerReplicas,selectorpath=.status.workerSelector
// +kubebuilder:resource:categories=obscura;mohito
// +kubebuilder:printcolumn:name="Period",type=string,JSONPath=`.spec.period`
// +kubebuilder:printcolumn:name="Q",type=integer,JSONPath=`.spec.commandsPerUser`
// +kubebuilder:printcolumn:name="Vendors",type=integer,JSONPath=`.status.vendors`
// +kubebuilder:printcolumn:name="Shufflers",type=integer,JSONPath=`.status.shufflers`
// +kubebuilder:printcolumn:name="Round",type=integer,JSONPath=`.status.currentRound`
// +kubebuilder:printcolumn:name="Last(s)",type=string,JSONPath=`.status.lastRoundSeconds`,description="seconds from open to release of the last completed round: at least Period plus the response deadline"
// +kubebuilder:printcolumn:name="Work",type=string,JSONPath=`.status.lastRoundWork`,priority=1,description="seconds of work in the last completed round (close to release less the response deadline); the autoscalers keep it under 80 % of Period"
// +kubebuilder:printcolumn:name="Workers",type=integer,JSONPath=`.status.workerReplicas`
// +kubebuilder:printcolumn:name="Encoders",type=integer,JSONPath=`.spec.encoders.partitions`,priority=1
// +kubebuilder:printcolumn:name="Deadline",type=string,JSONPath=`.status.responseDeadline`,priority=1
// +kubebuilder:printcolumn:name="Capacity%",type=integer,JSONPath=`.status.capacityPercent`,priority=1
// +kubebuilder:printcolumn:name="Completed",type=integer,JSONPath=`.status.completedRounds`,priority=1
// +kubebuilder:printcolumn:name="Aborted",type=integer,JSONPath=`.status.abortedRounds`,priority=1
// +kubebuilder:printcolumn:name="Bursts",type=integer,JSONPath=`.status.bursts`,priority=1,description="rounds with a burst (S > 0), a security signal (G5)"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Round struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   RoundSpec   `json:"spec"`
	Status RoundStatus `json:"status,omitempty"`
}

// RoundList is a list of Rounds.
//
// +kubebuilder:object:root=true
type RoundList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Round `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Round{}, &RoundList{})
}
