package controller

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sddrv1 "github.com/obscura-iot/obscura/operators/api/sddr/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs/sddr"
)

// Reasons an EncounterMailbox reports.
const (
	// ReasonInvalidMailbox: `sddr mailbox` would refuse the spec (specs/sddr.Validate).
	ReasonInvalidMailbox = "InvalidMailbox"
	// ReasonRedisSecretNotFound: spec.redis.passwordSecret is missing or lacks its entry.
	ReasonRedisSecretNotFound = "RedisSecretNotFound"
	// ReasonMailboxValidatedOnly: the operator has no SDDR image; the spec is valid but
	// nothing runs.
	ReasonMailboxValidatedOnly = "ValidatedOnly"
)

// EncounterMailboxReconciler runs an SDDR encounter mailbox: it checks the spec and the
// Redis password Secret, runs the mailbox API as a Deployment with its Service, and reports
// the replicas (the scale subresource's status) and the endpoint.
type EncounterMailboxReconciler struct {
	client.Client
	Recorder events.EventRecorder
	// Platform says where the SDDR services run; without an image the reconciler validates only.
	Platform sddr.Platform
}

// +kubebuilder:rbac:groups=sddr.obscura.dev,resources=encountermailboxes,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sddr.obscura.dev,resources=encountermailboxes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sddr.obscura.dev,resources=encountermailboxes/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete

// Reconcile evaluates one EncounterMailbox.
func (r *EncounterMailboxReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var m sddrv1.EncounterMailbox
	if err := r.Get(ctx, req.NamespacedName, &m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !m.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // owner references remove every object
	}
	before := m.Status.DeepCopy()
	m.Status.Selector = sddr.SelectorString(&m)
	o, err := r.evaluate(ctx, &m)
	if err != nil {
		return ctrl.Result{}, err
	}
	if o.ready {
		if err := r.Platform.Validate(); err != nil {
			o = outcome{ready: true, reason: ReasonMailboxValidatedOnly, message: err.Error() + "; the spec is valid, nothing runs"}
		} else if o, err = r.applyWorkloads(ctx, &m); err != nil {
			return ctrl.Result{}, err
		}
	}
	return writeStatus(ctx, r.Client, r.Recorder, statusWrite{obj: &m, before: before, after: &m.Status,
		conditions: &m.Status.Conditions, observed: &m.Status.ObservedGeneration, outcome: o})
}

// evaluate checks that the mailbox can run as written.
func (r *EncounterMailboxReconciler) evaluate(ctx context.Context, m *sddrv1.EncounterMailbox) (outcome, error) {
	if err := sddr.Validate(m); err != nil {
		return *degraded(ReasonInvalidMailbox, "%v", err), nil
	}
	if ref := m.Spec.Redis.PasswordSecret; ref != nil {
		var s corev1.Secret
		err := r.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, &s)
		if apierrors.IsNotFound(err) {
			return *degraded(ReasonRedisSecretNotFound, "redis.passwordSecret: Secret %s/%s not found", m.Namespace, ref.Name), nil
		}
		if err != nil {
			return outcome{}, fmt.Errorf("get Redis Secret %s/%s: %w", m.Namespace, ref.Name, err)
		}
		key := orDefaultString(ref.Key, sddr.RedisPasswordKey)
		if len(s.Data[key]) == 0 {
			return *degraded(ReasonRedisSecretNotFound, "redis.passwordSecret: Secret %s/%s has no entry %q", m.Namespace, ref.Name, key), nil
		}
	}
	return ready(sddr.Summary(m)), nil
}

// applyWorkloads runs the mailbox API and its Service.
func (r *EncounterMailboxReconciler) applyWorkloads(ctx context.Context, m *sddrv1.EncounterMailbox) (outcome, error) {
	d := sddr.Mailbox(m, r.Platform)
	for _, o := range []client.Object{sddr.Service(m), d} {
		if err := applyOwned(ctx, r.Client, m, o); err != nil {
			return outcome{}, fmt.Errorf("encounter mailbox %s/%s: %w", m.Namespace, m.Name, err)
		}
	}
	var ro rollout
	if err := ro.observe(ctx, r.Client, d); err != nil {
		return outcome{}, err
	}
	m.Status.Replicas, m.Status.ReadyReplicas = d.Status.Replicas, d.Status.ReadyReplicas
	m.Status.Endpoint = sddr.Endpoint(m, r.Platform)
	if !ro.done() {
		return rollingOut("%d of %d mailbox replicas ready; waiting for %s", d.Status.ReadyReplicas, sddr.Replicas(m), strings.Join(ro.waiting, ", ")), nil
	}
	return ready(sddr.Summary(m)), nil
}

// SetupWithManager registers the reconciler and its watches.
func (r *EncounterMailboxReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&sddrv1.EncounterMailbox{}).
		Owns(&appsv1.Deployment{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			var list sddrv1.EncounterMailboxList
			if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
				return nil
			}
			var reqs []reconcile.Request
			for _, m := range list.Items {
				if ref := m.Spec.Redis.PasswordSecret; ref != nil && ref.Name == o.GetName() {
					reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&m)})
				}
			}
			return reqs
		})).
		Named("encountermailbox").
		Complete(r)
}
