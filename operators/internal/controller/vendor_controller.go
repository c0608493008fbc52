package controller

import (
	"context"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/mohitostatus"
	"github.com/obscura-iot/obscura/operators/internal/specs/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// Reasons a Vendor reports.
const (
	// ReasonDuplicateIndex: another Vendor in the namespace has the same index.
	ReasonDuplicateIndex = "DuplicateIndex"
)

const vendorIndexIndex = ".spec.index"

// VendorReconciler checks a Vendor's key reference and the uniqueness of its index, and counts
// the Shufflers that run for it.
type VendorReconciler struct {
	client.Client
	Keys     KeyCheck
	Recorder events.EventRecorder
	// Platform says where workloads run; without it the reconciler only validates.
	Platform mohito.Platform
	// Services holds the vendor registry and the coordinator's figures; nil without NATS.
	Services *mohitostatus.Client
}

// registryFinalizer keeps a Vendor until its registration is removed from the registry in
// NATS KV, the one piece of state the operator keeps outside the cluster.
const registryFinalizer = "mohito.obscura.dev/registry"

// +kubebuilder:rbac:groups=mohito.obscura.dev,resources=vendors,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=mohito.obscura.dev,resources=vendors/finalizers,verbs=update
// +kubebuilder:rbac:groups=mohito.obscura.dev,resources=vendors/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile evaluates one Vendor.
func (r *VendorReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var v mohitov1.Vendor
	if err := r.Get(ctx, req.NamespacedName, &v); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.Services != nil {
		if done, err := r.registry(ctx, &v); done || err != nil {
			return ctrl.Result{}, err
		}
	}
	before := v.Status.DeepCopy()

	var shufflers mohitov1.ShufflerList
	if err := r.List(ctx, &shufflers, client.InNamespace(v.Namespace), client.MatchingFields{shufflerVendorIndex: v.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list shufflers of vendor %s: %w", req, err)
	}
	v.Status.Shufflers = int32(len(shufflers.Items))

	o, err := r.evaluate(ctx, &v)
	if err != nil {
		return ctrl.Result{}, err
	}
	if o.ready && r.Platform.Validate() == nil {
		if o, err = r.applyWorkloads(ctx, &v, o); err != nil {
			return ctrl.Result{}, err
		}
	}
	if r.Services != nil && o.ready {
		if err := r.Services.Register(ctx, registration(&v)); err != nil {
			return ctrl.Result{}, err
		}
		if st, err := r.Services.Vendor(ctx, v.Spec.Index); err == nil {
			v.Status.RoundsServed, v.Status.ShufflerDuty = st.RoundsServed, st.ShufflerDuty
			if st.ActiveDevices != nil {
				v.Status.ActiveDevices = *st.ActiveDevices
			}
		}
	}
	res, err := writeStatus(ctx, r.Client, r.Recorder, statusWrite{obj: &v, before: before, after: &v.Status,
		conditions: &v.Status.Conditions, observed: &v.Status.ObservedGeneration, outcome: o})
	if err == nil && r.Services != nil {
		res.RequeueAfter = servicesPoll // the coordinator's figures change every round
	}
	return res, err
}

func (r *VendorReconciler) evaluate(ctx context.Context, v *mohitov1.Vendor) (outcome, error) {
	epochs, o, err := r.Keys.check(ctx, v.Namespace, "vendor key", v.Spec.Keys, vendorKeyFormat())
	if err != nil || o != nil {
		return deref(o), err
	}
	setKeyEpochs(r.Recorder, v, "vendor key", &v.Status.KeyEpochs, epochs, r.Platform.KeyActivation())
	if v.Spec.Agent != nil {
		if o, err := r.Keys.checkSecretFile(ctx, v.Namespace, "device registry", v.Spec.Agent.Devices, mohito.DevicesFile); err != nil || o != nil {
			return deref(o), err
		}
	}
	var same mohitov1.VendorList
	if err := r.List(ctx, &same, client.InNamespace(v.Namespace),
		client.MatchingFields{vendorIndexIndex: strconv.Itoa(int(v.Spec.Index))}); err != nil {
		return outcome{}, fmt.Errorf("list vendors with index %d: %w", v.Spec.Index, err)
	}
	for _, other := range same.Items {
		if other.Name != v.Name {
			return *degraded(ReasonDuplicateIndex, "index %d is also used by Vendor %s: every vendor needs its own position in the vendor vector",
				v.Spec.Index, other.Name), nil
		}
	}
	return ready(fmt.Sprintf("vendor index %d, %d devices, K_v %d", v.Spec.Index, v.Spec.Devices, v.Spec.Capacity.PaddedEntries)), nil
}

func registration(v *mohitov1.Vendor) contract.Registration {
	c := v.Spec.Capacity
	return contract.Registration{Index: v.Spec.Index, Name: v.Name, Namespace: v.Namespace, Devices: v.Spec.Devices,
		Base: c.Base, Jitter: c.Jitter, PaddedEntries: c.PaddedEntries, ResponsePaddedEntries: c.ResponsePaddedEntries}
}

// SetupWithManager registers the reconciler and its watches.
func (r *VendorReconciler) SetupWithManager(mgr ctrl.Manager) error {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &mohitov1.Vendor{}, vendorIndexIndex, func(o client.Object) []string {
		return []string{strconv.Itoa(int(o.(*mohitov1.Vendor).Spec.Index))}
	}); err != nil {
		return fmt.Errorf("index vendors by index: %w", err)
	}
	if err := idx.IndexField(ctx, &mohitov1.Vendor{}, secretKeyIndex, func(o client.Object) []string {
		v := o.(*mohitov1.Vendor)
		names := nonEmpty(secretName(v.Spec.Keys))
		if v.Spec.Agent != nil && v.Spec.Agent.Devices != nil {
			names = append(names, v.Spec.Agent.Devices.Name)
		}
		return names
	}); err != nil {
		return fmt.Errorf("index vendors by key secret: %w", err)
	}
	followSeries := handler.EnqueueRequestsFromMapFunc(vendorsOfRoundChange(r.Client,
		func() *mohitov1.VendorList { return &mohitov1.VendorList{} },
		func(l *mohitov1.VendorList) []reconcile.Request { return requestsFor(l.Items, "") }))
	return ctrl.NewControllerManagedBy(mgr).
		For(&mohitov1.Vendor{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.ServiceAccount{}).
		Watches(&mohitov1.Round{}, followSeries).
		Watches(&corev1.ConfigMap{}, followSeries).
		// A vendor's index change can fix or break the other vendors with the same index.
		Watches(&mohitov1.Vendor{}, handler.EnqueueRequestsFromMapFunc(r.vendorsWithSameIndex)).
		Watches(&mohitov1.Shuffler{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			s := o.(*mohitov1.Shuffler)
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: s.Namespace, Name: s.Spec.VendorRef.Name}}}
		})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.vendorsUsingSecret)).
		Named("vendor").
		Complete(r)
}

func (r *VendorReconciler) vendorsWithSameIndex(ctx context.Context, o client.Object) []reconcile.Request {
	v := o.(*mohitov1.Vendor)
	var list mohitov1.VendorList
	if err := r.List(ctx, &list, client.InNamespace(v.Namespace),
		client.MatchingFields{vendorIndexIndex: strconv.Itoa(int(v.Spec.Index))}); err != nil {
		logf.FromContext(ctx).Error(err, "list vendors with the same index")
		return nil
	}
	return requestsFor(list.Items, v.Name)
}

func (r *VendorReconciler) vendorsUsingSecret(ctx context.Context, o client.Object) []reconcile.Request {
	var list mohitov1.VendorList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{secretKeyIndex: o.GetName()}); err != nil {
		logf.FromContext(ctx).Error(err, "list vendors using secret")
		return nil
	}
	return requestsFor(list.Items, "")
}
