package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// Reasons a Round reports.
const (
	// ReasonInvalidSelector: a label selector does not parse.
	ReasonInvalidSelector = "InvalidSelector"
	// ReasonNoVendorsSelected: spec.vendorSelector matches no Vendor.
	ReasonNoVendorsSelected = "NoVendorsSelected"
	// ReasonNoShufflerAvailable: no selected vendor has a Shuffler of positive weight, or a vendor
	// in the rotation has no healthy one (the rounds that choose it abort until the coordinator
	// passes it by).
	ReasonNoShufflerAvailable = "NoShufflerAvailable"
	// ReasonCapacityTooSmall: some vendor's K_v cannot hold base + δ + jitter, or C_v ≤ δ.
	ReasonCapacityTooSmall = "CapacityTooSmall"
	// ReasonInvalidCapacityClasses: spec.capacity.classes fails a check the schema cannot make
	// (a hold under ten periods, a lowerFakePercent a lowered class could burst under).
	ReasonInvalidCapacityClasses = "InvalidCapacityClasses"
	// Events of a capacity class change (the coordinator's, with its figures).
	ReasonCapacityRaised  = "CapacityRaised"
	ReasonCapacityLowered = "CapacityLowered"
	// ReasonResponseCapacityTooSmall: a vendor's response OKVS capacity is below q × devices.
	ReasonResponseCapacityTooSmall = "ResponseCapacityTooSmall"
	// ReasonUnsupportedByServices: the protocol library has the option but the running services
	// do not offer it yet, so its pods would refuse to start.
	ReasonUnsupportedByServices = "UnsupportedByServices"
	// ReasonVendorIndicesNotContiguous: the selected vendors' indices are not 0..n−1, so they do
	// not form the vendor vector every user's shares are built over.
	ReasonVendorIndicesNotContiguous = "VendorIndicesNotContiguous"
)

// RoundReconciler checks that a round series can run: it selects vendors and shufflers, every
// selected vendor's capacity satisfies the spec's constraints for this series' δ and q, and the
// integrator key resolves.
type RoundReconciler struct {
	client.Client
	Keys     KeyCheck
	Recorder events.EventRecorder
	// Platform says where workloads run; without an image and a NATS URL the reconciler only
	// validates.
	Platform mohito.Platform
	// Services reads the coordinator's figures and the workers' backlog; nil without NATS.
	Services *mohitostatus.Client

	history roundHistory
}

// +kubebuilder:rbac:groups=mohito.obscura.dev,resources=rounds,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=mohito.obscura.dev,resources=rounds/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=mohito.obscura.dev,resources=rounds/scale,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps;services;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete

// Reconcile evaluates one Round series.
func (r *RoundReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var rd mohitov1.Round
	if err := r.Get(ctx, req.NamespacedName, &rd); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := rd.Status.DeepCopy()

	o, vendors, err := r.evaluate(ctx, &rd)
	if err != nil {
		return ctrl.Result{}, err
	}
	poll := time.Duration(0)
	if o.ready && r.Platform.Validate() == nil {
		if o, err = r.applyWorkloads(ctx, &rd, vendors); err != nil {
			return ctrl.Result{}, err
		}
		if r.Services != nil {
			r.observeServices(ctx, &rd)
			poll = pollInterval(&rd)
		}
	}
	res, err := writeStatus(ctx, r.Client, r.Recorder, statusWrite{obj: &rd, before: before, after: &rd.Status,
		conditions: &rd.Status.Conditions, observed: &rd.Status.ObservedGeneration, outcome: o})
	if err == nil && poll > 0 {
		res.RequeueAfter = poll
	}
	return res, err
}

func (r *RoundReconciler) evaluate(ctx context.Context, rd *mohitov1.Round) (outcome, []mohitov1.Vendor, error) {
	rd.Status.Vendors, rd.Status.Shufflers, rd.Status.PaddedCapacity = 0, 0, 0
	rd.Status.ResponseDeadline = &metav1.Duration{Duration: mohito.ResponseDeadline(rd)}
	rd.Status.DeviceAnswerAfter = &metav1.Duration{Duration: contract.DefaultDeviceAnswerAfter(mohito.ResponseDeadline(rd))}

	switch {
	case rd.Spec.Mode == mohitov1.ProtocolPaperLiteral:
		return *degraded(ReasonUnsupportedByServices,
			"mode PaperLiteral exists in the protocol library for benchmarks only; the services run Hardened rounds"), nil, nil
	}
	vendors, o, err := r.selectedVendors(ctx, rd)
	if err != nil || o != nil {
		return deref(o), nil, err
	}
	rd.Status.Vendors = int32(len(vendors))
	for _, v := range vendors {
		rd.Status.PaddedCapacity += int64(v.Spec.Capacity.PaddedEntries)
	}
	if o := checkCapacities(rd, vendors); o != nil {
		return *o, nil, nil
	}
	for i, v := range vendors {
		if v.Spec.Index != int32(i) {
			return *degraded(ReasonVendorIndicesNotContiguous,
				"the %d selected vendors must have indices 0..%d; vendor %s has index %d where %d is missing",
				len(vendors), len(vendors)-1, v.Name, v.Spec.Index, i), nil, nil
		}
	}

	shufflers, _, o, err := r.shufflerRotation(ctx, rd, vendors)
	if err != nil || o != nil {
		return deref(o), nil, err
	}
	rd.Status.Shufflers = int32(len(shufflers))

	format, err := mohitoKeyFormat(rd.Spec.Suite)
	if err != nil {
		return *degraded(common.ReasonInvalidKey, "integrator key: %v", err), nil, nil
	}
	epochs, o, err := r.Keys.check(ctx, rd.Namespace, "integrator key", rd.Spec.Keys, format)
	if err != nil || o != nil {
		return deref(o), nil, err
	}
	setKeyEpochs(r.Recorder, rd, "integrator key", &rd.Status.KeyEpochs, epochs, r.Platform.KeyActivation())
	if o, err := r.Keys.checkSecretFile(ctx, rd.Namespace, "gateway tokens", rd.Spec.Gateway.Tokens, mohito.TokensFile); err != nil || o != nil {
		return deref(o), nil, err
	}
	return ready(fmt.Sprintf("%d vendors (Σ K_v = %d), %d shufflers, period %s",
		len(vendors), rd.Status.PaddedCapacity, len(shufflers), rd.Spec.Period.Duration)), vendors, nil
}

// selectedVendors returns the ready vendors the series selects, or why it cannot use them.
func (r *RoundReconciler) selectedVendors(ctx context.Context, rd *mohitov1.Round) ([]mohitov1.Vendor, *outcome, error) {
	sel, err := metav1.LabelSelectorAsSelector(&rd.Spec.VendorSelector)
	if err != nil {
		return nil, degraded(ReasonInvalidSelector, "vendorSelector: %v", err), nil
	}
	var list mohitov1.VendorList
	if err := r.List(ctx, &list, client.InNamespace(rd.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, nil, fmt.Errorf("list vendors for round %s: %w", rd.Name, err)
	}
	if len(list.Items) == 0 {
		return nil, degraded(ReasonNoVendorsSelected, "vendorSelector %q matches no Vendor in namespace %s", sel, rd.Namespace), nil
	}
	var notReady []string
	for _, v := range list.Items {
		if !isHealthy(v.Status.Conditions) {
			notReady = append(notReady, v.Name)
		}
	}
	if len(notReady) > 0 {
		sort.Strings(notReady)
		return nil, degraded(ReasonVendorNotReady, "selected vendors degraded or not evaluated yet: %s", strings.Join(notReady, ", ")), nil
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Spec.Index < list.Items[j].Spec.Index })
	return list.Items, nil, nil
}

// checkCapacities applies the spec's per-vendor constraints that depend on the series' δ and q:
// every drawn C_v = base + δ + U{0..jitter} must exceed δ and fit in K_v (§3.8, G3), and a
// padded response OKVS must hold q entries per device (G6).
func checkCapacities(rd *mohitov1.Round, vendors []mohitov1.Vendor) *outcome {
	delta := int64(rd.Spec.Delta)
	q := int64(rd.Spec.CommandsPerUser)
	classes := mohito.CapacityClasses(rd)
	if classes != nil {
		if err := classes.Validate(rd.Spec.Period.Duration); err != nil {
			return degraded(ReasonInvalidCapacityClasses, "%v", err)
		}
	}
	pct := classes.MaxPercent()
	for _, v := range vendors {
		c := v.Spec.Capacity
		if c.Base < 1 {
			return degraded(ReasonCapacityTooSmall,
				"vendor %s: capacity.base must be at least 1 so that every C_v exceeds δ = %d", v.Name, delta)
		}
		if need := int64(contract.ScaledBase(uint64(c.Base), pct)) + delta + int64(c.Jitter); int64(c.PaddedEntries) < need {
			return degraded(ReasonCapacityTooSmall,
				"vendor %s: K_v = %d cannot hold C_v up to base %d × %d%% + δ %d + jitter %d = %d",
				v.Name, c.PaddedEntries, c.Base, pct, delta, c.Jitter, need)
		}
		if c.ResponsePaddedEntries > 0 && int64(c.ResponsePaddedEntries) < q*v.Spec.Devices {
			return degraded(ReasonResponseCapacityTooSmall,
				"vendor %s: responsePaddedEntries %d is below q × devices = %d × %d",
				v.Name, c.ResponsePaddedEntries, q, v.Spec.Devices)
		}
	}
	return nil
}

// shufflerRotation returns the healthy Shufflers of positive weight that run for the selected
// vendors and match the series' shuffler selector, and each vendor's weight in the rotation: the
// sum of its Shufflers' effective weights, healthy or not (rendered into the deployment, so it
// changes with the Shufflers' specs, never with their health; the coordinator skips a vendor
// whose shuffler does not answer). A vendor without a Shuffler, or whose Shufflers all have
// weight 0, is out of the rotation and never V* (spec.weight 0 "leaves the rotation"). The Round
// is degraded when nobody shuffles, or when a vendor in the rotation has no healthy Shuffler:
// the rounds that choose it would abort.
func (r *RoundReconciler) shufflerRotation(ctx context.Context, rd *mohitov1.Round, vendors []mohitov1.Vendor) ([]mohitov1.Shuffler, map[string]int64, *outcome, error) {
	sel := labels.Everything()
	if rd.Spec.ShufflerPolicy.Selector != nil {
		s, err := metav1.LabelSelectorAsSelector(rd.Spec.ShufflerPolicy.Selector)
		if err != nil {
			return nil, nil, degraded(ReasonInvalidSelector, "shufflerPolicy.selector: %v", err), nil
		}
		sel = s
	}
	var list mohitov1.ShufflerList
	if err := r.List(ctx, &list, client.InNamespace(rd.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, nil, nil, fmt.Errorf("list shufflers for round %s: %w", rd.Name, err)
	}
	weights := make(map[string]int64, len(vendors))
	for _, v := range vendors {
		weights[v.Name] = 0
	}
	var out []mohitov1.Shuffler
	covered := make(map[string]bool, len(vendors))
	var total int64
	for _, s := range list.Items {
		name := s.Spec.VendorRef.Name
		if _, selected := weights[name]; !selected || s.Status.EffectiveWeight <= 0 {
			continue
		}
		weights[name] += s.Status.EffectiveWeight
		total += s.Status.EffectiveWeight
		if isHealthy(s.Status.Conditions) {
			out = append(out, s)
			covered[name] = true
		}
	}
	if total == 0 {
		return nil, nil, degraded(ReasonNoShufflerAvailable,
			"no Shuffler with a positive weight runs for any of the %d selected vendors: every round needs a shuffler and is never processed without one (spec G7)", len(vendors)), nil
	}
	var unhealthy []string
	for _, v := range vendors {
		if weights[v.Name] > 0 && !covered[v.Name] {
			unhealthy = append(unhealthy, v.Name)
		}
	}
	if len(unhealthy) > 0 {
		return nil, nil, degraded(ReasonNoShufflerAvailable,
			"vendor(s) %s of the %d selected are in the shuffler rotation with no healthy Shuffler: the rounds that choose them would abort until they answer (spec G7)",
			strings.Join(unhealthy, ", "), len(vendors)), nil
	}
	return out, weights, nil, nil
}

// outOfRotation names the selected vendors that never shuffle.
func outOfRotation(vendors []mohitov1.Vendor, weights map[string]int64) []string {
	var out []string
	for _, v := range vendors {
		if weights[v.Name] == 0 {
			out = append(out, v.Name)
		}
	}
	return out
}

// isHealthy is true for an object that has been evaluated and is not degraded: ready, or
// rolling out its workloads. A Round counts its vendors and shufflers by this, since their
// workloads can only roll out once the Round has published its deployment.
func isHealthy(conds []metav1.Condition) bool {
	return meta.IsStatusConditionFalse(conds, common.ConditionDegraded)
}

// SetupWithManager registers the reconciler and its watches. Vendors and Shufflers change the
// outcome of every Round in their namespace; a namespace holds few Rounds.
func (r *RoundReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &mohitov1.Round{}, secretKeyIndex, func(o client.Object) []string {
		rd := o.(*mohitov1.Round)
		names := nonEmpty(secretName(rd.Spec.Keys))
		if t := rd.Spec.Gateway.Tokens; t != nil {
			names = append(names, t.Name)
		}
		return names
	}); err != nil {
		return fmt.Errorf("index rounds by key secret: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&mohitov1.Round{}).
		Owns(&appsv1.Deployment{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Watches(&mohitov1.Vendor{}, handler.EnqueueRequestsFromMapFunc(r.roundsInNamespace)).
		Watches(&mohitov1.Shuffler{}, handler.EnqueueRequestsFromMapFunc(r.roundsInNamespace)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.roundsUsingSecret)).
		Named("round").
		Complete(r)
}

func (r *RoundReconciler) roundsInNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	var list mohitov1.RoundList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		logf.FromContext(ctx).Error(err, "list rounds")
		return nil
	}
	return requestsFor(list.Items, "")
}

func (r *RoundReconciler) roundsUsingSecret(ctx context.Context, o client.Object) []reconcile.Request {
	var list mohitov1.RoundList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{secretKeyIndex: o.GetName()}); err != nil {
		logf.FromContext(ctx).Error(err, "list rounds using secret")
		return nil
	}
	return requestsFor(list.Items, "")
}
