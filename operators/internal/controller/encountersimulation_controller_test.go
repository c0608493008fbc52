package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sddrv1 "github.com/obscura-iot/obscura/operators/api/sddr/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/sddr"
	"github.com/obscura-iot/obscura/operators/internal/specs/specstest"
	"github.com/obscura-iot/obscura/services/pkg/sddr/contract"
)

// sampleSimulation is config/samples' EncounterSimulation in ns.
func sampleSimulation(t *testing.T, ns string) *sddrv1.EncounterSimulation {
	t.Helper()
	s := &sddrv1.EncounterSimulation{}
	specstest.ReadSample(t, "sddr_v1alpha1_encountersimulation.yaml", s)
	s.Namespace = ns
	return s
}

// recordedShard is shard i's result from a real two-shard run of the sample's settings
// (`sddr simulate --devices 400 --hours 24 --shards 2` over a real nats-server, testdata/),
// its run id replaced by the simulation's: the run id is the resource's UID.
func recordedShard(t *testing.T, i int, runID string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", fmt.Sprintf("sddr-sim-shard-%d.json", i)))
	if err != nil {
		t.Fatal(err)
	}
	r, err := contract.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	r.RunID = runID
	out, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// waitSimCondition waits until the simulation's condition typ is True with reason.
func waitSimCondition(t *testing.T, s *sddrv1.EncounterSimulation, typ, reason string) {
	t.Helper()
	eventually(t, fmt.Sprintf("EncounterSimulation %s %s=True/%s", s.Name, typ, reason), func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(s), s); err != nil {
			return err
		}
		c := meta.FindStatusCondition(s.Status.Conditions, typ)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason {
			return fmt.Errorf("conditions %+v", s.Status.Conditions)
		}
		return nil
	})
}

// shardPod creates what the Job controller and the kubelet would: the pod of shard idx of
// job, terminated with exitCode and message (the termination message the shard wrote).
func shardPod(t *testing.T, job *batchv1.Job, idx, attempt int, exitCode int32, message string) {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: fmt.Sprintf("%s-%d-%d", job.Name, idx, attempt),
			Labels:      map[string]string{labelJobName: job.Name},
			Annotations: map[string]string{annotationCompletionIdx: strconv.Itoa(idx)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID,
				Controller: ptr.To(true)}}},
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
	create(t, p)
	p.Status.Phase = corev1.PodSucceeded
	if exitCode != 0 {
		p.Status.Phase = corev1.PodFailed
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: sddr.RoleSimulate, Image: job.Spec.Template.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, Message: message,
			Reason: "Completed", StartedAt: metav1.Now(), FinishedAt: metav1.Now()}}}}
	if err := k8s.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	// The Job controller counts the pod: the Job's status changes, which reconciles the simulation.
	eventually(t, "job status", func() error {
		var j batchv1.Job
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), &j); err != nil {
			return err
		}
		if exitCode == 0 {
			j.Status.Succeeded++
		} else {
			j.Status.Failed++
		}
		if j.Status.StartTime == nil {
			j.Status.StartTime = ptr.To(metav1.Now())
		}
		return k8s.Status().Update(ctx, &j)
	})
}

// simJob waits for the simulation's Job.
func simJob(t *testing.T, s *sddrv1.EncounterSimulation) *batchv1.Job {
	t.Helper()
	var job batchv1.Job
	eventually(t, "simulation Job", func() error {
		return k8s.Get(context.Background(), client.ObjectKey{Namespace: s.Namespace, Name: sddr.JobName(s)}, &job)
	})
	return &job
}

// TestEncounterSimulationRunsTheSample applies the sample (two shards) to a real API server:
// an Indexed Job of `sddr simulate` with completions = parallelism = 2, every setting of the
// spec as the flags the simulator reads, the shard from JOB_COMPLETION_INDEX, the result as
// the termination message; the simulation's own NATS account and user, the password only as
// a file. As the shards terminate with the results of a real two-shard run, each goes to the
// ConfigMap and status counts it; once both have, status holds their merge — every count the
// sum of the shards' — and Complete is True.
func TestEncounterSimulationRunsTheSample(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	s := sampleSimulation(t, ns)
	create(t, s)
	waitSimCondition(t, s, sddrv1.SimulationRunning, ReasonShardsRunning)
	job := simJob(t, s)

	sp := job.Spec
	if *sp.CompletionMode != batchv1.IndexedCompletion || *sp.Completions != 2 || *sp.Parallelism != 2 ||
		*sp.BackoffLimit != 2*sddr.BackoffPerShard || *sp.ActiveDeadlineSeconds != 1800 || !metav1.IsControlledBy(job, s) {
		t.Fatalf("job spec: mode %v completions %d parallelism %d backoff %d deadline %d owners %v",
			*sp.CompletionMode, *sp.Completions, *sp.Parallelism, *sp.BackoffLimit, *sp.ActiveDeadlineSeconds, job.OwnerReferences)
	}
	pod := sp.Template.Spec
	c := pod.Containers[0]
	if pod.RestartPolicy != corev1.RestartPolicyNever || c.Args[0] != "simulate" || c.Image != "obscura/sddr:test" ||
		c.TerminationMessagePath != "/dev/termination-log" || c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError ||
		c.LivenessProbe != nil || c.ReadinessProbe != nil || *pod.AutomountServiceAccountToken {
		t.Errorf("pod: restart %s args %v image %s termination %s/%s probes %v/%v automount %v", pod.RestartPolicy, c.Args, c.Image,
			c.TerminationMessagePath, c.TerminationMessagePolicy, c.LivenessProbe, c.ReadinessProbe, *pod.AutomountServiceAccountToken)
	}
	e := env(c)
	for k, want := range map[string]string{
		specs.Env(sddr.FlagScenario): "city", specs.Env(sddr.FlagDevices): "400", specs.Env(sddr.FlagHours): "24",
		specs.Env(sddr.FlagInterval): "1m0s", specs.Env(sddr.FlagFriends): "5", specs.Env(sddr.FlagPDet): "0.95",
		specs.Env(sddr.FlagSeed): "1", specs.Env(sddr.FlagShards): "2", specs.Env(sddr.FlagRunID): string(s.UID),
		specs.Env(sddr.FlagReadyTimeout): "10m0s", specs.Env(sddr.FlagResultFile): "/dev/termination-log",
		specs.EnvNATSURL: testRuntime.NATSURL, specs.EnvNATSPasswordFile: specs.NATSDir + "/" + specs.NATSPasswordKey,
		"OBSCURA_IDLE_BT_JOULES_PER_DAY": "188", "OBSCURA_EPOCH_CHANGE_MJ": "568", "OBSCURA_DISCOVERY_MJ": "1363",
		"OBSCURA_RECOGNITION_MJ": "20.2", "OBSCURA_ANSWER_MJ": "8.5", "OBSCURA_BATTERY_JOULES": "23328",
		specs.Env(sddr.FlagEpoch): "15m0s", specs.Env(sddr.FlagEpochJitter): "1m0s",
		specs.Env(sddr.FlagRevokeFrac): "0.1", specs.Env(sddr.FlagRevokeAt): "0.5",
	} {
		if e[k] != want {
			t.Errorf("%s = %q, want %q", k, e[k], want)
		}
	}
	for _, k := range []string{specs.Env(sddr.FlagGroupSize), specs.EnvHealthAddr, "JOB_COMPLETION_INDEX"} {
		if _, ok := e[k]; ok {
			t.Errorf("%s is set: the Job sets the index, the city has no groups, the simulator no health port", k)
		}
	}
	if c.Resources.Requests.Cpu().String() != "100m" || c.Resources.Limits.Memory().String() != "256Mi" {
		t.Errorf("resources %+v", c.Resources)
	}

	// The shards' NATS user, in the simulation's own account, rendered into the server's
	// accounts; its password only ever as a file.
	var sec corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: sddr.SimNATSSecretName(s)}, &sec); err != nil {
		t.Fatal(err)
	}
	if sec.Annotations[specs.AnnotationNATSAccount] != "SDDR_SIM_"+ns+"_sim" || string(sec.Data[specs.NATSUserKey]) != "sddr-sim."+ns+".sim" ||
		!metav1.IsControlledBy(&sec, s) {
		t.Errorf("credentials Secret: account %q user %q owners %v", sec.Annotations[specs.AnnotationNATSAccount], sec.Data[specs.NATSUserKey], sec.OwnerReferences)
	}
	eventually(t, "the simulation's NATS user rendered", func() error {
		users, err := renderedHashes()
		if err != nil {
			return err
		}
		return hasUser(users, string(sec.Data[specs.NATSUserKey]), sec.Data[specs.NATSPasswordKey])
	})
	var accounts corev1.Secret
	if err := k8s.Get(ctx, testAccountsSecret, &accounts); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(accounts.Data[specs.NATSAccountsKey]), "SDDR_SIM_"+ns+"_sim") {
		t.Error("the simulation's account is not in the server's accounts")
	}
	for _, v := range c.Env {
		if v.ValueFrom != nil && v.ValueFrom.SecretKeyRef != nil && v.ValueFrom.SecretKeyRef.Key == specs.NATSPasswordKey {
			t.Error("the NATS password reaches the environment")
		}
	}

	// Shard 1 first (pods finish in any order), then shard 0 after a failed first attempt.
	shard := []string{recordedShard(t, 0, string(s.UID)), recordedShard(t, 1, string(s.UID))}
	shardPod(t, job, 1, 0, 0, shard[1])
	eventually(t, "one shard done", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
			return err
		}
		if s.Status.ShardsDone != 1 || s.Status.Results != nil {
			return fmt.Errorf("shards done %d, results %v", s.Status.ShardsDone, s.Status.Results)
		}
		return nil
	})
	var cm corev1.ConfigMap
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: sddr.ResultsName(s)}, &cm); err != nil {
		t.Fatal(err)
	}
	if _, ok := cm.Data["shard-1.json"]; !ok || len(cm.Data) != 1 || !metav1.IsControlledBy(&cm, s) {
		t.Fatalf("results ConfigMap after shard 1: keys %v owners %v", keysOfStrings(cm.Data), cm.OwnerReferences)
	}
	shardPod(t, job, 0, 0, 1, "connect to NATS: nats: Authorization Violation")
	waitSimMessage(t, s, sddrv1.SimulationRunning, "retried after shard 0")
	shardPod(t, job, 0, 1, 0, shard[0])
	waitSimCondition(t, s, sddrv1.SimulationComplete, ReasonSimulationSucceeded)

	// Every figure of status is the sum of the shards' (the wall time the slowest's).
	var parts [2]*contract.Result
	for i := range parts {
		r, err := contract.Parse([]byte(shard[i]))
		if err != nil {
			t.Fatal(err)
		}
		parts[i] = r
	}
	got := s.Status.Results
	sum := func(f func(*contract.Result) int64) int64 { return f(parts[0]) + f(parts[1]) }
	for name, c := range map[string][2]int64{
		"devices":           {got.Devices, parts[0].ShardDevices + parts[1].ShardDevices},
		"encounters":        {got.Encounters, sum(func(r *contract.Result) int64 { return r.Encounters })},
		"recognitions":      {got.Recognitions, sum(func(r *contract.Result) int64 { return r.Recognitions })},
		"friendEncounters":  {got.FriendEncounters, sum(func(r *contract.Result) int64 { return r.FriendEncounters })},
		"falseRecognitions": {got.FalseRecognitions, sum(func(r *contract.Result) int64 { return r.FalseRecognitions })},
		"inquiries":         {got.Inquiries, sum(func(r *contract.Result) int64 { return r.Inquiries })},
		"crossAdverts":      {got.CrossAdverts, sum(func(r *contract.Result) int64 { return r.CrossAdverts })},
		"epochKeys":         {got.EpochKeys, sum(func(r *contract.Result) int64 { return r.EpochKeys })},
	} {
		if c[0] != c[1] || c[0] == 0 {
			t.Errorf("%s = %d, the shards' sum %d (and not 0)", name, c[0], c[1])
		}
	}
	for name, c := range map[string][2]string{
		"deviceHours": {got.DeviceHours, decimal(parts[0].DeviceHours + parts[1].DeviceHours)},
		"cpuSeconds":  {got.CPUSeconds, decimal(parts[0].CPUSeconds + parts[1].CPUSeconds)},
		"wallSeconds": {got.WallSeconds, decimal(max(parts[0].WallSeconds, parts[1].WallSeconds))},
		"deviceHoursPerCPUSecond": {got.DeviceHoursPerCPUSecond,
			decimal((parts[0].DeviceHours + parts[1].DeviceHours) / (parts[0].CPUSeconds + parts[1].CPUSeconds))},
	} {
		if c[0] != c[1] {
			t.Errorf("%s = %s, want %s", name, c[0], c[1])
		}
	}
	if len(got.Energy) == 0 {
		t.Error("no energy figures")
	}
	if p := got.Protocol; p == nil || *p != (sddrv1.SimulationProtocol{Epoch: "15m0s", EpochJitter: "1m0s", RevokeFraction: "0.1", RevokeAt: "0.5"}) {
		t.Errorf("protocol settings in status: %+v", p)
	}
	if em := got.EnergyModel; em == nil || *em != (sddrv1.SimulationEnergyModel{IdleBluetoothJoulesPerDay: "188", EpochChangeMillijoules: "568",
		DiscoveryMillijoules: "1363", RecognitionMillijoules: "20.2", AnswerMillijoules: "8.5", BatteryJoules: "23328"}) {
		t.Errorf("energy model in status: %+v", em)
	}
	for _, en := range got.Energy {
		var devs int64
		for _, p := range parts {
			if c := p.Class(en.Class); c != nil {
				devs += c.Devices
			}
		}
		if en.Devices != devs || en.BatteryPercentPerDay == "" || en.Joules == "" {
			t.Errorf("energy of class %s: %+v, %d devices in the shards", en.Class, en, devs)
		}
	}
	if s.Status.ShardsDone != 2 || s.Status.Shards != 2 || s.Status.CompletionTime == nil || s.Status.StartTime == nil ||
		s.Status.Job != job.Name || s.Status.ResultsConfigMap != sddr.ResultsName(s) {
		t.Errorf("status %+v", s.Status)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: sddr.ResultsName(s)}, &cm); err != nil {
		t.Fatal(err)
	}
	merged, err := contract.Parse([]byte(cm.Data[sddr.ResultKey]))
	if err != nil || !merged.Complete() || merged.Encounters != got.Encounters || cm.Data["shard-0.json"] != shard[0] || cm.Data["shard-1.json"] != shard[1] {
		t.Errorf("results ConfigMap: keys %v, merged %v (%v)", keysOfStrings(cm.Data), merged, err)
	}
	for _, typ := range []string{sddrv1.SimulationRunning, sddrv1.SimulationFailed} {
		if meta.IsStatusConditionTrue(s.Status.Conditions, typ) {
			t.Errorf("%s is True after completion", typ)
		}
	}
	waitEvent(t, s, corev1.EventTypeNormal, ReasonSimulationSucceeded)
}

func keysOfStrings(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// waitSimMessage waits until condition typ's message holds want.
func waitSimMessage(t *testing.T, s *sddrv1.EncounterSimulation, typ, want string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s message %q", typ, want), func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(s), s); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(s.Status.Conditions, typ); c == nil || !strings.Contains(c.Message, want) {
			return fmt.Errorf("conditions %+v", s.Status.Conditions)
		}
		return nil
	})
}

// TestEncounterSimulationBadTerminationMessage: a shard that exits 0 with something that is
// not its result of this run — not JSON, another shard's, another run's — fails the
// simulation with InvalidResult naming the shard and why.
func TestEncounterSimulationBadTerminationMessage(t *testing.T) {
	ns := namespace(t)
	for i, c := range []struct {
		message func(s *sddrv1.EncounterSimulation) string
		want    string
	}{
		{func(*sddrv1.EncounterSimulation) string { return "panic: out of memory" }, "shard 0 (pod "},
		{func(s *sddrv1.EncounterSimulation) string { return recordedShard(t, 1, string(s.UID)) }, "shard 1 (merged 1), want shard 0"},
		{func(*sddrv1.EncounterSimulation) string { return recordedShard(t, 0, "another-run") }, `run id "another-run"`},
	} {
		s := sampleSimulation(t, ns)
		s.Name = fmt.Sprintf("bad-%d", i)
		create(t, s)
		waitSimCondition(t, s, sddrv1.SimulationRunning, ReasonShardsRunning)
		job := simJob(t, s)
		shardPod(t, job, 0, 0, 0, c.message(s))
		waitSimCondition(t, s, sddrv1.SimulationFailed, ReasonInvalidResult)
		if m := meta.FindStatusCondition(s.Status.Conditions, sddrv1.SimulationFailed).Message; !strings.Contains(m, c.want) {
			t.Errorf("%d: message %q lacks %q", i, m, c.want)
		}
		if meta.IsStatusConditionTrue(s.Status.Conditions, sddrv1.SimulationRunning) || s.Status.Results != nil {
			t.Errorf("%d: running or results after a bad result: %+v", i, s.Status)
		}
	}
}

// TestEncounterSimulationJobFailed: the Job failing (its pods kept failing, or the timeout
// passed) fails the simulation with ShardFailed and the failing shard's last words.
func TestEncounterSimulationJobFailed(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	s := sampleSimulation(t, ns)
	create(t, s)
	waitSimCondition(t, s, sddrv1.SimulationRunning, ReasonShardsRunning)
	job := simJob(t, s)
	shardPod(t, job, 1, 0, 2, "sim: shard 1: waiting for the other shards: context deadline exceeded")
	eventually(t, "job failed", func() error {
		var j batchv1.Job
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), &j); err != nil {
			return err
		}
		now := metav1.Now()
		j.Status.Conditions = append(j.Status.Conditions,
			batchv1.JobCondition{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "DeadlineExceeded", Message: "Job was active longer than specified deadline", LastTransitionTime: now},
			batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "DeadlineExceeded", Message: "Job was active longer than specified deadline", LastTransitionTime: now})
		return k8s.Status().Update(ctx, &j)
	})
	waitSimCondition(t, s, sddrv1.SimulationFailed, ReasonShardFailed)
	m := meta.FindStatusCondition(s.Status.Conditions, sddrv1.SimulationFailed).Message
	for _, want := range []string{"DeadlineExceeded", "0 of 2 shards done", "shard 1 (pod ", "exited 2", "context deadline exceeded"} {
		if !strings.Contains(m, want) {
			t.Errorf("message %q lacks %q", m, want)
		}
	}
	waitEvent(t, s, corev1.EventTypeWarning, ReasonShardFailed)
}

// TestEncounterSimulationRefusals: what CEL and the schema refuse at admission (the spec is
// immutable too), and what the operator refuses with a Failed condition.
func TestEncounterSimulationRefusals(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		mut  func(*sddrv1.EncounterSimulation)
		msg  string
	}{
		{"more-shards-than-devices", func(s *sddrv1.EncounterSimulation) { s.Spec.Devices = 3; s.Spec.Shards = 4 }, "shards must not exceed devices"},
		{"group-size-in-a-city", func(s *sddrv1.EncounterSimulation) { s.Spec.GroupSize = ptr.To[int32](5) }, "groupSize applies to the groups scenario only"},
		{"short", func(s *sddrv1.EncounterSimulation) { s.Spec.Duration = &metav1.Duration{Duration: 30 * time.Second} }, "duration must be within [1m, 8784h]"},
		{"fast-discovery", func(s *sddrv1.EncounterSimulation) {
			s.Spec.DiscoveryInterval = &metav1.Duration{Duration: 10 * time.Second}
		}, "discoveryInterval must be within [23s, 15m]"},
		{"too-many-friends", func(s *sddrv1.EncounterSimulation) { s.Spec.Friends = ptr.To[int32](257) }, "friends"},
		{"never-detected", func(s *sddrv1.EncounterSimulation) { s.Spec.DetectionProbability = "0.0" }, "detectionProbability"},
		{"over-one", func(s *sddrv1.EncounterSimulation) { s.Spec.DetectionProbability = "1.5" }, "detectionProbability"},
		{"unknown-scenario", func(s *sddrv1.EncounterSimulation) { s.Spec.Scenario = "stadium" }, "scenario"},
		{"no-shards", func(s *sddrv1.EncounterSimulation) { s.Spec.Shards = -1 }, "shards"},
		{"a.dotted.name", func(s *sddrv1.EncounterSimulation) {}, "without dots"},
		{"free-discovery", func(s *sddrv1.EncounterSimulation) { s.Spec.Energy.DiscoveryMillijoules = "0" }, "discoveryMillijoules must be within (0, 100000] mJ"},
		{"free-recognition", func(s *sddrv1.EncounterSimulation) { s.Spec.Energy.RecognitionMillijoules = "0.000000" }, "recognitionMillijoules must be within (0, 100000] mJ"},
		{"negative-answer", func(s *sddrv1.EncounterSimulation) { s.Spec.Energy.AnswerMillijoules = "-8.5" }, "answerMillijoules"},
		{"costly-epoch", func(s *sddrv1.EncounterSimulation) { s.Spec.Energy.EpochChangeMillijoules = "100000.5" }, "epochChangeMillijoules must be within (0, 100000] mJ"},
		{"hot-idle", func(s *sddrv1.EncounterSimulation) { s.Spec.Energy.IdleBluetoothJoulesPerDay = "250000" }, "idleBluetoothJoulesPerDay must be within (0, 100000] J/day"},
		{"tiny-battery", func(s *sddrv1.EncounterSimulation) { s.Spec.Energy.BatteryJoules = "0.5" }, "batteryJoules must be within [1, 1000000] J"},
		{"huge-battery", func(s *sddrv1.EncounterSimulation) { s.Spec.Energy.BatteryJoules = "1000000.1" }, "batteryJoules must be within [1, 1000000] J"},
		{"exponent", func(s *sddrv1.EncounterSimulation) { s.Spec.Energy.DiscoveryMillijoules = "1e3" }, "discoveryMillijoules"},
		{"not-a-number", func(s *sddrv1.EncounterSimulation) { s.Spec.Energy.BatteryJoules = "NaN" }, "batteryJoules"},
		{"short-epoch", func(s *sddrv1.EncounterSimulation) { s.Spec.Epoch = &metav1.Duration{Duration: 30 * time.Second} }, "epoch must be within [1m, 24h], in whole seconds"},
		{"long-epoch", func(s *sddrv1.EncounterSimulation) { s.Spec.Epoch = &metav1.Duration{Duration: 25 * time.Hour} }, "epoch must be within [1m, 24h], in whole seconds"},
		{"fractional-epoch", func(s *sddrv1.EncounterSimulation) {
			s.Spec.Epoch = &metav1.Duration{Duration: 15*time.Minute + 500*time.Millisecond}
		}, "epoch must be within [1m, 24h], in whole seconds"},
		{"epoch-below-interval", func(s *sddrv1.EncounterSimulation) {
			s.Spec.Epoch = &metav1.Duration{Duration: 2 * time.Minute}
			s.Spec.DiscoveryInterval = &metav1.Duration{Duration: 3 * time.Minute}
		}, "epoch must hold 1 to 255 discovery intervals"},
		{"epoch-of-256-beacons", func(s *sddrv1.EncounterSimulation) {
			s.Spec.Epoch = &metav1.Duration{Duration: 256 * time.Minute}
		}, "epoch must hold 1 to 255 discovery intervals"},
		{"jitter-over-epoch", func(s *sddrv1.EncounterSimulation) {
			s.Spec.Epoch = &metav1.Duration{Duration: 5 * time.Minute}
			s.Spec.EpochJitter = &metav1.Duration{Duration: 6 * time.Minute}
		}, "epochJitter must not exceed the epoch"},
		{"fractional-jitter", func(s *sddrv1.EncounterSimulation) {
			s.Spec.EpochJitter = &metav1.Duration{Duration: 1500 * time.Millisecond}
		}, "epochJitter must be within [0s, 24h], in whole seconds"},
		{"everyone-twice", func(s *sddrv1.EncounterSimulation) { s.Spec.Revocation.Fraction = "1.5" }, "fraction"},
		{"revoke-at-start", func(s *sddrv1.EncounterSimulation) { s.Spec.Revocation.At = "0" }, "revocation.at"},
		{"revoke-at-end", func(s *sddrv1.EncounterSimulation) { s.Spec.Revocation.At = "1" }, "revocation.at"},
		{"revoke-negative", func(s *sddrv1.EncounterSimulation) { s.Spec.Revocation.Fraction = "-0.1" }, "fraction"},
	} {
		s := sampleSimulation(t, ns)
		s.Name = c.name
		c.mut(s)
		err := k8s.Create(ctx, s)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: admitted or wrong message: %v", c.name, err)
		}
	}

	// The defaults of an empty spec, and the spec cannot change.
	s := &sddrv1.EncounterSimulation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "defaults"}}
	create(t, s)
	sp := s.Spec
	if sp.Scenario != "city" || sp.Devices != 1000 || *sp.Friends != 5 || sp.Duration.Duration != 24*time.Hour || sp.Shards != 1 ||
		*sp.Seed != 1 || sp.DetectionProbability != "0.95" || sp.DiscoveryInterval.Duration != time.Minute || sp.Timeout.Duration != 6*time.Hour {
		t.Errorf("defaults %+v", sp)
	}
	if sp.Epoch == nil || sp.Epoch.Duration != 15*time.Minute || sp.EpochJitter == nil || sp.EpochJitter.Duration != time.Minute ||
		sp.Revocation == nil || *sp.Revocation != (sddrv1.SimulationRevocation{Fraction: "0.1", At: "0.5"}) {
		t.Errorf("epoch and revocation defaults: epoch %v jitter %v revocation %+v", sp.Epoch, sp.EpochJitter, sp.Revocation)
	}
	if e := sp.Energy; e == nil || *e != (sddrv1.EnergyModel{IdleBluetoothJoulesPerDay: "188", EpochChangeMillijoules: "568",
		DiscoveryMillijoules: "1363", RecognitionMillijoules: "20.2", AnswerMillijoules: "8.5", BatteryJoules: "23328"}) {
		t.Errorf("energy defaults %+v: want the paper's", e)
	}
	s.Spec.Devices = 2000
	if err := k8s.Update(ctx, s); err == nil || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("a spec change was admitted: %v", err)
	}
	// One shard needs no NATS: no credentials Secret.
	waitSimCondition(t, s, sddrv1.SimulationRunning, ReasonShardsRunning)
	job := simJob(t, s)
	if e := env(job.Spec.Template.Spec.Containers[0]); e[specs.EnvNATSURL] != "" || e[specs.Env(sddr.FlagShards)] != "1" {
		t.Errorf("a one-shard run: NATS %q shards %q", e[specs.EnvNATSURL], e[specs.Env(sddr.FlagShards)])
	}
	var sec corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: sddr.SimNATSSecretName(s)}, &sec); err == nil {
		t.Error("a one-shard run has NATS credentials")
	}

	// What the schema lets through and the simulator would refuse: a duration that is not in
	// whole seconds. Failed, and no Job.
	odd := sampleSimulation(t, ns)
	odd.Name = "odd-duration"
	odd.Spec.Duration = &metav1.Duration{Duration: time.Hour + 500*time.Millisecond}
	create(t, odd)
	waitSimCondition(t, odd, sddrv1.SimulationFailed, ReasonInvalidSimulation)
	if m := meta.FindStatusCondition(odd.Status.Conditions, sddrv1.SimulationFailed).Message; !strings.Contains(m, "whole seconds") {
		t.Errorf("message %q", m)
	}
	var j batchv1.Job
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: sddr.JobName(odd)}, &j); err == nil {
		t.Error("a refused simulation has a Job")
	}
}

// TestEncounterSimulationEnergy: spec.energy's coefficients, each unset one defaulted by the
// API server to the paper's, reach every shard's pod as the `sddr simulate` flags, verbatim,
// and the Running condition names them. A shard whose result was counted with another model
// (the paper's, here) fails the simulation with InvalidResult: status never reports battery
// figures of coefficients the spec did not ask for.
func TestEncounterSimulationEnergy(t *testing.T) {
	ns := namespace(t)
	s := sampleSimulation(t, ns)
	s.Name = "energy"
	s.Spec.Energy = &sddrv1.EnergyModel{DiscoveryMillijoules: "1100.25", RecognitionMillijoules: "31", BatteryJoules: "15000"}
	create(t, s)
	if e := s.Spec.Energy; e.IdleBluetoothJoulesPerDay != "188" || e.AnswerMillijoules != "8.5" || e.DiscoveryMillijoules != "1100.25" {
		t.Errorf("spec.energy after admission %+v: the unset ones the paper's, the set ones as given", e)
	}
	waitSimCondition(t, s, sddrv1.SimulationRunning, ReasonShardsRunning)
	waitSimMessage(t, s, sddrv1.SimulationRunning, "discoveryMillijoules 1100.25 mJ")
	job := simJob(t, s)
	e := env(job.Spec.Template.Spec.Containers[0])
	for _, f := range contract.EnergyFields {
		want := map[string]string{"idle-bt-joules-per-day": "188", "epoch-change-mj": "568", "discovery-mj": "1100.25",
			"recognition-mj": "31", "answer-mj": "8.5", "battery-joules": "15000"}[f.Flag]
		if got := e[specs.Env(f.Flag)]; got != want {
			t.Errorf("%s = %q, want %q", specs.Env(f.Flag), got, want)
		}
	}
	shardPod(t, job, 0, 0, 0, recordedShard(t, 0, string(s.UID)))
	waitSimCondition(t, s, sddrv1.SimulationFailed, ReasonInvalidResult)
	if m := meta.FindStatusCondition(s.Status.Conditions, sddrv1.SimulationFailed).Message; !strings.Contains(m, "energy model") ||
		!strings.Contains(m, "discoveryMillijoules 1363 mJ") || !strings.Contains(m, "discoveryMillijoules 1100.25 mJ") {
		t.Errorf("message %q: want the shard's and the spec's energy models", m)
	}
	if s.Status.Results != nil {
		t.Errorf("results of another energy model: %+v", s.Status.Results)
	}
}

// TestEncounterSimulationProtocolSettings: spec.epoch, spec.epochJitter and spec.revocation
// other than the defaults are admitted (a 5-minute epoch without jitter, everybody revoking
// at a quarter of the run; a 255-interval epoch at the CEL bound), reach every shard's pod as
// the `sddr simulate` flags and the Running condition; a shard whose result ran with other
// settings (the sample's defaults, here) fails the simulation with InvalidResult.
func TestEncounterSimulationProtocolSettings(t *testing.T) {
	ns := namespace(t)
	bound := sampleSimulation(t, ns)
	bound.Name = "epoch-bound"
	bound.Spec.Epoch = &metav1.Duration{Duration: 255 * time.Minute}
	bound.Spec.EpochJitter = &metav1.Duration{Duration: 0}
	create(t, bound)

	s := sampleSimulation(t, ns)
	s.Name = "protocol"
	s.Spec.Epoch = &metav1.Duration{Duration: 5 * time.Minute}
	s.Spec.EpochJitter = &metav1.Duration{Duration: 0}
	s.Spec.Revocation = &sddrv1.SimulationRevocation{Fraction: "1", At: "0.25"}
	create(t, s)
	waitSimCondition(t, s, sddrv1.SimulationRunning, ReasonShardsRunning)
	waitSimMessage(t, s, sddrv1.SimulationRunning, "epoch 5m0s + up to 0s jitter, revocation by 1 of the devices at 0.25 of the run")
	job := simJob(t, s)
	e := env(job.Spec.Template.Spec.Containers[0])
	for k, want := range map[string]string{
		specs.Env(sddr.FlagEpoch): "5m0s", specs.Env(sddr.FlagEpochJitter): "0s",
		specs.Env(sddr.FlagRevokeFrac): "1", specs.Env(sddr.FlagRevokeAt): "0.25",
	} {
		if e[k] != want {
			t.Errorf("%s = %q, want %q", k, e[k], want)
		}
	}
	shardPod(t, job, 0, 0, 0, recordedShard(t, 0, string(s.UID)))
	waitSimCondition(t, s, sddrv1.SimulationFailed, ReasonInvalidResult)
	if m := meta.FindStatusCondition(s.Status.Conditions, sddrv1.SimulationFailed).Message; !strings.Contains(m, "protocol settings") ||
		!strings.Contains(m, "epoch 900 s") || !strings.Contains(m, "epoch 5m0s") {
		t.Errorf("message %q: want the shard's and the spec's protocol settings", m)
	}
	if s.Status.Results != nil {
		t.Errorf("results of other protocol settings: %+v", s.Status.Results)
	}
}
