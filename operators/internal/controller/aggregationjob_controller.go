package controller

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/obscura-iot/obscura/operators/api/common"
	pdav1 "github.com/obscura-iot/obscura/operators/api/pda/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/pdastatus"
	"github.com/obscura-iot/obscura/operators/internal/specs/pda"
)

// Reasons an AggregationJob reports.
const (
	// ReasonNamespaceNotFound: a trust domain's namespace does not exist.
	ReasonNamespaceNotFound = "NamespaceNotFound"
	// ReasonSharedTrustDomain: the proxy and the database run in one namespace, so one operator
	// controls both and the non-collusion assumption is void (spec §4.2).
	ReasonSharedTrustDomain = "SharedTrustDomain"
	// ReasonDuplicateParticipantIdentity: two participants share one mTLS identity, which would
	// let one party count twice towards τ.
	ReasonDuplicateParticipantIdentity = "DuplicateParticipantIdentity"
)

const jobNamespaceIndex = ".spec.trustDomainNamespaces"

// AggregationJobReconciler runs a PDA aggregation: it checks that the job can run (its two
// trust domains exist and hold their keys, participant identities are distinct, the window
// resolves), runs the proxy's and the database's workloads in their namespaces, keeps the
// shard ring in NATS KV in step with spec.shards, follows the window through its phases from
// the clock and from what the services report, and publishes the results to the sink.
type AggregationJobReconciler struct {
	client.Client
	// APIReader reads what the cache may not have seen yet (cleanup); nil uses Client.
	APIReader client.Reader
	Keys      KeyCheck
	Recorder  events.EventRecorder
	// Platform says where the PDA services run; without an image and a NATS URL the
	// reconciler validates and follows the window clock only.
	Platform pda.Platform
	// Services reads the services' progress and writes the ring; nil without NATS, when
	// phases past Collecting cannot be observed.
	Services *pdastatus.Client
}

// +kubebuilder:rbac:groups=pda.obscura.dev,resources=aggregationjobs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=pda.obscura.dev,resources=aggregationjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=pda.obscura.dev,resources=aggregationjobs/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps;services;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=get;list;watch;create;update;patch;delete

// Reconcile evaluates one AggregationJob.
func (r *AggregationJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var job pdav1.AggregationJob
	if err := r.Get(ctx, req.NamespacedName, &job); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !job.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, &job)
	}
	runs := r.Platform.Validate() == nil
	// Workloads live in the trust domains' namespaces, out of reach of owner references: the
	// finalizer is what removes them when the job goes.
	if runs {
		if stop, err := addFinalizer(ctx, r.Client, &job, WorkloadsFinalizer); stop || err != nil {
			return ctrl.Result{}, err
		}
	}
	before := job.Status.DeepCopy()

	start, end := resolveWindow(&job)
	job.Status.WindowStart, job.Status.WindowEnd = &start, &end
	if job.Status.Phase == "" {
		// A job that cannot run stays Pending.
		job.Status.Phase = pdav1.PhasePending
	}

	o, err := r.evaluate(ctx, &job)
	if err != nil {
		return ctrl.Result{}, err
	}
	if o.ready && runs {
		if o, err = r.applyWorkloads(ctx, &job, start, end); err != nil {
			return ctrl.Result{}, err
		}
	}
	var next time.Duration
	if o.ready {
		o, next = r.advance(ctx, &job, start, end, o)
	}
	res, err := writeStatus(ctx, r.Client, r.Recorder, statusWrite{obj: &job, before: before, after: &job.Status,
		conditions: &job.Status.Conditions, observed: &job.Status.ObservedGeneration, outcome: o})
	if err == nil && next > 0 {
		res.RequeueAfter = next
	}
	if err == nil && !o.ready && o.retryAfter > 0 {
		// Degraded by NATS (the ring): no watch tells when it is back, so look again.
		res.RequeueAfter = o.retryAfter
	}
	return res, err
}

// resolveWindow fills in the defaults of the window: it starts when the job was created unless
// told otherwise, and ends at spec.end or start + duration.
func resolveWindow(job *pdav1.AggregationJob) (start, end metav1.Time) {
	w := job.Spec.Window
	start = job.CreationTimestamp
	if w.Start != nil {
		start = *w.Start
	}
	switch {
	case w.End != nil:
		end = *w.End
	case w.Duration != nil:
		end = metav1.NewTime(start.Add(w.Duration.Duration))
	}
	return start, end
}

func (r *AggregationJobReconciler) evaluate(ctx context.Context, job *pdav1.AggregationJob) (outcome, error) {
	// CEL cannot carry this rule: the API server's cost estimator rejects any string comparison
	// across the two trust-domain objects, so the reconciler enforces it.
	if job.Spec.Proxy.Namespace == job.Spec.Database.Namespace {
		return *degraded(ReasonSharedTrustDomain,
			"proxy and database share namespace %s: they are separate trust domains that must never collude", job.Spec.Proxy.Namespace), nil
	}
	seen := make(map[string]string, len(job.Spec.Participants))
	for _, p := range job.Spec.Participants {
		if other, dup := seen[p.Identity]; dup {
			return *degraded(ReasonDuplicateParticipantIdentity,
				"participants %s and %s share the identity %q: one party would count twice towards τ", other, p.Name, p.Identity), nil
		}
		seen[p.Identity] = p.Name
	}
	for _, d := range []struct {
		role string
		td   pdav1.TrustDomain
	}{{"proxy", job.Spec.Proxy}, {"database", job.Spec.Database}} {
		var ns corev1.Namespace
		err := r.Get(ctx, client.ObjectKey{Name: d.td.Namespace}, &ns)
		if apierrors.IsNotFound(err) {
			return *degraded(ReasonNamespaceNotFound, "%s namespace %s does not exist", d.role, d.td.Namespace), nil
		}
		if err != nil {
			return outcome{}, fmt.Errorf("get %s namespace %s: %w", d.role, d.td.Namespace, err)
		}
		if k := d.td.Keys.SecretRef; k != nil && k.Epochs {
			return *degraded(common.ReasonInvalidKey, "%s key: keys.secretRef.epochs applies to Mohito keys only; a PDA key bundle is one Secret entry", d.role), nil
		}
		if _, o, err := r.Keys.check(ctx, d.td.Namespace, d.role+" key", d.td.Keys, nil); err != nil || o != nil {
			return deref(o), err
		}
	}
	return ready(fmt.Sprintf("τ = %d of %d participants, %s keys, %d shards, window %s to %s",
		job.Spec.Threshold, len(job.Spec.Participants), job.Spec.Key.Type, job.Spec.Shards,
		job.Status.WindowStart.UTC().Format("2006-01-02T15:04:05Z"), job.Status.WindowEnd.UTC().Format("2006-01-02T15:04:05Z"))), nil
}

// SetupWithManager registers the reconciler and its watches. A job's Secrets live in its
// trust domains' namespaces, so both Secrets and Namespaces map back through one index.
func (r *AggregationJobReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &pdav1.AggregationJob{}, jobNamespaceIndex, func(o client.Object) []string {
		j := o.(*pdav1.AggregationJob)
		return []string{j.Spec.Proxy.Namespace, j.Spec.Database.Namespace}
	}); err != nil {
		return fmt.Errorf("index aggregation jobs by trust-domain namespace: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&pdav1.AggregationJob{}).
		// The job's workloads are in other namespaces: no owner references, so map them back
		// by their labels. The sink is in the job's namespace and owned.
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(jobOfWorkload)).
		Watches(&appsv1.StatefulSet{}, handler.EnqueueRequestsFromMapFunc(jobOfWorkload)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.jobsInTrustDomain(ctx, o.GetName())
		})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.jobsInTrustDomain(ctx, o.GetNamespace())
		})).
		Named("aggregationjob").
		Complete(r)
}

func (r *AggregationJobReconciler) jobsInTrustDomain(ctx context.Context, namespace string) []reconcile.Request {
	var list pdav1.AggregationJobList
	if err := r.List(ctx, &list, client.MatchingFields{jobNamespaceIndex: namespace}); err != nil {
		logf.FromContext(ctx).Error(err, "list aggregation jobs by trust domain")
		return nil
	}
	return requestsFor(list.Items, "")
}
