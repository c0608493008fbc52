package controller

import (
	"context"
	"fmt"
	"strings"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// applyWorkloads creates or updates everything a Round series runs (specs describes it) and
// reports whether the workloads have caught up.
func (r *RoundReconciler) applyWorkloads(ctx context.Context, rd *mohitov1.Round, vendors []mohitov1.Vendor) (outcome, error) {
	_, weights, o, err := r.shufflerRotation(ctx, rd, vendors)
	if err != nil || o != nil {
		return deref(o), err
	}
	doc, err := mohito.Deployment(rd, vendors, weights)
	if err != nil {
		return *degraded(ReasonVendorIndicesNotContiguous, "%v", err), nil
	}
	cm, hash, err := mohito.DeploymentConfigMap(rd, doc)
	if err != nil {
		return outcome{}, err
	}
	if err := ensureSecret(ctx, r.Client, rd, mohito.RoundNATSSecret(rd, newPassword())); err != nil {
		return outcome{}, err
	}
	workers := workerReplicas(rd)
	if rd.Spec.DecryptWorkers.Replicas == nil {
		// Initialise the scale subresource so an HPA or kubectl can read it.
		if err := r.setWorkerReplicas(ctx, rd, workers); err != nil {
			return outcome{}, err
		}
	}
	coordinator, gateway := mohito.Coordinator(rd, r.Platform, hash), mohito.Gateway(rd, r.Platform, hash)
	decrypt, responder := mohito.DecryptWorkers(rd, r.Platform, hash, workers), mohito.Responder(rd, r.Platform, hash)
	encoders := mohito.Encoders(rd, r.Platform, mohito.EncoderConfigHash(cm.Data[contract.DeploymentKey]))
	objs := []client.Object{cm, mohito.IntegratorServiceAccount(rd), coordinator, gateway, mohito.GatewayService(rd),
		decrypt, responder, encoders, mohito.EncoderService(rd)}
	for _, pdb := range mohito.DisruptionBudgets(rd) {
		objs = append(objs, pdb)
	}
	for _, o := range objs {
		if err := applyOwned(ctx, r.Client, rd, o); err != nil {
			return outcome{}, fmt.Errorf("round %s/%s: %w", rd.Namespace, rd.Name, err)
		}
	}
	rd.Status.WorkerReplicas = workers
	rd.Status.WorkerSelector = mohito.WorkerSelector(rd)

	var ro rollout
	for _, w := range []client.Object{coordinator, gateway, decrypt, responder, encoders} {
		if err := ro.observe(ctx, r.Client, w); err != nil {
			return outcome{}, err
		}
	}
	if !ro.done() {
		return rollingOut("%d of %d workloads available; waiting for %s", ro.available, ro.total, strings.Join(ro.waiting, ", ")), nil
	}
	msg := fmt.Sprintf("%d vendors, %d decrypt workers, %d encoder partitions, %d gateways; period %s",
		len(vendors), workers, rd.Spec.Encoders.Partitions, rd.Spec.Gateway.Replicas, rd.Spec.Period.Duration)
	if out := outOfRotation(vendors, weights); len(out) > 0 {
		msg += fmt.Sprintf("; out of the shuffler rotation (no Shuffler of positive weight): %s", strings.Join(out, ", "))
	}
	return ready(msg), nil
}

// workerReplicas is the decryption worker count to run: spec.decryptWorkers.replicas (what the
// scale subresource holds) clamped to [min, max], or min before it is initialised.
func workerReplicas(rd *mohitov1.Round) int32 {
	dw := rd.Spec.DecryptWorkers
	if dw.Replicas == nil {
		return max(dw.Min, 1)
	}
	return min(max(*dw.Replicas, dw.Min), dw.Max)
}

// setWorkerReplicas writes the worker count into the Round's spec through the scale
// subresource, as an HPA would: the scale subresource then always shows the real count.
func (r *RoundReconciler) setWorkerReplicas(ctx context.Context, rd *mohitov1.Round, n int32) error {
	scale := &autoscalingv1.Scale{}
	scale.Name, scale.Namespace, scale.ResourceVersion = rd.Name, rd.Namespace, rd.ResourceVersion
	scale.Spec.Replicas = n
	if err := r.SubResource("scale").Update(ctx, rd, client.WithSubResourceBody(scale)); err != nil {
		return fmt.Errorf("scale round %s/%s decrypt workers to %d: %w", rd.Namespace, rd.Name, n, err)
	}
	// Carry on with the Round as it now is, so this reconcile's status write (which records
	// the scaling time) does not conflict with the write just made.
	rd.ResourceVersion = scale.ResourceVersion
	rd.Spec.DecryptWorkers.Replicas = &n
	return nil
}
