package controller

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	ppsv1 "github.com/obscura-iot/obscura/operators/api/pps/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/pps"
)

// PipelineFinalizer holds a SecurePipeline until its objects in both trust domains are deleted.
const PipelineFinalizer = "pps.obscura.dev/workloads"

// ReasonScaled (Event): the broker's replicas or evaluator workers changed.
const ReasonScaled = "Scaled"

// applyWorkloads renders the pipelines file into both domains, keeps the NATS users in step
// with the publishers and subscribers, runs the broker and the garbler, and reports whether
// they have caught up.
func (r *SecurePipelineReconciler) applyWorkloads(ctx context.Context, p *ppsv1.SecurePipeline) (outcome, error) {
	brokerCM, err := pps.PipelinesConfigMap(p, pps.BrokerDomain)
	if err != nil {
		return *degraded(ReasonInvalidPipeline, "%v", err), nil
	}
	garblerCM, err := pps.PipelinesConfigMap(p, pps.GarblerDomain)
	if err != nil {
		return *degraded(ReasonInvalidPipeline, "%v", err), nil
	}
	if err := r.syncNATSSecret(ctx, p); err != nil {
		return outcome{}, err
	}
	h := pps.ConfigHash(brokerCM)
	broker, garbler := pps.Broker(p, r.Platform, h), pps.Garbler(p, r.Platform, h)
	r.recordScale(ctx, p, broker)
	// The broker's domain is the pipeline's namespace: its objects are owned (and garbage-
	// collected) by the pipeline. The garbler's are reached by labels and the finalizer.
	for _, o := range []client.Object{brokerCM, pps.ServiceAccount(p, pps.BrokerDomain), broker, pps.BrokerService(p)} {
		if err := applyOwned(ctx, r.Client, p, o); err != nil {
			return outcome{}, fmt.Errorf("secure pipeline %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	for _, o := range []client.Object{garblerCM, pps.ServiceAccount(p, pps.GarblerDomain), garbler, pps.GarblerService(p), pps.GarblerNetworkPolicy(p)} {
		if err := applyOwned(ctx, r.Client, nil, o); err != nil {
			return outcome{}, fmt.Errorf("secure pipeline %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	if err := r.prune(ctx, p); err != nil {
		return outcome{}, err
	}
	p.Status.Workers = max(p.Spec.Broker.Replicas, 1) * pps.Workers(p)

	var ro rollout
	for _, w := range []client.Object{broker, garbler} {
		if err := ro.observe(ctx, r.Client, w); err != nil {
			return outcome{}, err
		}
	}
	if !ro.done() {
		return rollingOut("%d of %d workloads available; waiting for %s", ro.available, ro.total, strings.Join(ro.waiting, ", ")), nil
	}
	return ready(r.summary(p)), nil
}

// recordScale records an Event when the broker's replicas or workers change.
func (r *SecurePipelineReconciler) recordScale(ctx context.Context, p *ppsv1.SecurePipeline, want *appsv1.Deployment) {
	var cur appsv1.Deployment
	if err := r.Get(ctx, client.ObjectKeyFromObject(want), &cur); err != nil || cur.Spec.Replicas == nil {
		return
	}
	workers := func(d *appsv1.Deployment) string {
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == specs.Env(pps.FlagWorkers) {
				return e.Value
			}
		}
		return "?"
	}
	from, to := fmt.Sprintf("%d×%s", *cur.Spec.Replicas, workers(&cur)), fmt.Sprintf("%d×%s", *want.Spec.Replicas, workers(want))
	if from == to {
		return
	}
	r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, ReasonScaled, "Scale",
		"broker evaluator workers %s → %s (replicas × workers per pod)", from, to)
	logf.FromContext(ctx).Info("broker scaled", "from", from, "to", to)
}

// syncNATSSecret keeps the pipeline's NATS credentials Secret in step with its spec: one user
// per listed device (a device removed loses its user), the subscribers and the function id
// the accounts renderer grants the output to. Existing passwords never change under running
// clients.
func (r *SecurePipelineReconciler) syncNATSSecret(ctx context.Context, p *ppsv1.SecurePipeline) error {
	want := pps.NATSSecret(p, p.Status.FnID, func(string) []byte { return newPassword() })
	var cur corev1.Secret
	err := r.Get(ctx, client.ObjectKeyFromObject(want), &cur)
	if apierrors.IsNotFound(err) {
		if err := controllerutil.SetControllerReference(p, want, r.Scheme()); err != nil {
			return err
		}
		if err := r.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create Secret %s/%s: %w", want.Namespace, want.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("get Secret %s/%s: %w", want.Namespace, want.Name, err)
	}
	orig := cur.DeepCopy()
	if cur.Data == nil {
		cur.Data = map[string][]byte{}
	}
	for k, v := range want.Data {
		if _, ok := cur.Data[k]; !ok {
			cur.Data[k] = v
		}
	}
	for k := range cur.Data {
		if _, ok := want.Data[k]; !ok {
			delete(cur.Data, k)
		}
	}
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	for _, a := range []string{specs.AnnotationNATSAccount, specs.AnnotationPPSSubscribers, specs.AnnotationPPSFn} {
		if v, ok := want.Annotations[a]; ok {
			cur.Annotations[a] = v
		} else {
			delete(cur.Annotations, a)
		}
	}
	if cur.Labels == nil {
		cur.Labels = map[string]string{}
	}
	maps.Copy(cur.Labels, want.Labels)
	if maps.EqualFunc(orig.Data, cur.Data, func(a, b []byte) bool { return string(a) == string(b) }) &&
		maps.Equal(orig.Annotations, cur.Annotations) && maps.Equal(orig.Labels, cur.Labels) {
		return nil
	}
	if err := r.Update(ctx, &cur); err != nil {
		return fmt.Errorf("update Secret %s/%s: %w", cur.Namespace, cur.Name, err)
	}
	return nil
}

// ppsKinds are the kinds the operator creates for a pipeline.
func ppsKinds() []client.ObjectList {
	return []client.ObjectList{&appsv1.DeploymentList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{},
		&corev1.SecretList{}, &corev1.ServiceAccountList{}, &networkingv1.NetworkPolicyList{}}
}

// objects lists every object labelled as the pipeline's, in any namespace (labelled).
func (r *SecurePipelineReconciler) objects(ctx context.Context, p *ppsv1.SecurePipeline) ([]client.Object, error) {
	return labelled(ctx, r.APIReader, r.Client, ppsKinds(), pps.Selector(p), "secure pipeline "+p.Namespace+"/"+p.Name)
}

// prune deletes the pipeline's objects left in a namespace it no longer uses (the garbler
// moved to another trust domain).
func (r *SecurePipelineReconciler) prune(ctx context.Context, p *ppsv1.SecurePipeline) error {
	objs, err := r.objects(ctx, p)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if ns := o.GetNamespace(); ns == p.Namespace || ns == p.Spec.Garbler.Namespace {
			continue
		}
		if err := deleteBackground(ctx, r.Client, o); err != nil {
			return err
		}
	}
	return nil
}

// finalize deletes the pipeline's objects in both trust domains, then lets it go. The garbler's
// Redis and the NATS streams stay: they belong to their domains, not to the operator.
func (r *SecurePipelineReconciler) finalize(ctx context.Context, p *ppsv1.SecurePipeline) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(p, PipelineFinalizer) {
		return ctrl.Result{}, nil
	}
	objs, err := r.objects(ctx, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, o := range objs {
		if err := deleteBackground(ctx, r.Client, o); err != nil {
			return ctrl.Result{}, err
		}
	}
	if len(objs) > 0 {
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, "WorkloadsDeleted", "Delete",
			"deleted %d objects in namespaces %s and %s", len(objs), p.Namespace, p.Spec.Garbler.Namespace)
	}
	controllerutil.RemoveFinalizer(p, PipelineFinalizer)
	if err := r.Update(ctx, p); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Gone, or changed since it was read: the watch event for the change reconciles
			// it again with fresh data (as writeStatus does for a status conflict).
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("remove finalizer of secure pipeline %s/%s: %w", p.Namespace, p.Name, err)
	}
	return ctrl.Result{}, nil
}

// brokerEndpoints are the metrics listeners of the broker pods that run.
func (r *SecurePipelineReconciler) brokerEndpoints(ctx context.Context, p *ppsv1.SecurePipeline) ([]string, error) {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	var pods corev1.PodList
	if err := reader.List(ctx, &pods, client.InNamespace(p.Namespace), client.MatchingLabels(pps.PodSelector(p, pps.RoleBroker))); err != nil {
		return nil, fmt.Errorf("list broker pods of secure pipeline %s/%s: %w", p.Namespace, p.Name, err)
	}
	port := r.MetricsPort
	if port == 0 {
		port = specs.MetricsPort
	}
	var eps []string
	for _, pod := range pods.Items {
		if pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "" && pod.DeletionTimestamp.IsZero() {
			eps = append(eps, pod.Status.PodIP+":"+strconv.Itoa(port))
		}
	}
	return eps, nil
}
