package sddr

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	sddrv1 "github.com/obscura-iot/obscura/operators/api/sddr/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/services/pkg/sddr/contract"
)

// How the operator runs `sddr simulate` (services/cmd/sddr/simulate.go): flags through
// OBSCURA_<FLAG> (specs.Env). The shard index is JOB_COMPLETION_INDEX, which the Indexed Job
// sets and `sddr simulate` reads; the result is the container's termination message.
const (
	RoleSimulate = "simulate"

	FlagDevices      = "devices"
	FlagHours        = "hours"
	FlagSeed         = "seed"
	FlagInterval     = "interval"
	FlagFriends      = "friends"
	FlagShards       = "shards"
	FlagScenario     = "scenario"
	FlagGroupSize    = "group-size"
	FlagPDet         = "p-det"
	FlagEpoch        = "epoch"
	FlagEpochJitter  = "epoch-jitter"
	FlagRevokeFrac   = "revoke-fraction"
	FlagRevokeAt     = "revoke-at"
	FlagRunID        = "run-id"
	FlagReadyTimeout = "ready-timeout"
	FlagResultFile   = "result-file"

	// TerminationLog is where the shard writes its result (contract.Result, < 4 KiB).
	TerminationLog = "/dev/termination-log"

	// LabelSimulation ties an object to its EncounterSimulation.
	LabelSimulation = "sddr.obscura.dev/simulation"

	// ShardKeyPrefix + index + ".json" is a shard's result in the results ConfigMap;
	// ResultKey the merged one.
	ShardKeyPrefix = "shard-"
	ResultKey      = "result.json"

	// BackoffPerShard is how often a shard's pod may fail (a shard started before the NATS
	// server loaded the simulation's account) before the Job fails.
	BackoffPerShard = 2
)

// SimulationPlatform says what is missing for a simulation's workloads to be built.
func (p Platform) SimulationPlatform(s *sddrv1.EncounterSimulation) error {
	if p.Image == "" {
		return errors.New("the operator needs --sddr-image to run EncounterSimulations")
	}
	if Shards(s) > 1 && p.NATSURL == "" {
		return errors.New("a simulation of more than one shard needs the operator's --nats-url: the shards exchange adverts over NATS")
	}
	return nil
}

// SimulationSettings are a simulation's flags with the API's defaults filled in.
type SimulationSettings struct {
	Scenario                    string
	Devices, GroupSize, Friends int32
	Shards                      int32
	Duration, Interval          time.Duration
	ReadyTimeout, Timeout       time.Duration
	PDet                        string
	Seed                        uint64
	// Epoch and EpochJitter are the devices' epoch (spec.epoch, spec.epochJitter; 0 jitter:
	// none); RevokeFraction and RevokeAt spec.revocation's decimals.
	Epoch, EpochJitter       time.Duration
	RevokeFraction, RevokeAt string
	// EnergyText is spec.energy's coefficients in contract.EnergyFields' order, each the
	// spec's decimal string (the paper's value when unset), passed verbatim as the flag;
	// Energy is the same parsed, what a shard's result must report (0 where unparsable).
	EnergyText []string
	Energy     contract.Energy
}

// energyFields maps contract.EnergyFields' field names to spec.energy's values.
func energyFields(e *sddrv1.EnergyModel) map[string]string {
	if e == nil {
		e = &sddrv1.EnergyModel{}
	}
	return map[string]string{
		"idleBluetoothJoulesPerDay": e.IdleBluetoothJoulesPerDay,
		"epochChangeMillijoules":    e.EpochChangeMillijoules,
		"discoveryMillijoules":      e.DiscoveryMillijoules,
		"recognitionMillijoules":    e.RecognitionMillijoules,
		"answerMillijoules":         e.AnswerMillijoules,
		"batteryJoules":             e.BatteryJoules,
	}
}

// EnergyDecimal is a coefficient as status and the flags write it: the shortest decimal.
func EnergyDecimal(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// StatusEnergyModel is a result's coefficients as status.results.energyModel.
func StatusEnergyModel(e contract.Energy) *sddrv1.SimulationEnergyModel {
	return &sddrv1.SimulationEnergyModel{
		IdleBluetoothJoulesPerDay: EnergyDecimal(e.IdleBluetoothJoulesPerDay),
		EpochChangeMillijoules:    EnergyDecimal(e.EpochChangeMillijoules),
		DiscoveryMillijoules:      EnergyDecimal(e.DiscoveryMillijoules),
		RecognitionMillijoules:    EnergyDecimal(e.RecognitionMillijoules),
		AnswerMillijoules:         EnergyDecimal(e.AnswerMillijoules),
		BatteryJoules:             EnergyDecimal(e.BatteryJoules),
	}
}

// Shards is spec.shards with its default.
func Shards(s *sddrv1.EncounterSimulation) int32 { return max(s.Spec.Shards, 1) }

// SimulationSettingsOf fills in the defaults of s's spec.
func SimulationSettingsOf(s *sddrv1.EncounterSimulation) SimulationSettings {
	sp := s.Spec
	o := SimulationSettings{Scenario: sp.Scenario, Devices: sp.Devices, GroupSize: 5, Friends: 5, Shards: Shards(s),
		Duration: dur(sp.Duration), Interval: dur(sp.DiscoveryInterval), ReadyTimeout: dur(sp.ReadyTimeout),
		Timeout: dur(sp.Timeout), PDet: sp.DetectionProbability, Seed: 1}
	if o.Scenario == "" {
		o.Scenario = sddrv1.ScenarioCity
	}
	if o.Devices == 0 {
		o.Devices = 1000
	}
	if sp.GroupSize != nil {
		o.GroupSize = *sp.GroupSize
	}
	if sp.Friends != nil {
		o.Friends = *sp.Friends
	}
	if sp.Seed != nil {
		o.Seed = uint64(*sp.Seed)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.Duration, 24*time.Hour)
	def(&o.Interval, time.Minute)
	def(&o.ReadyTimeout, 10*time.Minute)
	def(&o.Timeout, 6*time.Hour)
	if o.PDet == "" {
		o.PDet = "0.95"
	}
	o.Epoch, o.EpochJitter = dur(sp.Epoch), time.Minute
	def(&o.Epoch, 15*time.Minute)
	if sp.EpochJitter != nil {
		o.EpochJitter = sp.EpochJitter.Duration
	}
	o.RevokeFraction, o.RevokeAt = "0.1", "0.5"
	if rv := sp.Revocation; rv != nil {
		if rv.Fraction != "" {
			o.RevokeFraction = rv.Fraction
		}
		if rv.At != "" {
			o.RevokeAt = rv.At
		}
	}
	given := energyFields(sp.Energy)
	for _, f := range contract.EnergyFields {
		v := given[f.Field]
		if v == "" {
			v = EnergyDecimal(*f.Value(&contract.PaperEnergy))
		}
		o.EnergyText = append(o.EnergyText, v)
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			x = 0
		}
		*f.Value(&o.Energy) = x
	}
	return o
}

func dur(d *metav1.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.Duration
}

// ValidateSimulation checks what CEL cannot (or what an older API server let through), with
// the bounds `sddr simulate` enforces at start (services/pkg/sddr/sim.Config.Validate).
func ValidateSimulation(s *sddrv1.EncounterSimulation) error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }
	o := SimulationSettingsOf(s)
	switch o.Scenario {
	case sddrv1.ScenarioCity, sddrv1.ScenarioCrowd, sddrv1.ScenarioGroups:
	default:
		bad("scenario %q must be city, crowd or groups", o.Scenario)
	}
	if o.Devices < 2 || o.Devices > 1<<24 {
		bad("devices %d outside [2, 16777216]", o.Devices)
	}
	if s.Spec.GroupSize != nil && o.Scenario != sddrv1.ScenarioGroups {
		bad("groupSize applies to the groups scenario only")
	}
	if o.GroupSize < 1 || o.GroupSize > 4096 {
		bad("groupSize %d outside [1, 4096]", o.GroupSize)
	}
	if o.Friends < 0 || o.Friends > 256 {
		bad("friends %d outside [0, 256]", o.Friends)
	}
	if o.Shards > 1024 || o.Shards > o.Devices {
		bad("shards %d outside [1, min(1024, devices)]", o.Shards)
	}
	if o.Duration < time.Minute || o.Duration > 8784*time.Hour || o.Duration%time.Second != 0 {
		bad("duration %s must be within [1m, 8784h], in whole seconds", o.Duration)
	}
	if o.Interval < 23*time.Second || o.Interval > 15*time.Minute || o.Interval%time.Millisecond != 0 {
		bad("discoveryInterval %s must be within [23s, 15m], in whole milliseconds", o.Interval)
	}
	if p, err := strconv.ParseFloat(o.PDet, 64); err != nil || !(p > 0 && p <= 1) {
		bad("detectionProbability %q must be a decimal in (0, 1]", o.PDet)
	}
	if o.Epoch < time.Minute || o.Epoch > 24*time.Hour || o.Epoch%time.Second != 0 {
		bad("epoch %s must be within [1m, 24h], in whole seconds", o.Epoch)
	} else if o.Epoch < o.Interval || o.Epoch > 255*o.Interval {
		bad("epoch %s must hold 1 to 255 discovery intervals of %s", o.Epoch, o.Interval)
	}
	if o.EpochJitter < 0 || o.EpochJitter > o.Epoch || o.EpochJitter%time.Second != 0 {
		bad("epochJitter %s must be within [0s, epoch], in whole seconds", o.EpochJitter)
	}
	if f, err := strconv.ParseFloat(o.RevokeFraction, 64); err != nil || !(f >= 0 && f <= 1) {
		bad("revocation.fraction %q must be a decimal in [0, 1]", o.RevokeFraction)
	}
	if a, err := strconv.ParseFloat(o.RevokeAt, 64); err != nil || !(a > 0 && a < 1) {
		bad("revocation.at %q must be a decimal in (0, 1)", o.RevokeAt)
	}
	if s.Spec.Seed != nil && *s.Spec.Seed < 0 {
		bad("seed %d must not be negative", *s.Spec.Seed)
	}
	if o.ReadyTimeout < 10*time.Second || o.ReadyTimeout > 24*time.Hour {
		bad("readyTimeout %s must be within [10s, 24h]", o.ReadyTimeout)
	}
	if o.Timeout < time.Minute || o.Timeout > 168*time.Hour {
		bad("timeout %s must be within [1m, 168h]", o.Timeout)
	}
	for i, f := range contract.EnergyFields {
		if v, err := strconv.ParseFloat(o.EnergyText[i], 64); err != nil || !f.InRange(v) {
			bad("energy.%s %q must be a decimal within %s", f.Field, o.EnergyText[i], f.Bounds())
		}
	}
	return errors.Join(errs...)
}

// JobName is the name of the simulation's Indexed Job, e.g. sim-sddr-sim.
func JobName(s *sddrv1.EncounterSimulation) string { return s.Name + "-sddr-sim" }

// ResultsName is the name of the ConfigMap holding the results.
func ResultsName(s *sddrv1.EncounterSimulation) string { return s.Name + "-sddr-sim-results" }

// SimNATSSecretName is the Secret holding the shards' NATS user.
func SimNATSSecretName(s *sddrv1.EncounterSimulation) string { return s.Name + "-sddr-sim-nats" }

// SimAccount is the simulation's own NATS account.
func SimAccount(s *sddrv1.EncounterSimulation) string {
	return specs.SDDRSimAccountPrefix + s.Namespace + "_" + s.Name
}

// SimUser is the NATS user the simulation's shards share (user names are global on the server).
func SimUser(s *sddrv1.EncounterSimulation) string { return "sddr-sim." + s.Namespace + "." + s.Name }

// RunID is the run id the shards share: the simulation's UID (a NATS subject token).
func RunID(s *sddrv1.EncounterSimulation) string { return string(s.UID) }

// ShardKey is shard i's entry in the results ConfigMap.
func ShardKey(i int) string { return ShardKeyPrefix + strconv.Itoa(i) + ".json" }

func simLabels(s *sddrv1.EncounterSimulation) map[string]string {
	l := specs.Labels("sddr", s.Name, RoleSimulate)
	l[LabelSimulation] = s.Name
	return l
}

// SimNATSSecret is the shards' NATS credentials in the simulation's own account.
func SimNATSSecret(s *sddrv1.EncounterSimulation, password []byte) *corev1.Secret {
	return specs.NATSSecret(s.Namespace, SimNATSSecretName(s), SimAccount(s), SimUser(s), password, simLabels(s))
}

// ResultsConfigMap is the (empty) results ConfigMap; the reconciler fills it.
func ResultsConfigMap(s *sddrv1.EncounterSimulation) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ResultsName(s), Namespace: s.Namespace, Labels: simLabels(s)}}
}

// hours is d as `--hours` (the simulator rounds hours·3600 to whole seconds).
func hours(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds()/3600, 'g', -1, 64)
}

// SimulationJob runs the simulation's shards: an Indexed Job with completions = parallelism =
// shards, each pod `sddr simulate` with the spec's flags and its shard from
// JOB_COMPLETION_INDEX, writing its result (contract.Result) as its termination message.
// Shards of a sharded run connect to the platform's NATS as the simulation's user, its
// password mounted as a file. A failed pod is retried BackoffPerShard times per shard; the
// spec's timeout is the Job's deadline.
func SimulationJob(s *sddrv1.EncounterSimulation, pl Platform) *batchv1.Job {
	o := SimulationSettingsOf(s)
	env := []corev1.EnvVar{
		{Name: specs.Env(FlagScenario), Value: o.Scenario},
		{Name: specs.Env(FlagDevices), Value: strconv.Itoa(int(o.Devices))},
		{Name: specs.Env(FlagHours), Value: hours(o.Duration)},
		{Name: specs.Env(FlagInterval), Value: o.Interval.String()},
		{Name: specs.Env(FlagFriends), Value: strconv.Itoa(int(o.Friends))},
		{Name: specs.Env(FlagPDet), Value: o.PDet},
		{Name: specs.Env(FlagEpoch), Value: o.Epoch.String()},
		{Name: specs.Env(FlagEpochJitter), Value: o.EpochJitter.String()},
		{Name: specs.Env(FlagRevokeFrac), Value: o.RevokeFraction},
		{Name: specs.Env(FlagRevokeAt), Value: o.RevokeAt},
		{Name: specs.Env(FlagSeed), Value: strconv.FormatUint(o.Seed, 10)},
		{Name: specs.Env(FlagShards), Value: strconv.Itoa(int(o.Shards))},
		{Name: specs.Env(FlagRunID), Value: RunID(s)},
		{Name: specs.Env(FlagReadyTimeout), Value: o.ReadyTimeout.String()},
		{Name: specs.Env(FlagResultFile), Value: TerminationLog},
	}
	for i, f := range contract.EnergyFields {
		env = append(env, corev1.EnvVar{Name: specs.Env(f.Flag), Value: o.EnergyText[i]})
	}
	if o.Scenario == sddrv1.ScenarioGroups {
		env = append(env, corev1.EnvVar{Name: specs.Env(FlagGroupSize), Value: strconv.Itoa(int(o.GroupSize))})
	}
	sp := specs.Pod{Role: RoleSimulate, Image: pl.Image, Binary: Binary, Labels: simLabels(s),
		CPU: "1", Memory: "256Mi", Resources: s.Spec.Resources, Env: env}
	if o.Shards > 1 {
		sp.NATSSecret = SimNATSSecretName(s)
	}
	t := sp.Template(pl.Runtime)
	t.Spec.RestartPolicy = corev1.RestartPolicyNever
	c := &t.Spec.Containers[0]
	// A run to completion: no probes (the simulator serves no health port, and a liveness
	// restart would lose the shard's place in the run); the result is the termination
	// message, and a failing shard's last log lines take its place.
	c.StartupProbe, c.LivenessProbe, c.ReadinessProbe = nil, nil, nil
	c.Ports = nil
	c.TerminationMessagePath = TerminationLog
	c.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	c.Env = dropEnv(c.Env, specs.EnvHealthAddr, specs.EnvAddrFile, specs.EnvReusePort)
	n := Shards(s)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: JobName(s), Namespace: s.Namespace, Labels: sp.Labels},
		Spec: batchv1.JobSpec{
			CompletionMode:        ptr.To(batchv1.IndexedCompletion),
			Completions:           ptr.To(n),
			Parallelism:           ptr.To(n),
			BackoffLimit:          ptr.To(BackoffPerShard * n),
			ActiveDeadlineSeconds: ptr.To(int64(o.Timeout / time.Second)),
			Template:              t,
		},
	}
}

func dropEnv(env []corev1.EnvVar, names ...string) []corev1.EnvVar {
	out := env[:0]
	for _, e := range env {
		keep := true
		for _, n := range names {
			keep = keep && e.Name != n
		}
		if keep {
			out = append(out, e)
		}
	}
	return out
}

// SimulationSummary describes the run as the Running condition does.
func SimulationSummary(s *sddrv1.EncounterSimulation) string {
	o := SimulationSettingsOf(s)
	return strings.Join([]string{
		fmt.Sprintf("%s scenario, %d devices, %d friends each", o.Scenario, o.Devices, o.Friends),
		fmt.Sprintf("%s simulated, discovery every %s", o.Duration, o.Interval),
		fmt.Sprintf("epoch %s + up to %s jitter, revocation by %s of the devices at %s of the run", o.Epoch, o.EpochJitter, o.RevokeFraction, o.RevokeAt),
		fmt.Sprintf("%d shards, seed %d", o.Shards, o.Seed),
		EnergySummary(o.Energy),
	}, "; ")
}

// Protocol is the epoch and revocation settings a result reports, parsed as the spec's
// (what a shard's result must report: ok is false when the spec's decimals do not parse).
func (o SimulationSettings) Protocol() (epochS, jitterS, revokeFraction, revokeAt float64, ok bool) {
	f, err1 := strconv.ParseFloat(o.RevokeFraction, 64)
	a, err2 := strconv.ParseFloat(o.RevokeAt, 64)
	return o.Epoch.Seconds(), o.EpochJitter.Seconds(), f, a, err1 == nil && err2 == nil
}

// StatusProtocol is a result's protocol settings as status.results.protocol.
func StatusProtocol(r *contract.Result) *sddrv1.SimulationProtocol {
	return &sddrv1.SimulationProtocol{
		Epoch:          (time.Duration(r.EpochSeconds * float64(time.Second))).String(),
		EpochJitter:    (time.Duration(r.EpochJitterSeconds * float64(time.Second))).String(),
		RevokeFraction: EnergyDecimal(r.RevokeFraction),
		RevokeAt:       EnergyDecimal(r.RevokeAt),
	}
}

// EnergySummary names the coefficients of Equation 1, e.g. for a condition's message.
func EnergySummary(e contract.Energy) string {
	parts := make([]string, 0, len(contract.EnergyFields))
	for _, f := range contract.EnergyFields {
		parts = append(parts, fmt.Sprintf("%s %s %s", f.Field, EnergyDecimal(*f.Value(&e)), f.Unit))
	}
	return "energy: " + strings.Join(parts, ", ")
}
