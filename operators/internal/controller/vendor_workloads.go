package controller

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs/mohito"
)

// applyWorkloads gives the vendor its NATS credentials and service account and, when the
// operator hosts its agent, the agent Deployment of the series that selects it.
func (r *VendorReconciler) applyWorkloads(ctx context.Context, v *mohitov1.Vendor, validated outcome) (outcome, error) {
	if err := ensureSecret(ctx, r.Client, v, mohito.VendorNATSSecret(v, newPassword(), newPassword())); err != nil {
		return outcome{}, err
	}
	if err := applyOwned(ctx, r.Client, v, mohito.VendorServiceAccount(v)); err != nil {
		return outcome{}, err
	}
	if v.Spec.Agent == nil {
		return validated, nil
	}
	sr, o, err := seriesOf(ctx, r.Client, v)
	if err != nil || o != nil {
		return deref(o), err
	}
	if sr == nil {
		return ready(fmt.Sprintf("vendor index %d: no Round selects it yet, so its agent does not run", v.Spec.Index)), nil
	}
	agent := mohito.VendorAgent(v, sr.round, r.Platform, sr.configHash)
	if err := applyOwned(ctx, r.Client, v, agent); err != nil {
		return outcome{}, err
	}
	var ro rollout
	if err := ro.observe(ctx, r.Client, agent); err != nil {
		return outcome{}, err
	}
	if !ro.done() {
		return rollingOut("vendor agent %s is not available yet", agent.Name), nil
	}
	return ready(fmt.Sprintf("vendor index %d in series %s, agent running", v.Spec.Index, sr.round.Name)), nil
}

// registry keeps the finalizer that removes the vendor's registration when the Vendor goes.
// done is true when the Vendor is being deleted and nothing else is to be done.
func (r *VendorReconciler) registry(ctx context.Context, v *mohitov1.Vendor) (done bool, err error) {
	if !v.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(v, registryFinalizer) {
			return true, nil
		}
		if err := r.Services.Deregister(ctx, v.Spec.Index); err != nil {
			return true, err
		}
		controllerutil.RemoveFinalizer(v, registryFinalizer)
		if err := r.Update(ctx, v); err != nil {
			return true, client.IgnoreNotFound(err)
		}
		return true, nil
	}
	if controllerutil.AddFinalizer(v, registryFinalizer) {
		if err := r.Update(ctx, v); err != nil {
			return false, fmt.Errorf("add registry finalizer to vendor %s: %w", v.Name, err)
		}
	}
	return false, nil
}
