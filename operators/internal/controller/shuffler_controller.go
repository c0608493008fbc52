package controller

import (
	"context"
	"fmt"

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
)

// Reasons a Shuffler reports.
const (
	// ReasonVendorNotFound: spec.vendorRef names no Vendor in the namespace.
	ReasonVendorNotFound = "VendorNotFound"
	// ReasonVendorNotReady: the Vendor exists but is itself degraded.
	ReasonVendorNotReady = "VendorNotReady"
)

const shufflerVendorIndex = ".spec.vendorRef.name"

// ShufflerReconciler resolves a Shuffler's vendor and its effective selection weight.
type ShufflerReconciler struct {
	client.Client
	Recorder events.EventRecorder
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

	o, err := r.evaluate(ctx, &s)
	if err != nil {
		return ctrl.Result{}, err
	}
	return writeStatus(ctx, r.Client, r.Recorder, &s, before, &s.Status, &s.Status.Conditions, &s.Status.ObservedGeneration, o)
}

func (r *ShufflerReconciler) evaluate(ctx context.Context, s *mohitov1.Shuffler) (outcome, error) {
	var v mohitov1.Vendor
	err := r.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Spec.VendorRef.Name}, &v)
	if apierrors.IsNotFound(err) {
		s.Status.VendorIndex = nil
		s.Status.EffectiveWeight = 0
		return *degraded(ReasonVendorNotFound, "Vendor %s not found in namespace %s", s.Spec.VendorRef.Name, s.Namespace), nil
	}
	if err != nil {
		return outcome{}, fmt.Errorf("get vendor %s: %w", s.Spec.VendorRef.Name, err)
	}
	idx := v.Spec.Index
	s.Status.VendorIndex = &idx
	s.Status.EffectiveWeight = v.Spec.Devices
	if s.Spec.Weight != nil {
		s.Status.EffectiveWeight = *s.Spec.Weight
	}
	if c := meta.FindStatusCondition(v.Status.Conditions, common.ConditionReady); c == nil || c.Status != "True" {
		why := "not evaluated yet"
		if c != nil {
			why = c.Reason + ": " + c.Message
		}
		return *degraded(ReasonVendorNotReady, "Vendor %s is not ready (%s)", v.Name, why), nil
	}
	return ready(fmt.Sprintf("shuffles for vendor %s (index %d) with weight %d", v.Name, idx, s.Status.EffectiveWeight)), nil
}

// SetupWithManager registers the reconciler and its watches.
func (r *ShufflerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &mohitov1.Shuffler{}, shufflerVendorIndex,
		func(o client.Object) []string { return []string{o.(*mohitov1.Shuffler).Spec.VendorRef.Name} }); err != nil {
		return fmt.Errorf("index shufflers by vendor: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&mohitov1.Shuffler{}).
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
