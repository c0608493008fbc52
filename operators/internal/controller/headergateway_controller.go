package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	loisv1 "github.com/obscura-iot/obscura/operators/api/lois/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/loisstatus"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/lois"
)

// Reasons a HeaderGateway reports.
const (
	// ReasonInvalidGateway: the interfaces would refuse the spec (specs/lois.Validate).
	ReasonInvalidGateway = "InvalidGateway"
	// ReasonNATSSecretNotFound: spec.registrar.natsSecret is missing or lacks user/password.
	ReasonNATSSecretNotFound = "NATSSecretNotFound"
	// ReasonValidatedOnly: the operator has no LOIS image or NATS URL; the spec is valid but
	// nothing runs.
	ReasonValidatedOnly = "ValidatedOnly"
	// ReasonPodSecurityForbidsServerInterfaces: server.placement netns in a namespace whose
	// Pod Security admission enforces baseline or restricted, which refuse the SI's pod.
	ReasonPodSecurityForbidsServerInterfaces = "PodSecurityForbidsServerInterfaces"

	// ConditionServerInterfaces says whether the server interfaces the operator runs are
	// ready (server.placement netns), or that they are run by someone else (external).
	ConditionServerInterfaces = "ServerInterfaces"
	// Its reasons.
	ReasonServerInterfacesExternal = "External"
	ReasonServerInterfacesReady    = "Ready"
	ReasonServerInterfacesNotReady = "NotReady"

	// LabelPodSecurityEnforce is the namespace label of Pod Security admission's level.
	LabelPodSecurityEnforce = "pod-security.kubernetes.io/enforce"
)

// HeaderGatewayReconciler runs a LOIS cloud: it checks the spec, runs the cloud interfaces
// (a StatefulSet following the registrar's session stream, the flow key they share, their
// Service), renders the registrar's settings for devices and server interfaces, rotates the
// session record key on spec.registrar.recordKeyRotation (headergateway_recordkey.go), and
// reports what the cloud interfaces count in status.
type HeaderGatewayReconciler struct {
	client.Client
	// APIReader lists the cloud interface pods (the operator keeps no informer on Pods).
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Platform says where the LOIS services run; without an image and a NATS URL the
	// reconciler validates only.
	Platform lois.Platform
	// Services reads what the cloud interfaces report; nil leaves the figures empty.
	Services loisstatus.Source
	// RecordKeyStageDelay is how long a staged record key waits before it becomes current
	// (every pod's mounted Secret has it by then); 0 is 2 minutes. At most half of
	// spec.registrar.recordKeyRotation.
	RecordKeyStageDelay time.Duration
	// RecordKeyRetention is how long a superseded record key stays in its Secret; 0 is the
	// session stream's max age plus an hour (lois.SessionStreamMaxAge, RecordKeySlack).
	RecordKeyRetention time.Duration
}

// +kubebuilder:rbac:groups=lois.obscura.dev,resources=headergateways,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=lois.obscura.dev,resources=headergateways/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=lois.obscura.dev,resources=headergateways/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps;services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=statefulsets;deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create;update;patch;delete

// Reconcile evaluates one HeaderGateway.
func (r *HeaderGatewayReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var g loisv1.HeaderGateway
	if err := r.Get(ctx, req.NamespacedName, &g); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !g.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // owner references remove every object
	}
	before := g.Status.DeepCopy()
	o, err := r.evaluate(ctx, &g)
	if err != nil {
		return ctrl.Result{}, err
	}
	var next time.Duration
	if o.ready {
		if r.Platform.Validate() != nil {
			o = outcome{ready: true, reason: ReasonValidatedOnly, message: r.Platform.Validate().Error() + "; the spec is valid, nothing runs"}
		} else {
			if o, err = r.applyWorkloads(ctx, &g); err != nil {
				return ctrl.Result{}, err
			}
			wake, err := r.rotateRecordKey(ctx, &g)
			if err != nil {
				return ctrl.Result{}, err
			}
			next = r.observe(ctx, &g)
			if wake > 0 && (next == 0 || wake < next) {
				next = wake
			}
		}
	}
	res, err := writeStatus(ctx, r.Client, r.Recorder, statusWrite{obj: &g, before: before, after: &g.Status,
		conditions: &g.Status.Conditions, observed: &g.Status.ObservedGeneration, outcome: o})
	if err == nil && next > 0 {
		res.RequeueAfter = next
	}
	return res, err
}

// evaluate checks that the gateway can run as written.
func (r *HeaderGatewayReconciler) evaluate(ctx context.Context, g *loisv1.HeaderGateway) (outcome, error) {
	if err := lois.Validate(g); err != nil {
		return *degraded(ReasonInvalidGateway, "%v", err), nil
	}
	if lois.RunsServerInterfaces(g) {
		reader := r.APIReader
		if reader == nil {
			reader = r.Client
		}
		var ns corev1.Namespace
		if err := reader.Get(ctx, client.ObjectKey{Name: g.Namespace}, &ns); err != nil {
			return outcome{}, fmt.Errorf("get namespace %s: %w", g.Namespace, err)
		}
		if level := ns.Labels[LabelPodSecurityEnforce]; level != "" && level != "privileged" {
			return *degraded(ReasonPodSecurityForbidsServerInterfaces,
				"server.placement netns: namespace %s enforces the %s pod security level (%s); the server interfaces' pods need privileged (the host network, host paths /dev/net/tun and /run/netns, root with NET_ADMIN and SYS_ADMIN): label it %s=privileged or use server.placement external",
				g.Namespace, level, LabelPodSecurityEnforce, LabelPodSecurityEnforce), nil
		}
	}
	if name := g.Spec.Registrar.NATSSecret; name != "" {
		var s corev1.Secret
		err := r.Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: name}, &s)
		if apierrors.IsNotFound(err) {
			return *degraded(ReasonNATSSecretNotFound, "registrar.natsSecret: Secret %s/%s not found", g.Namespace, name), nil
		}
		if err != nil {
			return outcome{}, fmt.Errorf("get NATS Secret %s/%s: %w", g.Namespace, name, err)
		}
		for _, k := range []string{specs.NATSUserKey, specs.NATSPasswordKey} {
			if len(s.Data[k]) == 0 {
				return *degraded(ReasonNATSSecretNotFound, "registrar.natsSecret: Secret %s/%s has no entry %q", g.Namespace, name, k), nil
			}
		}
	}
	return ready(r.summary(g)), nil
}

func (r *HeaderGatewayReconciler) summary(g *loisv1.HeaderGateway) string {
	pad := string(g.Spec.Padding.Policy)
	if pad == "" {
		pad = string(loisv1.PaddingOff)
	}
	seeds := "seeds in memory only (no registrar.vault)"
	if v := g.Spec.Registrar.Vault; v != nil {
		seeds = "seeds wrapped by Vault Transit key " + v.SeedKey
	}
	sis := "run beside their servers"
	if lois.RunsServerInterfaces(g) {
		sis = "run by the operator in the services' network namespaces"
	}
	return fmt.Sprintf("%d services behind %s:%d; %d cloud interfaces, %d server interfaces per service (%s); padding %s; cloud %s; registrar: %s",
		len(g.Spec.Services), orDefaultString(g.Spec.CloudAddress, "198.18.0.1"), lois.UnifiedPort(g),
		lois.CloudReplicas(g), lois.ServerReplicas(g), sis, pad, lois.Cloud(g), seeds)
}

// applyWorkloads runs the cloud interfaces and the registrar daemon, and renders the
// registrar's settings.
func (r *HeaderGatewayReconciler) applyWorkloads(ctx context.Context, g *loisv1.HeaderGateway) (outcome, error) {
	for _, sec := range []*corev1.Secret{lois.FlowKeySecret(g), lois.RecordKeySecret(g)} {
		if err := ensureSecret(ctx, r.Client, g, sec); err != nil {
			return outcome{}, err
		}
	}
	if lois.GeneratesNATSSecret(g) {
		if err := ensureSecret(ctx, r.Client, g, lois.GeneratedNATSSecret(g, newPassword())); err != nil {
			return outcome{}, err
		}
	}
	ci := lois.CloudInterface(g, r.Platform)
	reg := lois.Registrar(g, r.Platform)
	for _, o := range []client.Object{lois.RegistrarConfigMap(g, r.Platform), lois.CloudService(g), ci,
		lois.RegistrarServiceAccount(g), reg} {
		if err := applyOwned(ctx, r.Client, g, o); err != nil {
			return outcome{}, fmt.Errorf("header gateway %s/%s: %w", g.Namespace, g.Name, err)
		}
	}
	sis := lois.ServerInterfaces(g, r.Platform)
	for _, o := range sis {
		if err := applyOwned(ctx, r.Client, g, o); err != nil {
			return outcome{}, fmt.Errorf("header gateway %s/%s: %w", g.Namespace, g.Name, err)
		}
	}
	if err := r.pruneServerInterfaces(ctx, g, sis); err != nil {
		return outcome{}, err
	}
	var ro rollout
	for _, o := range []client.Object{ci, reg} {
		if err := ro.observe(ctx, r.Client, o); err != nil {
			return outcome{}, err
		}
	}
	var siRo rollout
	g.Status.ServerReplicas = 0
	for _, o := range sis {
		if err := siRo.observe(ctx, r.Client, o); err != nil {
			return outcome{}, err
		}
		g.Status.ServerReplicas += o.Status.ReadyReplicas
	}
	setServerInterfacesCondition(g, sis, siRo)
	g.Status.CloudReplicas = ci.Status.ReadyReplicas
	if !ro.done() || !siRo.done() {
		return rollingOut("%d of %d cloud interfaces ready, registrar %d of 1, %d of %d server interfaces the operator runs; waiting for %s",
			ci.Status.ReadyReplicas, lois.CloudReplicas(g), reg.Status.AvailableReplicas, g.Status.ServerReplicas, len(sis)*int(lois.ServerReplicas(g)),
			strings.Join(append(ro.waiting, siRo.waiting...), ", ")), nil
	}
	return ready(r.summary(g)), nil
}

// setServerInterfacesCondition reports the server interfaces: external ones the operator
// cannot see (the registrar waits for their install acks), its own by their StatefulSets.
func setServerInterfacesCondition(g *loisv1.HeaderGateway, sis []*appsv1.StatefulSet, ro rollout) {
	c := metav1.Condition{Type: ConditionServerInterfaces, ObservedGeneration: g.Generation}
	want := len(sis) * int(lois.ServerReplicas(g))
	switch {
	case len(sis) == 0:
		c.Status, c.Reason = metav1.ConditionUnknown, ReasonServerInterfacesExternal
		c.Message = fmt.Sprintf("server.placement external: the server interfaces %s run beside their servers, not by the operator; the registrar waits for their install acks",
			strings.Join(lois.ServerReplicaNames(g), ", "))
	case ro.done():
		c.Status, c.Reason = metav1.ConditionTrue, ReasonServerInterfacesReady
		c.Message = fmt.Sprintf("%d of %d server interfaces ready in the services' network namespaces", g.Status.ServerReplicas, want)
	default:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonServerInterfacesNotReady
		c.Message = fmt.Sprintf("%d of %d server interfaces ready; waiting for %s (a pod that does not start: its namespace's network namespace missing on the node, or pod security)",
			g.Status.ServerReplicas, want, strings.Join(ro.waiting, ", "))
	}
	meta.SetStatusCondition(&g.Status.Conditions, c)
}

// pruneServerInterfaces deletes the server interface StatefulSets of g that keep is not
// (a service removed, or placement back to external).
func (r *HeaderGatewayReconciler) pruneServerInterfaces(ctx context.Context, g *loisv1.HeaderGateway, keep []*appsv1.StatefulSet) error {
	var list appsv1.StatefulSetList
	if err := r.List(ctx, &list, client.InNamespace(g.Namespace), client.MatchingLabels(lois.PodSelector(g, lois.RoleServer))); err != nil {
		return fmt.Errorf("list server interfaces of header gateway %s/%s: %w", g.Namespace, g.Name, err)
	}
	for i := range list.Items {
		s := &list.Items[i]
		if !metav1.IsControlledBy(s, g) || slices.ContainsFunc(keep, func(k *appsv1.StatefulSet) bool { return k.Name == s.Name }) {
			continue
		}
		if err := r.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete server interface %s/%s: %w", s.Namespace, s.Name, err)
		}
	}
	return nil
}

// observe reads the cloud interfaces' figures, and those of the server interfaces the
// operator runs, into status and returns when to look again. It never fails the reconcile: a
// replica starting or briefly unreachable leaves the figures as they were.
func (r *HeaderGatewayReconciler) observe(ctx context.Context, g *loisv1.HeaderGateway) time.Duration {
	const every = 15 * time.Second
	if r.Services == nil {
		return 0
	}
	r.observeCloud(ctx, g)
	if lois.RunsServerInterfaces(g) {
		r.observeServers(ctx, g)
	} else {
		g.Status.Server, g.Status.PadRatio = nil, ""
	}
	return every
}

func (r *HeaderGatewayReconciler) observeCloud(ctx context.Context, g *loisv1.HeaderGateway) {
	observe(ctx, g, "cloud", r.cloudEndpoints, r.Services.Cloud, applyCloudReport)
}

func (r *HeaderGatewayReconciler) observeServers(ctx context.Context, g *loisv1.HeaderGateway) {
	observe(ctx, g, "server", r.serverEndpoints, r.Services.Server, applyServerReport)
}

// observe reads one kind of interface's figures (role "cloud" or "server") from its pods'
// metrics and applies them to g's status; pods not there yet, or no figures yet, leave it as it
// was.
func observe[R any](ctx context.Context, g *loisv1.HeaderGateway, role string,
	endpoints func(context.Context, *loisv1.HeaderGateway) ([]string, error),
	read func(context.Context, []string) (R, error),
	apply func(*loisv1.HeaderGatewayStatus, R, time.Time)) {
	log := logf.FromContext(ctx)
	eps, err := endpoints(ctx, g)
	if err != nil {
		log.Info(role+" interface pods unavailable", "err", err.Error())
		return
	}
	if len(eps) == 0 {
		return
	}
	rep, err := read(ctx, eps)
	switch {
	case errors.Is(err, loisstatus.ErrNotReported):
		return
	case err != nil:
		log.Info(role+" interface figures unavailable", "err", err.Error())
		return
	}
	apply(&g.Status, rep, time.Now())
}

// applyCloudReport writes a report into status; packets/s is the rate of consumed keystreams
// since the previous observation (none after a replica restarted and counted from zero).
func applyCloudReport(s *loisv1.HeaderGatewayStatus, rep *loisstatus.Report, now time.Time) {
	now = now.Truncate(time.Second)
	if last := s.LastObserved; last != nil && now.After(last.Time) && rep.Consumed >= s.KeystreamsConsumed {
		s.PacketsPerSecond = rate(rep.Consumed-s.KeystreamsConsumed, now.Sub(last.Time))
	}
	s.Devices, s.KeystreamsInstalled, s.KeystreamsConsumed, s.Rejected = rep.Devices, rep.Installed, rep.Consumed, rep.Rejected
	s.LastObserved = &metav1.Time{Time: now}
}

// applyServerReport writes the server interfaces' report into status: their counts, the
// rate of their packets since the previous observation (none after one restarted and
// counted from zero) and the pad ratio of every packet they handled.
func applyServerReport(s *loisv1.HeaderGatewayStatus, rep *loisstatus.ServerReport, now time.Time) {
	now = now.Truncate(time.Second)
	prev := s.Server
	next := &loisv1.ServerInterfaceStatus{Replicas: int32(rep.Replicas), Devices: rep.Devices,
		UploadsRecovered: rep.Uploads, DownloadsHidden: rep.Downloads, CoverReceived: rep.CoverReceived, CoverSent: rep.CoverSent,
		DownloadKeystreams: rep.DownloadKeystreams, Rejected: rep.Rejected, LastObserved: &metav1.Time{Time: now}}
	if prev != nil {
		next.PacketsPerSecond = prev.PacketsPerSecond
		before := prev.UploadsRecovered + prev.DownloadsHidden + prev.CoverReceived + prev.CoverSent
		if last := prev.LastObserved; last != nil && now.After(last.Time) && rep.Packets() >= before {
			next.PacketsPerSecond = rate(rep.Packets()-before, now.Sub(last.Time))
		}
	}
	s.Server = next
	if ratio, ok := rep.PadRatio(); ok {
		s.PadRatio = strconv.FormatFloat(ratio, 'f', 2, 64)
	}
}

// rate is n per d as status shows it ("12.5").
func rate(n int64, d time.Duration) string {
	return strconv.FormatFloat(float64(n)/d.Seconds(), 'f', 1, 64)
}

// serverEndpoints are the metrics listeners of the running server interface pods the
// operator runs (lois.ServerMetricsEndpoint of each pod's service).
func (r *HeaderGatewayReconciler) serverEndpoints(ctx context.Context, g *loisv1.HeaderGateway) ([]string, error) {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	var pods corev1.PodList
	if err := reader.List(ctx, &pods, client.InNamespace(g.Namespace), client.MatchingLabels(lois.PodSelector(g, lois.RoleServer))); err != nil {
		return nil, fmt.Errorf("list server interface pods of header gateway %s/%s: %w", g.Namespace, g.Name, err)
	}
	var eps []string
	for _, pod := range pods.Items {
		if pod.Status.Phase != corev1.PodRunning || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		i, err := strconv.Atoi(pod.Labels[appsv1.PodIndexLabel])
		if err != nil {
			continue
		}
		for _, s := range g.Spec.Services {
			if strconv.Itoa(int(s.Port)) == pod.Labels[lois.LabelService] {
				if ep := lois.ServerMetricsEndpoint(s, i); ep != "" && !slices.Contains(eps, ep) {
					eps = append(eps, ep)
				}
			}
		}
	}
	return eps, nil
}

// cloudEndpoints are the metrics listeners of the cloud interface pods that run.
func (r *HeaderGatewayReconciler) cloudEndpoints(ctx context.Context, g *loisv1.HeaderGateway) ([]string, error) {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	var pods corev1.PodList
	if err := reader.List(ctx, &pods, client.InNamespace(g.Namespace), client.MatchingLabels(lois.PodSelector(g, lois.RoleCloud))); err != nil {
		return nil, fmt.Errorf("list cloud interface pods of header gateway %s/%s: %w", g.Namespace, g.Name, err)
	}
	var eps []string
	prefix := lois.Name(g, lois.RoleCloud) + "-"
	for _, pod := range pods.Items {
		ord, err := strconv.Atoi(strings.TrimPrefix(pod.Name, prefix))
		if err != nil || pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		eps = append(eps, lois.MetricsEndpoint(g, r.Platform, pod.Status.PodIP, ord))
	}
	return eps, nil
}

// SetupWithManager registers the reconciler and its watches.
func (r *HeaderGatewayReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&loisv1.HeaderGateway{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&appsv1.Deployment{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			var list loisv1.HeaderGatewayList
			if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
				return nil
			}
			var reqs []reconcile.Request
			for _, g := range list.Items {
				if g.Spec.Registrar.NATSSecret == o.GetName() {
					reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&g)})
				}
			}
			return reqs
		})).
		Named("headergateway").
		Complete(r)
}
