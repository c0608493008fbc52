package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	pdav1 "github.com/obscura-iot/obscura/operators/api/pda/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/autoscale"
	"github.com/obscura-iot/obscura/operators/internal/pdastatus"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/pda"
	pdacontract "github.com/obscura-iot/obscura/services/pkg/pda/contract"
)

// WorkloadsFinalizer holds an AggregationJob until its workloads in the trust domains'
// namespaces are deleted.
const WorkloadsFinalizer = "pda.obscura.dev/workloads"

// Reasons an AggregationJob reports about its workloads and window.
const (
	// ReasonPublicKeyMissing: a trust domain has no spec.<domain>.publicKey, which every role
	// of both domains needs.
	ReasonPublicKeyMissing = "PublicKeyMissing"
	// ReasonRingUpdated (Event): the shard ring in NATS KV got a new version.
	ReasonRingUpdated = "RingUpdated"
	// ReasonRingUnavailable: the ring could not be written to NATS KV.
	ReasonRingUnavailable = "RingUnavailable"
)

// applyWorkloads runs the proxy domain's ingress, mixer and oracle and the database domain's
// front-ends and shards, keeps the ring in step with spec.shards, and reports whether the
// workloads have caught up.
func (r *AggregationJobReconciler) applyWorkloads(ctx context.Context, job *pdav1.AggregationJob, start, end metav1.Time) (outcome, error) {
	for _, d := range []struct {
		role string
		td   pdav1.TrustDomain
	}{{"proxy", job.Spec.Proxy}, {"database", job.Spec.Database}} {
		if d.td.Keys.SecretRef == nil && d.td.Keys.Vault == nil {
			return *degraded(ReasonUnsupportedByServices,
				"%s keys: set keys.secretRef (a mounted Secret) or keys.vault", d.role), nil
		}
		if d.td.PublicKey == "" {
			return *degraded(ReasonPublicKeyMissing,
				"spec.%s.publicKey is empty: every role of both domains needs it (what `pda keygen -role %s` prints)",
				map[string]string{"proxy": "proxy", "database": "database"}[d.role], map[string]string{"proxy": "proxy", "database": "db"}[d.role]), nil
		}
	}
	proxyCM, dbCM, err := pda.Params(job, start, end)
	if err != nil {
		return *degraded(ReasonUnsupportedByServices, "%v", err), nil
	}
	for _, d := range []pda.Domain{pda.ProxyDomain, pda.DBDomain} {
		if err := ensureSecret(ctx, r.Client, nil, pda.NATSSecret(job, d, newPassword())); err != nil {
			return outcome{}, err
		}
	}
	r.scaleShards(ctx, job, start, end)
	shards, err := r.shardReplicas(ctx, job, start, end)
	if err != nil {
		return outcome{}, err
	}
	ph, dh := pda.ParamsHash(proxyCM), pda.ParamsHash(dbCM)
	proxy, mixer, oracle := pda.Proxy(job, r.Platform, ph), pda.Mixer(job, r.Platform, ph), pda.Oracle(job, r.Platform, ph)
	frontend, shardSet := pda.Frontend(job, r.Platform, dh), pda.Shards(job, r.Platform, dh, shards)
	if sel, err := metav1.LabelSelectorAsSelector(shardSet.Spec.Selector); err == nil {
		job.Status.ShardSelector = sel.String()
	}
	objs := []client.Object{
		proxyCM, pda.ServiceAccount(job, pda.ProxyDomain), proxy, pda.ProxyService(job, r.Platform), mixer, oracle,
		dbCM, pda.ServiceAccount(job, pda.DBDomain), frontend, shardSet, pda.ShardService(job),
	}
	for _, o := range objs {
		if err := applyOwned(ctx, r.Client, nil, o); err != nil {
			return outcome{}, fmt.Errorf("aggregation job %s/%s: %w", job.Namespace, job.Name, err)
		}
	}
	if err := r.prune(ctx, job); err != nil {
		return outcome{}, err
	}
	if o := r.syncRing(ctx, job); o != nil {
		return *o, nil
	}

	var ro rollout
	for _, w := range []client.Object{proxy, mixer, oracle, frontend, shardSet} {
		if err := ro.observe(ctx, r.Client, w); err != nil {
			return outcome{}, err
		}
	}
	if !ro.done() {
		return rollingOut("%d of %d workloads available; waiting for %s", ro.available, ro.total, strings.Join(ro.waiting, ", ")), nil
	}
	return ready(fmt.Sprintf("τ = %d of %d participants, %s keys, %d shards, window %s to %s",
		job.Spec.Threshold, len(job.Spec.Participants), job.Spec.Key.Type, job.Spec.Shards,
		start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339))), nil
}

// scaleShards sets spec.shards from the shards' backlog when spec.shardAutoscale asks for it
// (issue 14 item 2), with the decrypt workers' policy; syncRing then writes the new ring
// version, which the shards take up at the next window they route. The backlog is the
// sub-batches not yet delivered to the shards plus the submit requests the window has pooled:
// in window mode nothing reaches a shard before the seal, so a growing submission rate shows
// in the pool, and a ring bumped before the seal is the one the window is routed with.
func (r *AggregationJobReconciler) scaleShards(ctx context.Context, job *pdav1.AggregationJob, start, end metav1.Time) {
	a := job.Spec.ShardAutoscale
	if a == nil || r.Services == nil || job.Status.Phase == pdav1.PhaseComplete || job.Status.Phase == pdav1.PhaseFailed {
		return
	}
	log := logf.FromContext(ctx)
	cur := max(job.Spec.Shards, 1)
	lag, err := r.Services.ShardLag(ctx, pda.ShardIDs(job, cur))
	if err != nil && !errors.Is(err, pdastatus.ErrNotReported) {
		log.Info("shard backlog unavailable; not scaling shards", "err", err.Error())
		return
	}
	_, w := pda.Window(start, end)
	pooled, err := r.Services.PooledRequests(ctx, w)
	if err != nil && !errors.Is(err, pdastatus.ErrNotReported) {
		log.Info("pooled submissions unavailable; not scaling shards", "err", err.Error())
		return
	}
	lag += pooled
	obs := autoscale.Observation{Current: cur, Min: a.Min, Max: a.Max, TargetLag: a.TargetLag, Lag: lag,
		Now: time.Now(), Unit: "database shards"}
	applyScale(ctx, r.Recorder, job, "ScaleShards", obs, &job.Status.LastShardScaleTime, func(n int32) error {
		patch := client.MergeFrom(job.DeepCopy())
		job.Spec.Shards = n
		if err := r.Patch(ctx, job, patch); err != nil {
			job.Spec.Shards = cur
			return err
		}
		return nil
	})
}

// shardReplicas is the shard StatefulSet's size: spec.shards, except that shards a window is
// still routed with stay until the window's results are published (docs/pda.md: removing a
// shard waits for the windows pinned to it).
func (r *AggregationJobReconciler) shardReplicas(ctx context.Context, job *pdav1.AggregationJob, start, end metav1.Time) (int32, error) {
	n := max(job.Spec.Shards, 1)
	if r.Services == nil || job.Status.Phase == pdav1.PhaseComplete || job.Status.Phase == pdav1.PhaseFailed {
		return n, nil
	}
	_, w := pda.Window(start, end)
	pinned, err := r.Services.PinnedRing(ctx, w)
	switch {
	case errors.Is(err, pdastatus.ErrNotReported):
		return n, nil
	case err != nil:
		// Unknown: keep what runs rather than remove a shard a window may need.
		var cur appsv1.StatefulSet
		if gerr := r.Get(ctx, client.ObjectKey{Namespace: job.Spec.Database.Namespace, Name: pda.Name(job, pda.RoleShard)}, &cur); gerr == nil && cur.Spec.Replicas != nil {
			return max(n, *cur.Spec.Replicas), nil
		}
		return n, nil
	}
	ids := pda.ShardIDs(job, 256)
	for _, s := range pinned.Shards {
		if i := slices.Index(ids, s); i >= int(n) {
			n = int32(i) + 1
		}
	}
	return n, nil
}

// syncRing writes a new ring version when spec.shards changed; shards pick it up at the next
// window they route (docs/pda.md "Ring changes"), so nothing in flight moves.
func (r *AggregationJobReconciler) syncRing(ctx context.Context, job *pdav1.AggregationJob) *outcome {
	if r.Services == nil {
		return nil
	}
	prev := job.Status.RingShards
	ring, wrote, err := r.Services.EnsureRing(ctx, pda.ShardIDs(job, max(job.Spec.Shards, 1)))
	if err != nil {
		return unavailable(ReasonRingUnavailable, "write the shard ring to NATS KV %s: %v", pdacontract.RingBucket, err)
	}
	if wrote {
		r.Recorder.Eventf(job, nil, corev1.EventTypeNormal, ReasonRingUpdated, "Reshard",
			"ring version %d: %d → %d shards; about 1/%d of the key space moves at the next window routed",
			ring.Version, prev, len(ring.Shards), len(ring.Shards))
		logf.FromContext(ctx).Info("ring updated", "version", ring.Version, "shards", len(ring.Shards))
	}
	return nil
}

// pdaKinds are the kinds the operator creates in the trust domains.
func pdaKinds() []client.ObjectList {
	return []client.ObjectList{&appsv1.DeploymentList{}, &appsv1.StatefulSetList{}, &corev1.ServiceList{},
		&corev1.ConfigMapList{}, &corev1.SecretList{}, &corev1.ServiceAccountList{}}
}

// jobObjects lists every object labelled as the job's, in any namespace (labelled).
func (r *AggregationJobReconciler) jobObjects(ctx context.Context, job *pdav1.AggregationJob) ([]client.Object, error) {
	return labelled(ctx, r.APIReader, r.Client, pdaKinds(), pda.JobSelector(job), "aggregation job "+job.Namespace+"/"+job.Name)
}

// labelled lists every object of the kinds carrying the labels, in any namespace, straight
// from the API server (reader; nil uses c): an object created a moment ago must not escape
// cleanup because the cache lags. what names the owner in errors.
func labelled(ctx context.Context, reader client.Reader, c client.Client, kinds []client.ObjectList, labels map[string]string, what string) ([]client.Object, error) {
	if reader == nil {
		reader = c
	}
	var out []client.Object
	for _, l := range kinds {
		if err := reader.List(ctx, l, client.MatchingLabels(labels)); err != nil {
			return nil, fmt.Errorf("list %T of %s: %w", l, what, err)
		}
		items, err := metaItems(l)
		if err != nil {
			return nil, err
		}
		out = append(out, items...)
	}
	return out, nil
}

func metaItems(l client.ObjectList) ([]client.Object, error) {
	objs, err := meta.ExtractList(l)
	if err != nil {
		return nil, err
	}
	out := make([]client.Object, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(client.Object))
	}
	return out, nil
}

// prune deletes the job's objects left in a namespace it no longer uses (a trust domain moved).
func (r *AggregationJobReconciler) prune(ctx context.Context, job *pdav1.AggregationJob) error {
	objs, err := r.jobObjects(ctx, job)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if ns := o.GetNamespace(); ns == job.Spec.Proxy.Namespace || ns == job.Spec.Database.Namespace {
			continue
		}
		if err := deleteBackground(ctx, r.Client, o); err != nil {
			return err
		}
	}
	return nil
}

// finalize deletes the job's workloads in both trust domains, then lets the job go. The ring
// in NATS KV stays: it belongs to the database domain, and its next job bumps it.
func (r *AggregationJobReconciler) finalize(ctx context.Context, job *pdav1.AggregationJob) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(job, WorkloadsFinalizer) {
		return ctrl.Result{}, nil
	}
	objs, err := r.jobObjects(ctx, job)
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, o := range objs {
		if err := deleteBackground(ctx, r.Client, o); err != nil {
			return ctrl.Result{}, err
		}
	}
	if len(objs) > 0 {
		r.Recorder.Eventf(job, nil, corev1.EventTypeNormal, "WorkloadsDeleted", "Delete",
			"deleted %d objects in namespaces %s and %s", len(objs), job.Spec.Proxy.Namespace, job.Spec.Database.Namespace)
	}
	controllerutil.RemoveFinalizer(job, WorkloadsFinalizer)
	if err := r.Update(ctx, job); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Gone, or changed since it was read: the watch event for the change reconciles
			// it again with fresh data (as writeStatus does for a status conflict).
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("remove finalizer of aggregation job %s/%s: %w", job.Namespace, job.Name, err)
	}
	return ctrl.Result{}, nil
}

func deleteBackground(ctx context.Context, c client.Client, o client.Object) error {
	if err := c.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %T %s/%s: %w", o, o.GetNamespace(), o.GetName(), err)
	}
	return nil
}

// jobOfWorkload maps a workload in a trust domain back to its job.
func jobOfWorkload(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	name, ns := l[pda.LabelJob], l[pda.LabelJobNamespace]
	if name == "" || ns == "" || l[specs.LabelName] != "pda" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}}
}
