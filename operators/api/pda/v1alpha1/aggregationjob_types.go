package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/obscura-iot/obscura/operators/api/common"
)

// AggregationJobSpec describes one private threshold aggregation: participants submit blinded
// keys (and values) through the proxy; the database reveals only keys reported by at least
// threshold distinct participants (shared/specs/pda.md §3.9).
//
// +kubebuilder:validation:XValidation:rule="size(self.participants) >= self.threshold",message="threshold exceeds the number of participants: no key could ever be revealed"
type AggregationJobSpec struct {
	// Key says what a key is and how it is canonicalised before blinding (spec U6). Identical
	// keys only aggregate if every participant canonicalises them the same way.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="key is immutable: changing it would split identical keys across two encodings"
	Key KeySpec `json:"key"`

	// Threshold is τ: a key is revealed only when at least τ distinct participants reported it.
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="threshold is immutable once the job exists"
	Threshold int32 `json:"threshold"`

	// Values is the value domain D; omit it to count keys only (v ≡ 1). Each submission proves
	// in zero knowledge that its value is in D (CDS OR-proof).
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="values are immutable once the job exists"
	Values *ValueDomain `json:"values,omitempty"`

	// Group is the prime-order group of the EOPRF and ElGamal layers.
	// +optional
	// +kubebuilder:default=Ristretto255
	// +kubebuilder:validation:Enum=Ristretto255;P256
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="group is immutable once the job exists"
	Group Group `json:"group,omitempty"`

	// Window is the collection window; all of it is mixed as one permutation.
	Window Window `json:"window"`

	// Mixing is the proxy's flush policy (spec §4.4).
	// +optional
	// +kubebuilder:default={}
	Mixing Mixing `json:"mixing,omitempty"`

	// Participants allowed to submit, identified by their mTLS identity.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=2
	// +kubebuilder:validation:MaxItems=1000
	Participants []Participant `json:"participants"`

	// Shards is the number of database shards on the consistent-hash ring; changing it bumps the
	// ring version and moves about 1/N of the key space.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	Shards int32 `json:"shards,omitempty"`

	// ShardAutoscale lets the operator set shards from the database shards' backlog. Leave it
	// unset when an HPA or KEDA drives shards through the scale subresource.
	// +optional
	ShardAutoscale *ShardAutoscale `json:"shardAutoscale,omitempty"`

	// ShardResources replace a database shard's default requests and limits (cpu 500m, memory
	// 256Mi), so one shard has a known capacity and scaling the shards is measurable.
	// +optional
	ShardResources *corev1.ResourceRequirements `json:"shardResources,omitempty"`

	// Proxy is the proxy's trust domain.
	Proxy TrustDomain `json:"proxy"`

	// Database is the database's trust domain.
	Database TrustDomain `json:"database"`

	// ResultSink says where revealed keys are published.
	ResultSink ResultSink `json:"resultSink"`
}

// KeyType is the type of an aggregation key.
// +kubebuilder:validation:Enum=IP;IPv4;IPv6;Domain;URL;Opaque
type KeyType string

const (
	// KeyIP accepts IPv4 and IPv6; IPv4-mapped IPv6 canonicalises to IPv4.
	KeyIP KeyType = "IP"
	// KeyIPv4 accepts only IPv4 (4 bytes).
	KeyIPv4 KeyType = "IPv4"
	// KeyIPv6 accepts only IPv6 (16 bytes).
	KeyIPv6 KeyType = "IPv6"
	// KeyDomain is a domain name, lower-cased A-label.
	KeyDomain KeyType = "Domain"
	// KeyURL is a URL normalised per RFC 3986 §6.
	KeyURL KeyType = "URL"
	// KeyOpaque is bytes taken as they are.
	KeyOpaque KeyType = "Opaque"
)

// KeySpec types and bounds the keys.
//
// +kubebuilder:validation:XValidation:rule="!(self.type in ['IP', 'IPv4', 'IPv6']) || !has(self.maxLength)",message="key.maxLength applies only to Domain, URL and Opaque keys: IP keys have a fixed length"
type KeySpec struct {
	// Type of the keys.
	Type KeyType `json:"type"`

	// MaxLength bounds a canonical key in bytes. The encrypted reveal layer carries at most
	// n_chunks × 30 − 2 = 238 bytes (spec §5, U7).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=238
	MaxLength *int32 `json:"maxLength,omitempty"`
}

// ValueDomain is the explicit list of allowed values (at most 16, spec §5).
type ValueDomain struct {
	// Items are the allowed values.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=64
	Items []string `json:"items"`
}

// Group names the prime-order group.
type Group string

const (
	// GroupRistretto255 is ristretto255 (RFC 9496) with hash-to-group per RFC 9380 (default).
	GroupRistretto255 Group = "Ristretto255"
	// GroupP256 is NIST P-256 with RFC 9380 hash-to-curve.
	GroupP256 Group = "P256"
)

// Window is the collection window: start (default: when the job is created) and either an end or
// a duration.
//
// +kubebuilder:validation:XValidation:rule="has(self.end) != has(self.duration)",message="set exactly one of window.end or window.duration"
// +kubebuilder:validation:XValidation:rule="!has(self.start) || !has(self.end) || timestamp(self.end) > timestamp(self.start)",message="window.end must be after window.start"
type Window struct {
	// Start of collection; unset means when the job is first reconciled.
	// +optional
	Start *metav1.Time `json:"start,omitempty"`

	// End of collection.
	// +optional
	End *metav1.Time `json:"end,omitempty"`

	// Duration of collection from Start.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('8760h')",message="window.duration must be between 1s and one year"
	Duration *metav1.Duration `json:"duration,omitempty"`

	// Grace accepts submissions this long after the end before the window is sealed.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	Grace metav1.Duration `json:"grace,omitempty"`
}

// Mixing is the proxy's flush policy.
type Mixing struct {
	// Mode: Window shuffles all of a window's items as one permutation, so no batch reveals which
	// items arrived together (spec U10's default). The spec's Streaming mode (flush every Q items
	// from at least K_min participants, the paper's prototype) leaks batch co-membership and is
	// not served by the services, so the API does not offer it.
	// +optional
	// +kubebuilder:default=Window
	// +kubebuilder:validation:Enum=Window
	Mode string `json:"mode,omitempty"`
}

// ShardAutoscale is the shard count's policy: shards follow the sub-batch items pending on the
// shards' consumers (targetLag per shard), up after a short cooldown, down one shard after a long
// one, within [min, max]. Each change is a new ring version, taken up at the next window routed,
// so no submission in flight moves or counts twice.
//
// +kubebuilder:validation:XValidation:rule="!has(self.min) || !has(self.max) || self.min <= self.max",message="shardAutoscale.min must not exceed shardAutoscale.max"
type ShardAutoscale struct {
	// Min is the fewest shards.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	Min int32 `json:"min,omitempty"`

	// Max is the most shards.
	// +optional
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	Max int32 `json:"max,omitempty"`

	// TargetLag is the sub-batch messages pending per shard the autoscaler aims for.
	// +optional
	// +kubebuilder:default=1000
	// +kubebuilder:validation:Minimum=1
	TargetLag int64 `json:"targetLag,omitempty"`
}

// Participant is one party allowed to submit.
type Participant struct {
	// Name is the participant's handle within this job.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// Identity is the participant's mTLS client identity (certificate subject CN or SPIFFE URI).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Identity string `json:"identity"`

	// Quota is the most items this participant may submit per window.
	// +optional
	// +kubebuilder:default=100000
	// +kubebuilder:validation:Minimum=1
	Quota int64 `json:"quota,omitempty"`
}

// TrustDomain is where one non-colluding party runs and where its keys are.
type TrustDomain struct {
	// Namespace the party's workloads run in.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`

	// Keys references the party's long-term key material, read in its own namespace: the key
	// file `pda keygen` writes (proxy: s, a_PRX, K_dedup, K_mix; database: a_DB).
	Keys common.KeyReference `json:"keys"`

	// PublicKey is the party's public key as `pda keygen` prints it (hex): h_PRX for the proxy,
	// h_DB for the database. Both are public parameters every role of both domains needs; the
	// operator never derives them from the private keys, which it does not read.
	// +optional
	// +kubebuilder:validation:Pattern=`^([0-9a-f]{2})+$`
	// +kubebuilder:validation:MaxLength=266
	PublicKey string `json:"publicKey,omitempty"`

	// Replicas of the domain's stateless roles: the proxy's ingress and oracle, or the
	// database's front-ends.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	Replicas int32 `json:"replicas,omitempty"`

	// Redis is the party's own Redis. For the proxy, host:port of the Redis holding sessions,
	// quotas and rates (default redis:6379 in the proxy namespace). For the database, the
	// address of each shard's own Redis, where {ordinal} stands for the shard's ordinal and
	// {shard} for its id (default redis-{ordinal}.redis:6379: one Redis StatefulSet pod per
	// shard in the database namespace).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9{}.-]+:[0-9]{1,5}$`
	Redis string `json:"redis,omitempty"`
}

// ResultSink says where revealed keys go.
//
// +kubebuilder:validation:XValidation:rule="has(self.configMap) || has(self.secret) || has(self.natsSubject)",message="resultSink needs at least one of configMap, secret or natsSubject"
// +kubebuilder:validation:XValidation:rule="!(has(self.configMap) && has(self.secret))",message="resultSink takes configMap or secret, not both: use secret when the revealed keys are sensitive"
type ResultSink struct {
	// ConfigMap (in the job's namespace) the operator writes revealed keys to.
	// +optional
	ConfigMap *common.LocalObjectReference `json:"configMap,omitempty"`

	// Secret (in the job's namespace) the operator writes revealed keys to.
	// +optional
	Secret *common.LocalObjectReference `json:"secret,omitempty"`

	// NATSSubject the database publishes revealed keys on.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`
	// +kubebuilder:validation:MaxLength=255
	NATSSubject string `json:"natsSubject,omitempty"`
}

// Phase is the lifecycle phase of an aggregation window.
// +kubebuilder:validation:Enum=Pending;Collecting;Mixing;Aggregating;Revealing;Complete;Failed
type Phase string

// Phases, in order.
const (
	PhasePending     Phase = "Pending"
	PhaseCollecting  Phase = "Collecting"
	PhaseMixing      Phase = "Mixing"
	PhaseAggregating Phase = "Aggregating"
	PhaseRevealing   Phase = "Revealing"
	PhaseComplete    Phase = "Complete"
	PhaseFailed      Phase = "Failed"
)

// AggregationJobStatus is the observed state of an AggregationJob.
type AggregationJobStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Progressing, Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Phase of the window.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// WindowStart and WindowEnd are the resolved window bounds.
	// +optional
	WindowStart *metav1.Time `json:"windowStart,omitempty"`
	// +optional
	WindowEnd *metav1.Time `json:"windowEnd,omitempty"`

	// Submissions counts accepted items.
	// +optional
	Submissions int64 `json:"submissions,omitempty"`

	// RevealedKeys counts keys that met the threshold.
	// +optional
	RevealedKeys int64 `json:"revealedKeys,omitempty"`

	// RingVersion is the version of the shard ring in force: the ring pinned for the window
	// once the database routes it, the current ring before.
	// +optional
	RingVersion int64 `json:"ringVersion,omitempty"`

	// Window is the services' id of the job's window (start in Unix seconds ÷ window length):
	// the key of the window in the services' KV buckets.
	// +optional
	Window *int64 `json:"window,omitempty"`

	// RingShards is the number of shards on the ring in force (the scale subresource's
	// replicas).
	// +optional
	RingShards int32 `json:"ringShards,omitempty"`

	// ShardSelector selects the shard pods (the scale subresource's selector, so an HPA can
	// read their metrics).
	// +optional
	ShardSelector string `json:"shardSelector,omitempty"`

	// LastShardScaleTime is when the operator's shard autoscaler last changed spec.shards.
	// +optional
	LastShardScaleTime *metav1.Time `json:"lastShardScaleTime,omitempty"`

	// ResultsPublished is when the revealed keys were written to the result sink.
	// +optional
	ResultsPublished *metav1.Time `json:"resultsPublished,omitempty"`
}

// AggregationJob is one private threshold aggregation window.
//
// The name becomes part of shard ids (<name>-db-shard-<i>), which are NATS subject tokens.
//
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 40 && !self.metadata.name.contains('.')",message="an AggregationJob name is at most 40 characters without dots: it becomes part of the shard ids"
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.shards,statuspath=.status.ringShards,selectorpath=.status.shardSelector
// +kubebuilder:resource:categories=obscura;pda,shortName=aggjob
// +kubebuilder:printcolumn:name="Key",type=string,JSONPath=`.spec.key.type`
// +kubebuilder:printcolumn:name="Tau",type=integer,JSONPath=`.spec.threshold`
// +kubebuilder:printcolumn:name="Shards",type=integer,JSONPath=`.spec.shards`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Window",type=integer,JSONPath=`.status.window`
// +kubebuilder:printcolumn:name="Submissions",type=integer,JSONPath=`.status.submissions`
// +kubebuilder:printcolumn:name="Revealed",type=integer,JSONPath=`.status.revealedKeys`
// +kubebuilder:printcolumn:name="Window end",type=date,JSONPath=`.status.windowEnd`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AggregationJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   AggregationJobSpec   `json:"spec"`
	Status AggregationJobStatus `json:"status,omitempty"`
}

// AggregationJobList is a list of AggregationJobs.
//
// +kubebuilder:object:root=true
type AggregationJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AggregationJob `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AggregationJob{}, &AggregationJobList{})
}
