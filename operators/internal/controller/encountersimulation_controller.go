package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	sddrv1 "github.com/obscura-iot/obscura/operators/api/sddr/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs/sddr"
	"github.com/obscura-iot/obscura/services/pkg/sddr/contract"
)

// Reasons an EncounterSimulation reports.
const (
	// ReasonInvalidSimulation: `sddr simulate` would refuse the spec (specs/sddr.ValidateSimulation).
	ReasonInvalidSimulation = "InvalidSimulation"
	// ReasonSimulationValidatedOnly: the operator has no SDDR image (or, for more than one
	// shard, no NATS); the spec is valid but nothing runs.
	ReasonSimulationValidatedOnly = "ValidatedOnly"
	// ReasonShardsRunning: the Job runs; some shards have not reported yet.
	ReasonShardsRunning = "ShardsRunning"
	// ReasonSimulationSucceeded: every shard's result was read and merged.
	ReasonSimulationSucceeded = "Succeeded"
	// ReasonShardFailed: the Job failed (a shard kept failing, or the timeout passed).
	ReasonShardFailed = "ShardFailed"
	// ReasonInvalidResult: a shard exited 0 with a termination message that is not a valid
	// result of this run (contract.Parse, its shard, run id or settings), or the shards'
	// results do not merge.
	ReasonInvalidResult = "InvalidResult"
	// ReasonResultLost: the Job completed but a shard's pod went before its result was read.
	ReasonResultLost = "ResultLost"
)

// Labels and annotations the Job controller puts on an Indexed Job's pods.
const (
	labelJobName             = "batch.kubernetes.io/job-name"
	annotationCompletionIdx  = "batch.kubernetes.io/job-completion-index"
	simulationRequeueRunning = 30 * time.Second
)

// EncounterSimulationReconciler runs an SDDR encounter simulation once: it validates the
// spec, gives a sharded run its own NATS account and user, runs the shards as an Indexed Job
// of `sddr simulate`, reads each shard's result from its pod's termination message into the
// results ConfigMap as the shards finish, and merges them into status once all have.
type EncounterSimulationReconciler struct {
	client.Client
	// APIReader lists the shards' pods (the operator keeps no informer on Pods).
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Platform says where the SDDR workloads run; without an image the reconciler validates only.
	Platform sddr.Platform
}

// +kubebuilder:rbac:groups=sddr.obscura.dev,resources=encountersimulations,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sddr.obscura.dev,resources=encountersimulations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sddr.obscura.dev,resources=encountersimulations/finalizers,verbs=update
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch

// simPhase is what one reconcile concluded: which of Running, Complete, Failed is True (none
// while the spec is only validated), why.
type simPhase struct {
	running, complete, failed bool
	reason, message           string
}

// Reconcile evaluates one EncounterSimulation.
func (r *EncounterSimulationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var s sddrv1.EncounterSimulation
	if err := r.Get(ctx, req.NamespacedName, &s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !s.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // owner references remove the Job, its pods, the ConfigMap and the Secret
	}
	if meta.IsStatusConditionTrue(s.Status.Conditions, sddrv1.SimulationComplete) ||
		meta.IsStatusConditionTrue(s.Status.Conditions, sddrv1.SimulationFailed) {
		return ctrl.Result{}, nil // a run ends once; its spec cannot change
	}
	before := s.Status.DeepCopy()
	s.Status.Shards = sddr.Shards(&s)
	ph, err := r.run(ctx, &s)
	if err != nil {
		return ctrl.Result{}, err
	}
	changed := setSimConditions(&s.Status.Conditions, ph, s.Generation)
	s.Status.ObservedGeneration = s.Generation
	if !equality.Semantic.DeepEqual(before, &s.Status) {
		if err := r.Status().Update(ctx, &s); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{}, nil // the watch event for the newer object reconciles it again
			}
			return ctrl.Result{}, fmt.Errorf("update status of EncounterSimulation %s/%s: %w", s.Namespace, s.Name, err)
		}
	}
	if changed {
		kind := corev1.EventTypeNormal
		if ph.failed {
			kind = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(&s, nil, kind, ph.reason, "Reconcile", "%s", ph.message)
		logf.FromContext(ctx).Info("evaluated", "running", ph.running, "complete", ph.complete, "failed", ph.failed, "reason", ph.reason)
	}
	if ph.running {
		// The Job's status follows its pods; this re-read covers a missed event.
		return ctrl.Result{RequeueAfter: simulationRequeueRunning}, nil
	}
	return ctrl.Result{}, nil
}

// setSimConditions writes the phase as the three conditions and reports whether any changed.
func setSimConditions(conds *[]metav1.Condition, ph simPhase, gen int64) bool {
	changed := false
	for _, c := range []struct {
		t  string
		on bool
	}{{sddrv1.SimulationRunning, ph.running}, {sddrv1.SimulationComplete, ph.complete}, {sddrv1.SimulationFailed, ph.failed}} {
		st := metav1.ConditionFalse
		if c.on {
			st = metav1.ConditionTrue
		}
		if meta.SetStatusCondition(conds, metav1.Condition{Type: c.t, Status: st, Reason: ph.reason, Message: ph.message, ObservedGeneration: gen}) {
			changed = true
		}
	}
	return changed
}

func simFailed(reason, format string, a ...any) simPhase {
	return simPhase{failed: true, reason: reason, message: truncate(fmt.Sprintf(format, a...), 2048)}
}

// run advances the simulation and says where it is.
func (r *EncounterSimulationReconciler) run(ctx context.Context, s *sddrv1.EncounterSimulation) (simPhase, error) {
	if err := sddr.ValidateSimulation(s); err != nil {
		return simFailed(ReasonInvalidSimulation, "%v", err), nil
	}
	if err := r.Platform.SimulationPlatform(s); err != nil {
		return simPhase{reason: ReasonSimulationValidatedOnly, message: err.Error() + "; the spec is valid, nothing runs"}, nil
	}
	n := int(sddr.Shards(s))
	if n > 1 {
		if err := ensureSecret(ctx, r.Client, s, sddr.SimNATSSecret(s, newPassword())); err != nil {
			return simPhase{}, err
		}
	}
	cm, err := r.resultsConfigMap(ctx, s)
	if err != nil {
		return simPhase{}, err
	}
	job, err := r.job(ctx, s)
	if err != nil {
		return simPhase{}, err
	}

	// Each shard's result goes into the ConfigMap as soon as its pod terminates, so the
	// results outlive the pods.
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(s.Namespace), client.MatchingLabels{labelJobName: job.Name}); err != nil {
		return simPhase{}, fmt.Errorf("list the pods of Job %s/%s: %w", s.Namespace, job.Name, err)
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	var lastFailure string
	added := false
	for i := range pods.Items {
		p := &pods.Items[i]
		if !metav1.IsControlledBy(p, job) {
			continue
		}
		term := shardTermination(p)
		if term == nil {
			continue
		}
		idx, err := strconv.Atoi(p.Annotations[annotationCompletionIdx])
		if err != nil || idx < 0 || idx >= n {
			continue
		}
		if term.ExitCode != 0 {
			lastFailure = fmt.Sprintf("shard %d (pod %s) exited %d: %s", idx, p.Name, term.ExitCode, truncate(strings.TrimSpace(term.Message), 512))
			continue
		}
		res, err := contract.Parse([]byte(term.Message))
		if err == nil {
			err = checkShardResult(s, res, idx)
		}
		if err != nil {
			return simFailed(ReasonInvalidResult, "shard %d (pod %s): the termination message is not a result of this run: %v", idx, p.Name, err), nil
		}
		if _, ok := cm.Data[sddr.ShardKey(idx)]; !ok {
			b, _ := res.Marshal()
			cm.Data[sddr.ShardKey(idx)] = string(b)
			added = true
		}
	}
	if added {
		if err := r.Update(ctx, cm); err != nil {
			return simPhase{}, fmt.Errorf("write the results ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
		}
	}

	parts := make([]*contract.Result, 0, n)
	for i := range n {
		if b, ok := cm.Data[sddr.ShardKey(i)]; ok {
			res, err := contract.Parse([]byte(b))
			if err != nil {
				return simFailed(ReasonInvalidResult, "results ConfigMap %s, entry %s: %v", cm.Name, sddr.ShardKey(i), err), nil
			}
			parts = append(parts, res)
		}
	}
	s.Status.ShardsDone = int32(len(parts))
	if len(parts) == n {
		return r.complete(ctx, s, cm, parts)
	}
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobFailed:
			return simFailed(ReasonShardFailed, "Job %s failed (%s: %s) with %d of %d shards done; %s", job.Name, c.Reason, c.Message, len(parts), n,
				orDefaultString(lastFailure, "no failed pod left to tell why")), nil
		case batchv1.JobComplete:
			return simFailed(ReasonResultLost, "Job %s completed but only %d of %d shards' results were read: a shard's pod went before its termination message", job.Name, len(parts), n), nil
		}
	}
	msg := fmt.Sprintf("%d of %d shards done; %s", len(parts), n, sddr.SimulationSummary(s))
	if lastFailure != "" {
		msg += "; retried after " + lastFailure
	}
	return simPhase{running: true, reason: ReasonShardsRunning, message: truncate(msg, 2048)}, nil
}

// shardTermination is the terminated state of the pod's simulate container, if any.
func shardTermination(p *corev1.Pod) *corev1.ContainerStateTerminated {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == sddr.RoleSimulate && cs.State.Terminated != nil {
			return cs.State.Terminated
		}
	}
	return nil
}

// checkShardResult checks that res is shard idx's own result of s's run.
func checkShardResult(s *sddrv1.EncounterSimulation, res *contract.Result, idx int) error {
	o := sddr.SimulationSettingsOf(s)
	switch {
	case res.RunID != sddr.RunID(s):
		return fmt.Errorf("run id %q, want %q", res.RunID, sddr.RunID(s))
	case res.Shard != idx || res.ShardsMerged != 1:
		return fmt.Errorf("shard %d (merged %d), want shard %d", res.Shard, res.ShardsMerged, idx)
	case res.Shards != int(o.Shards) || res.Devices != int64(o.Devices) || res.Seed != o.Seed || res.Scenario != o.Scenario || res.Friends != int(o.Friends):
		return fmt.Errorf("settings (%d shards, %d devices, seed %d, %s, %d friends) differ from the spec's", res.Shards, res.Devices, res.Seed, res.Scenario, res.Friends)
	case res.Energy != o.Energy:
		return fmt.Errorf("the energy model (%s) differs from the spec's (%s)", sddr.EnergySummary(res.Energy), sddr.EnergySummary(o.Energy))
	}
	ep, jit, frac, at, ok := o.Protocol()
	if !ok || res.EpochSeconds != ep || res.EpochJitterSeconds != jit || res.RevokeFraction != frac || res.RevokeAt != at {
		return fmt.Errorf("the protocol settings (epoch %v s, jitter %v s, revocation by %v at %v) differ from the spec's (epoch %s, jitter %s, revocation by %s at %s)",
			res.EpochSeconds, res.EpochJitterSeconds, res.RevokeFraction, res.RevokeAt, o.Epoch, o.EpochJitter, o.RevokeFraction, o.RevokeAt)
	}
	return nil
}

// complete merges the shards' results into the ConfigMap and status.
func (r *EncounterSimulationReconciler) complete(ctx context.Context, s *sddrv1.EncounterSimulation, cm *corev1.ConfigMap, parts []*contract.Result) (simPhase, error) {
	m, err := contract.Merge(parts...)
	if err == nil && !m.Complete() {
		err = fmt.Errorf("the merged result holds %d of %d shards and %d of %d devices", m.ShardsMerged, m.Shards, m.ShardDevices, m.Devices)
	}
	if err != nil {
		return simFailed(ReasonInvalidResult, "the shards' results do not merge: %v", err), nil
	}
	b, err := m.Marshal()
	if err != nil {
		return simFailed(ReasonInvalidResult, "the merged result: %v", err), nil
	}
	if cm.Data[sddr.ResultKey] != string(b) {
		cm.Data[sddr.ResultKey] = string(b)
		if err := r.Update(ctx, cm); err != nil {
			return simPhase{}, fmt.Errorf("write the results ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
		}
	}
	s.Status.Results = simulationResults(m)
	if s.Status.CompletionTime == nil {
		now := metav1.Now()
		s.Status.CompletionTime = &now
	}
	return simPhase{complete: true, reason: ReasonSimulationSucceeded, message: fmt.Sprintf(
		"%d shards merged: %.1f device-hours, %d encounters, %d of %d friend encounters recognised, %d false recognitions; %.1f device-hours per CPU-second",
		m.ShardsMerged, m.DeviceHours, m.Encounters, m.Recognitions, m.FriendEncounters, m.FalseRecognitions, m.SimulatedDeviceHoursPerCPUSecond())}, nil
}

func decimal(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

// simulationResults is a merged result as status shows it.
func simulationResults(m *contract.Result) *sddrv1.SimulationResults {
	out := &sddrv1.SimulationResults{
		Devices: m.Devices, DeviceHours: decimal(m.DeviceHours), Inquiries: m.Inquiries, Responses: m.Responses,
		Encounters: m.Encounters, FriendEncounters: m.FriendEncounters, Recognitions: m.Recognitions, Missed: m.Missed,
		FalseRecognitions: m.FalseRecognitions, StrangerKeys: m.StrangerKeys,
		RevokedEncounters: m.RevokedEncounters, RevokedRecognitions: m.RevokedRecognitions,
		CrossAdverts: m.CrossAdverts, CrossBytes: m.CrossBytes,
		CPUSeconds: decimal(m.CPUSeconds), WallSeconds: decimal(m.WallSeconds),
		DeviceHoursPerCPUSecond: decimal(m.SimulatedDeviceHoursPerCPUSecond()),
	}
	out.EnergyModel = sddr.StatusEnergyModel(m.Energy)
	out.EpochKeys = m.EpochKeys
	out.Protocol = sddr.StatusProtocol(m)
	for _, c := range m.Classes {
		out.Energy = append(out.Energy, sddrv1.SimulationEnergy{Class: c.Name, Devices: c.Devices,
			Joules: decimal(c.Joules), BatteryPercentPerDay: decimal(c.BatteryPercentPerDay)})
	}
	return out
}

// resultsConfigMap reads (or creates, owned by s) the results ConfigMap.
func (r *EncounterSimulationReconciler) resultsConfigMap(ctx context.Context, s *sddrv1.EncounterSimulation) (*corev1.ConfigMap, error) {
	want := sddr.ResultsConfigMap(s)
	s.Status.ResultsConfigMap = want.Name
	var cm corev1.ConfigMap
	err := r.Get(ctx, client.ObjectKeyFromObject(want), &cm)
	if apierrors.IsNotFound(err) {
		if err := controllerutil.SetControllerReference(s, want, r.Scheme()); err != nil {
			return nil, err
		}
		switch err := r.Create(ctx, want); {
		case apierrors.IsAlreadyExists(err):
			// Created by an earlier reconcile the cache has not seen yet.
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(want), &cm); err != nil {
				return nil, fmt.Errorf("get the results ConfigMap %s/%s: %w", want.Namespace, want.Name, err)
			}
		case err != nil:
			return nil, fmt.Errorf("create the results ConfigMap %s/%s: %w", want.Namespace, want.Name, err)
		default:
			cm = *want
		}
	} else if err != nil {
		return nil, fmt.Errorf("get the results ConfigMap %s/%s: %w", want.Namespace, want.Name, err)
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	return &cm, nil
}

// job reads (or creates, owned by s) the shards' Indexed Job. A Job's template is immutable
// and so is the simulation's spec: the Job is created once and never updated.
func (r *EncounterSimulationReconciler) job(ctx context.Context, s *sddrv1.EncounterSimulation) (*batchv1.Job, error) {
	want := sddr.SimulationJob(s, r.Platform)
	s.Status.Job = want.Name
	var job batchv1.Job
	err := r.Get(ctx, client.ObjectKeyFromObject(want), &job)
	if apierrors.IsNotFound(err) {
		if err := controllerutil.SetControllerReference(s, want, r.Scheme()); err != nil {
			return nil, err
		}
		switch err := r.Create(ctx, want); {
		case apierrors.IsAlreadyExists(err):
			// Created by an earlier reconcile the cache has not seen yet.
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(want), &job); err != nil {
				return nil, fmt.Errorf("get Job %s/%s: %w", want.Namespace, want.Name, err)
			}
		case err != nil:
			return nil, fmt.Errorf("create Job %s/%s: %w", want.Namespace, want.Name, err)
		default:
			job = *want
		}
	} else if err != nil {
		return nil, fmt.Errorf("get Job %s/%s: %w", want.Namespace, want.Name, err)
	}
	if s.Status.StartTime == nil {
		t := job.CreationTimestamp
		if t.IsZero() {
			t = metav1.Now()
		}
		s.Status.StartTime = &t
	}
	return &job, nil
}

// SetupWithManager registers the reconciler and its watches.
func (r *EncounterSimulationReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&sddrv1.EncounterSimulation{}).
		Owns(&batchv1.Job{}).
		Named("encountersimulation").
		Complete(r)
}
