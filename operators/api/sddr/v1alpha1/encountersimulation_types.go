package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Scenarios of the simulator (services/pkg/sddr/sim).
const (
	ScenarioCity   = "city"
	ScenarioCrowd  = "crowd"
	ScenarioGroups = "groups"
)

// Condition types of an EncounterSimulation: it runs once, like the Job it owns.
const (
	// SimulationRunning: the shards' Job runs (or waits for the operator's image).
	SimulationRunning = "Running"
	// SimulationComplete: every shard's result was read and merged into status.results.
	SimulationComplete = "Complete"
	// SimulationFailed: the spec is refused, a shard failed, or its result is not valid.
	SimulationFailed = "Failed"
)

// EncounterSimulationSpec is one run of the SDDR encounter simulator (`sddr simulate`,
// shared/specs/sddr.md §5.5; docs/sddr.md "Simulator"): devices with their mobility,
// discovery and recognition, and the energy model of Equation 1. The operator runs it as an
// Indexed Job of spec.shards pods, devices partitioned by shard, encounters that cross shards
// exchanged over the platform's NATS in the simulation's own account. A run is a function of
// its spec (the seed included): the spec cannot change once created.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="an EncounterSimulation's spec is immutable: create another to run again"
// +kubebuilder:validation:XValidation:rule="self.shards <= self.devices",message="shards must not exceed devices"
// +kubebuilder:validation:XValidation:rule="self.scenario == 'groups' || !has(self.groupSize)",message="groupSize applies to the groups scenario only"
// +kubebuilder:validation:XValidation:rule="!has(self.epoch) || !has(self.discoveryInterval) || (duration(self.discoveryInterval) <= duration(self.epoch) && duration(self.epoch).getMilliseconds() <= 255 * duration(self.discoveryInterval).getMilliseconds())",message="epoch must hold 1 to 255 discovery intervals (the beacon counter is one byte)"
// +kubebuilder:validation:XValidation:rule="!has(self.epoch) || !has(self.epochJitter) || duration(self.epochJitter) <= duration(self.epoch)",message="epochJitter must not exceed the epoch"
type EncounterSimulationSpec struct {
	// Scenario is the mobility model (`--scenario`): city (a city's day of homes, work and
	// places), crowd (the paper's worst case, 255 new devices per inquiry) or groups (fixed
	// groups of groupSize devices that always meet).
	// +optional
	// +kubebuilder:default=city
	// +kubebuilder:validation:Enum=city;crowd;groups
	Scenario string `json:"scenario,omitempty"`

	// Devices in the whole simulation, all shards together (`--devices`).
	// +optional
	// +kubebuilder:default=1000
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=16777216
	Devices int32 `json:"devices,omitempty"`

	// GroupSize is the devices per group of the groups scenario (`--group-size`, default 5).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	GroupSize *int32 `json:"groupSize,omitempty"`

	// Friends per device (`--friends`), at most the Bloom filter's advertised capacity (256).
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=256
	Friends *int32 `json:"friends,omitempty"`

	// Duration is the simulated time (`--hours`), in whole seconds, from 1m to 8784h.
	// +optional
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('8784h')",message="duration must be within [1m, 8784h]"
	Duration *metav1.Duration `json:"duration,omitempty"`

	// DiscoveryInterval is each device's discovery interval (`--interval`), in whole
	// milliseconds from 23s to 15m (an epoch): an inquiry and its jitter fit twice in a step.
	// +optional
	// +kubebuilder:default="60s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('23s') && duration(self) <= duration('15m')",message="discoveryInterval must be within [23s, 15m]"
	DiscoveryInterval *metav1.Duration `json:"discoveryInterval,omitempty"`

	// Epoch is every device's epoch length (`--epoch`): for an epoch a device keeps one DH
	// key, radio address and beacon counter, then rotates them (spec §3.3; the paper's 15
	// minutes). Whole seconds from 1m to 24h, holding 1 to 255 discovery intervals. A friend
	// is recognised after 3 or more beacons of one key, so an epoch shorter than that many
	// intervals recognises nobody.
	// +optional
	// +kubebuilder:default="15m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('24h') && duration(self).getMilliseconds() % 1000 == 0",message="epoch must be within [1m, 24h], in whole seconds"
	Epoch *metav1.Duration `json:"epoch,omitempty"`

	// EpochJitter is the uniform extra length drawn for each epoch (`--epoch-jitter`, spec
	// §7 item 10: rotations of one device are not periodic), whole seconds from 0s (none) to
	// the epoch.
	// +optional
	// +kubebuilder:default="60s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('24h') && duration(self).getMilliseconds() % 1000 == 0",message="epochJitter must be within [0s, 24h], in whole seconds"
	EpochJitter *metav1.Duration `json:"epochJitter,omitempty"`

	// Revocation is who revokes a friend during the run and when.
	// +optional
	// +kubebuilder:default={}
	Revocation *SimulationRevocation `json:"revocation,omitempty"`

	// DetectionProbability is the probability that a device in range answers an inquiry
	// (`--p-det`), a decimal in (0, 1].
	// +optional
	// +kubebuilder:default="0.95"
	// +kubebuilder:validation:MaxLength=10
	// +kubebuilder:validation:Pattern=`^(0\.[0-9]*[1-9][0-9]*|1|1\.0+)$`
	DetectionProbability string `json:"detectionProbability,omitempty"`

	// Seed of the run (`--seed`): the same spec gives the same counts whatever the shards.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	Seed *int64 `json:"seed,omitempty"`

	// Shards is the pods of the Indexed Job (completions = parallelism = shards): each
	// simulates devices [i·devices/shards, (i+1)·devices/shards) and exchanges the adverts
	// that cross shards over NATS.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	Shards int32 `json:"shards,omitempty"`

	// ReadyTimeout bounds how long a shard waits for the others to connect (`--ready-timeout`):
	// the pods of an Indexed Job may start minutes apart.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('24h')",message="readyTimeout must be within [10s, 24h]"
	ReadyTimeout *metav1.Duration `json:"readyTimeout,omitempty"`

	// Timeout bounds the whole run (the Job's activeDeadlineSeconds): a shard lost in the
	// middle of a sharded run leaves the others waiting for its adverts, and the deadline
	// fails the simulation instead.
	// +optional
	// +kubebuilder:default="6h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('168h')",message="timeout must be within [1m, 168h]"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// Resources replace each shard container's defaults (1 CPU request, 256Mi memory).
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// Energy is the coefficients of the energy model (Equation 1) the shards count battery
	// use with; each unset one is the paper's calibration, which reproduces its Table 3.
	// +optional
	// +kubebuilder:default={}
	Energy *EnergyModel `json:"energy,omitempty"`
}

// SimulationRevocation: a share of the devices each revoke one friend at once (RevokeNow:
// stop advertising its link value and rotate the epoch), at a fraction of the run plus up to
// one discovery interval; the results count the revoked friend's later encounters and
// recognitions (revokedEncounters, revokedRecognitions).
type SimulationRevocation struct {
	// Fraction of the devices that revoke one friend (`--revoke-fraction`), a decimal in
	// [0, 1]; 0: nobody.
	// +optional
	// +kubebuilder:default="0.1"
	// +kubebuilder:validation:MaxLength=10
	// +kubebuilder:validation:Pattern=`^(0|0\.[0-9]+|1|1\.0+)$`
	Fraction string `json:"fraction,omitempty"`

	// At is when, as a fraction of the run's duration (`--revoke-at`), a decimal in (0, 1).
	// +optional
	// +kubebuilder:default="0.5"
	// +kubebuilder:validation:MaxLength=10
	// +kubebuilder:validation:Pattern=`^0\.[0-9]*[1-9][0-9]*$`
	At string `json:"at,omitempty"`
}

// EnergyModel is the coefficients of Equation 1 (shared/specs/sddr.md §5.5, docs/sddr.md
// "Energy model"): E = E_BT + E_EC + E_D(d, i) per device-day. Per simulated second a device
// pays idleBluetoothJoulesPerDay/86400 and an epoch change every spec.epoch; per inquiry
// discoveryMillijoules; per response it processes (a device in range) recognitionMillijoules;
// per inquiry of another device it answers answerMillijoules. batteryJoules turns the joules
// into battery %/day. Each is a positive decimal string (at most 7 integer and 6 fractional
// digits) passed to every shard as the `sddr simulate` flag named below; the defaults are the
// spec's fit of the paper's Galaxy Nexus measurements (Tables 2 and 3).
type EnergyModel struct {
	// IdleBluetoothJoulesPerDay is idle with Bluetooth discoverable, J per device-day
	// (`--idle-bt-joules-per-day`; Table 3: 188), within (0, 100000].
	// +optional
	// +kubebuilder:default="188"
	// +kubebuilder:validation:MaxLength=14
	// +kubebuilder:validation:Pattern=`^[0-9]{1,7}(\.[0-9]{1,6})?$`
	// +kubebuilder:validation:XValidation:rule="double(self) > 0.0 && double(self) <= 100000.0",message="idleBluetoothJoulesPerDay must be within (0, 100000] J/day"
	IdleBluetoothJoulesPerDay string `json:"idleBluetoothJoulesPerDay,omitempty"`

	// EpochChangeMillijoules is one epoch change, new key and address, in mJ
	// (`--epoch-change-mj`; Table 2: 568), within (0, 100000].
	// +optional
	// +kubebuilder:default="568"
	// +kubebuilder:validation:MaxLength=14
	// +kubebuilder:validation:Pattern=`^[0-9]{1,7}(\.[0-9]{1,6})?$`
	// +kubebuilder:validation:XValidation:rule="double(self) > 0.0 && double(self) <= 100000.0",message="epochChangeMillijoules must be within (0, 100000] mJ"
	EpochChangeMillijoules string `json:"epochChangeMillijoules,omitempty"`

	// DiscoveryMillijoules is one inquiry with no device in range, in mJ (`--discovery-mj`;
	// Table 2: 1363), within (0, 100000].
	// +optional
	// +kubebuilder:default="1363"
	// +kubebuilder:validation:MaxLength=14
	// +kubebuilder:validation:Pattern=`^[0-9]{1,7}(\.[0-9]{1,6})?$`
	// +kubebuilder:validation:XValidation:rule="double(self) > 0.0 && double(self) <= 100000.0",message="discoveryMillijoules must be within (0, 100000] mJ"
	DiscoveryMillijoules string `json:"discoveryMillijoules,omitempty"`

	// RecognitionMillijoules is processing one response of an inquiry (a device in range:
	// key derivation and Bloom recognition), in mJ (`--recognition-mj`; Table 2:
	// (1464 − 1363)/5 = 20.2), within (0, 100000].
	// +optional
	// +kubebuilder:default="20.2"
	// +kubebuilder:validation:MaxLength=14
	// +kubebuilder:validation:Pattern=`^[0-9]{1,7}(\.[0-9]{1,6})?$`
	// +kubebuilder:validation:XValidation:rule="double(self) > 0.0 && double(self) <= 100000.0",message="recognitionMillijoules must be within (0, 100000] mJ"
	RecognitionMillijoules string `json:"recognitionMillijoules,omitempty"`

	// AnswerMillijoules is answering one inquiry of another device, in mJ (`--answer-mj`;
	// 8.5, fitted to the 255-device worst case of Fig. 4), within (0, 100000].
	// +optional
	// +kubebuilder:default="8.5"
	// +kubebuilder:validation:MaxLength=14
	// +kubebuilder:validation:Pattern=`^[0-9]{1,7}(\.[0-9]{1,6})?$`
	// +kubebuilder:validation:XValidation:rule="double(self) > 0.0 && double(self) <= 100000.0",message="answerMillijoules must be within (0, 100000] mJ"
	AnswerMillijoules string `json:"answerMillijoules,omitempty"`

	// BatteryJoules is a full battery in J (`--battery-joules`; Table 3: 6.48 Wh = 23328),
	// within [1, 1000000].
	// +optional
	// +kubebuilder:default="23328"
	// +kubebuilder:validation:MaxLength=14
	// +kubebuilder:validation:Pattern=`^[0-9]{1,7}(\.[0-9]{1,6})?$`
	// +kubebuilder:validation:XValidation:rule="double(self) >= 1.0 && double(self) <= 1000000.0",message="batteryJoules must be within [1, 1000000] J"
	BatteryJoules string `json:"batteryJoules,omitempty"`
}

// EncounterSimulationStatus is what the run observed.
type EncounterSimulationStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Running, Complete, Failed.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Job is the Indexed Job running the shards.
	// +optional
	Job string `json:"job,omitempty"`

	// ResultsConfigMap holds each shard's result (shard-<i>.json, the termination message it
	// wrote) and the merged one (result.json), owned by the simulation.
	// +optional
	ResultsConfigMap string `json:"resultsConfigMap,omitempty"`

	// Shards is spec.shards; ShardsDone counts the shards whose result was read.
	// +optional
	Shards int32 `json:"shards,omitempty"`
	// +optional
	ShardsDone int32 `json:"shardsDone,omitempty"`

	// StartTime is when the Job was created; CompletionTime when the last result was merged.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// Results merge every shard's (services/pkg/sddr/contract.Merge), once all are read.
	// +optional
	Results *SimulationResults `json:"results,omitempty"`
}

// SimulationResults are the run's figures, summed over the shards (the maxima and the wall
// time the slowest shard's). Fractional figures are decimal strings.
type SimulationResults struct {
	Devices int64 `json:"devices"`
	// DeviceHours is simulated time summed over the devices.
	DeviceHours string `json:"deviceHours"`
	// Inquiries that had neighbours in range; Responses (beacons) processed.
	Inquiries int64 `json:"inquiries"`
	Responses int64 `json:"responses"`
	// Encounters are key derivations: (local epoch, remote key) pairs.
	Encounters int64 `json:"encounters"`
	// FriendEncounters met a friend often enough to recognise it; Recognitions of those
	// (Missed = FriendEncounters − Recognitions, false negatives).
	FriendEncounters int64 `json:"friendEncounters"`
	Recognitions     int64 `json:"recognitions"`
	Missed           int64 `json:"missed"`
	// FalseRecognitions: links reported for devices that are not friends (Bloom false
	// positives), out of StrangerKeys candidates.
	FalseRecognitions int64 `json:"falseRecognitions"`
	StrangerKeys      int64 `json:"strangerKeys"`
	// RevokedRecognitions of RevokedEncounters: friends recognised after they revoked.
	RevokedEncounters   int64 `json:"revokedEncounters"`
	RevokedRecognitions int64 `json:"revokedRecognitions"`
	// CrossAdverts and CrossBytes went from one shard to another over NATS.
	CrossAdverts int64 `json:"crossAdverts"`
	CrossBytes   int64 `json:"crossBytes"`
	// Energy is Equation 1 per device class.
	// +optional
	Energy []SimulationEnergy `json:"energy,omitempty"`
	// EpochKeys counts the epochs the devices started (key and address rotations).
	// +optional
	EpochKeys int64 `json:"epochKeys,omitempty"`
	// Protocol is the epoch and revocation settings the shards ran with (spec.epoch,
	// spec.epochJitter, spec.revocation, every shard's checked against them).
	// +optional
	Protocol *SimulationProtocol `json:"protocol,omitempty"`
	// EnergyModel is the coefficients the shards counted Energy with (spec.energy, every
	// shard's checked against it).
	// +optional
	EnergyModel *SimulationEnergyModel `json:"energyModel,omitempty"`
	// CPUSeconds add over the shards; WallSeconds is the slowest shard's.
	CPUSeconds  string `json:"cpuSeconds"`
	WallSeconds string `json:"wallSeconds"`
	// DeviceHoursPerCPUSecond is the simulator's throughput.
	DeviceHoursPerCPUSecond string `json:"deviceHoursPerCPUSecond"`
}

// SimulationEnergy is one device class's energy account.
type SimulationEnergy struct {
	Class   string `json:"class"`
	Devices int64  `json:"devices"`
	Joules  string `json:"joules"`
	// BatteryPercentPerDay is the share of the battery a device of the class spends a day.
	BatteryPercentPerDay string `json:"batteryPercentPerDay"`
}

// SimulationProtocol is the protocol settings a run used.
type SimulationProtocol struct {
	Epoch          string `json:"epoch"`
	EpochJitter    string `json:"epochJitter"`
	RevokeFraction string `json:"revokeFraction"`
	RevokeAt       string `json:"revokeAt"`
}

// SimulationEnergyModel is the coefficients of Equation 1 a run used, as decimal strings in
// the units of spec.energy.
type SimulationEnergyModel struct {
	IdleBluetoothJoulesPerDay string `json:"idleBluetoothJoulesPerDay"`
	EpochChangeMillijoules    string `json:"epochChangeMillijoules"`
	DiscoveryMillijoules      string `json:"discoveryMillijoules"`
	RecognitionMillijoules    string `json:"recognitionMillijoules"`
	AnswerMillijoules         string `json:"answerMillijoules"`
	BatteryJoules             string `json:"batteryJoules"`
}

// EncounterSimulation runs the SDDR encounter simulator as an Indexed Job across pods and
// writes its results to status and a ConfigMap.
//
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 40 && !self.metadata.name.contains('.')",message="an EncounterSimulation name is at most 40 characters without dots: it becomes part of object names"
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=obscura;sddr,shortName=encsim
// +kubebuilder:printcolumn:name="Scenario",type=string,JSONPath=`.spec.scenario`
// +kubebuilder:printcolumn:name="Devices",type=integer,JSONPath=`.spec.devices`
// +kubebuilder:printcolumn:name="Shards",type=integer,JSONPath=`.spec.shards`
// +kubebuilder:printcolumn:name="Epoch",type=string,JSONPath=`.spec.epoch`,priority=1
// +kubebuilder:printcolumn:name="Done",type=integer,JSONPath=`.status.shardsDone`
// +kubebuilder:printcolumn:name="Complete",type=string,JSONPath=`.status.conditions[?(@.type=="Complete")].status`
// +kubebuilder:printcolumn:name="Encounters",type=integer,JSONPath=`.status.results.encounters`,priority=1
// +kubebuilder:printcolumn:name="Recognitions",type=integer,JSONPath=`.status.results.recognitions`,priority=1
// +kubebuilder:printcolumn:name="DevH/CPUs",type=string,JSONPath=`.status.results.deviceHoursPerCPUSecond`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Failed")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EncounterSimulation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   EncounterSimulationSpec   `json:"spec"`
	Status EncounterSimulationStatus `json:"status,omitempty"`
}

// EncounterSimulationList is a list of EncounterSimulations.
//
// +kubebuilder:object:root=true
type EncounterSimulationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EncounterSimulation `json:"items"`
}

func init() {
	SchemeBuilder.Register(&EncounterSimulation{}, &EncounterSimulationList{})
}
