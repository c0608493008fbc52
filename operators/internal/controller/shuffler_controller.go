package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/obscura-iot/obscura/operators/api/common"
	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/mohitostatus"
	"github.com/obscura-iot/obscura/operators/internal/specs/mohito"
)

// Reasons a Shuffler reports.
const (
	// ReasonVendorNotFound: spec.vendorRef names no Vendor in the namespace.
	ReasonVendorNotFound = "VendorNotFound"
	// ReasonVendorNotReady: the Vendor exists but is itself degraded (or not evaluated yet).
	ReasonVendorNotReady = "VendorNotReady"
)

const shufflerVendorIndex = ".spec.vendorRef.name"

// ShufflerReconciler resolves a Shuffler's vendor and its effective selection weight.
type ShufflerReconciler struct {
	client.Client
	Recorder events.EventRecorder
	// Platform says where workloads run; without it the reconciler only validates.
	Platform mohito.Platform
	// Services reads the coordinator's figures; nil without NATS.
	Services *mohitostatus.Client
}

// +kubebuilder:rbac:groups=mohito.obscura.dev,resources=shufflers,verbs=get;list;watch
// +kubebuilder:rbac:groups=mohito.obscura.dev,resources=shufflers/status,verbs=get;update;patch

// Reconcile evaluates one Shuffler.
func (r *ShufflerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var s mohitov1.Shuffler
	if err := r.Get(ctx, req.NamespacedName, &s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := s.Status.DeepCopy()

	o, v, err := r.evaluate(ctx, &s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if o.ready && r.Platform.Validate() == nil {
		if o, err = r.applyWorkloads(ctx, &s, v); err != nil {
			return ctrl.Result{}, err
		}
	}
	if r.Services != nil && v != nil {
		if st, err := r.Services.Shuffler(ctx, v.Spec.Index); err == nil {
			last := int64(st.LastRound)
			s.Status.RoundsShuffled, s.Status.LastRound, s.Status.LastResult = st.RoundsShuffled, &last, st.LastResult
		}
	}
	res, err := writeStatus(ctx, r.Client, r.Recorder, statusWrite{obj: &s, before: before, after: &s.Status,
		conditions: &s.Status.Conditions, observed: &s.Status.ObservedGeneration, outcome: o})
	if err == nil && r.Services != nil {
		res.RequeueAfter = servicesPoll // the coordinator's figures change every round
	}
	return res, err
}

func (r *ShufflerReconciler) evaluate(ctx context.Context, s *mohitov1.Shuffler) (outcome, *mohitov1.Vendor, error) {
	var v mohitov1.Vendor
	err := r.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Spec.VendorRef.Name}, &v)
	if apierrors.IsNotFound(err) {
		s.Status.VendorIndex = nil
		s.Status.EffectiveWeight = 0
		return *degraded(ReasonVendorNotFound, "Vendor %s not found in namespace %s", s.Spec.VendorRef.Name, s.Namespace), nil, nil
	}
	if err != nil {
		return outcome{}, nil, fmt.Errorf("get vendor %s: %w", s.Spec.VendorRef.Name, err)
	}
	idx := v.Spec.Index
	s.Status.VendorIndex = &idx
	s.Status.EffectiveWeight = v.Spec.Devices
	if s.Spec.Weight != nil {
		s.Status.EffectiveWeight = *s.Spec.Weight
	}
	// A Vendor still rolling out (its agent waits for the series' deployment, which waits for an
	// available shuffler) is not a fault: only a degraded Vendor (a missing key, a bad registry)
	// stops its shuffler. Waiting for Ready here would deadlock a fresh install.
	if !isHealthy(v.Status.Conditions) {
		why := "not evaluated yet"
		if c := meta.FindStatusCondition(v.Status.Conditions, common.ConditionReady); c != nil {
			why = c.Reason + ": " + c.Message
		}
		return *degraded(ReasonVendorNotReady, "Vendor %s is degraded (%s)", v.Name, why), nil, nil
	}
	return ready(fmt.Sprintf("shuffles for vendor %s (index %d) with weight %d", v.Name, idx, s.Status.EffectiveWeight)), &v, nil
}

// SetupWithManager registers the reconciler and its watches.
func (r *ShufflerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &mohitov1.Shuffler{}, shufflerVendorIndex,
		func(o client.Object) []string { return []string{o.(*mohitov1.Shuffler).Spec.VendorRef.Name} }); err != nil {
		return fmt.Errorf("index shufflers by vendor: %w", err)
	}
	followSeries := handler.EnqueueRequestsFromMapFunc(vendorsOfRoundChange(r.Client,
		func() *mohitov1.ShufflerList { return &mohitov1.ShufflerList{} },
		func(l *mohitov1.ShufflerList) []reconcile.Request { return requestsFor(l.Items, "") }))
	return ctrl.NewControllerManagedBy(mgr).
		For(&mohitov1.Shuffler{}).
		Owns(&appsv1.Deployment{}).
		Watches(&mohitov1.Round{}, followSeries).
		Watches(&corev1.ConfigMap{}, followSeries).
		Watches(&mohitov1.Vendor{}, handler.EnqueueRequestsFromMapFunc(r.shufflersOfVendor)).
		Named("shuffler").
		Complete(r)
}

func (r *ShufflerReconciler) shufflersOfVendor(ctx context.Context, o client.Object) []reconcile.Request {
	var list mohitov1.ShufflerList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{shufflerVendorIndex: o.GetName()}); err != nil {
		logf.FromContext(ctx).Error(err, "list shufflers of vendor")
		return nil
	}
	return requestsFor(list.Items, "")
}
