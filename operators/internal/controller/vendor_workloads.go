package controller

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/mohito"
)

// ReasonInvalidDeviceRegistry: the agent's device registry cannot be read, so no device gets
// a NATS login from it.
const ReasonInvalidDeviceRegistry = "InvalidDeviceRegistry"

// applyWorkloads gives the vendor its NATS credentials and service account and, when the
// operator hosts its agent, the agent Deployment of the series that selects it.
func (r *VendorReconciler) applyWorkloads(ctx context.Context, v *mohitov1.Vendor, validated outcome) (outcome, error) {
	if o, err := r.syncNATSSecret(ctx, v); err != nil || o != nil {
		return deref(o), err
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

// registryDevices are the device ids of the vendor's device registry (spec.agent.devices),
// none without one.
func (r *VendorReconciler) registryDevices(ctx context.Context, v *mohitov1.Vendor) ([]string, *outcome, error) {
	if v.Spec.Agent == nil || v.Spec.Agent.Devices == nil {
		return nil, nil, nil
	}
	ref := v.Spec.Agent.Devices
	key := ref.Key
	if key == "" {
		key = mohito.DevicesFile
	}
	var s corev1.Secret
	if err := r.Get(ctx, client.ObjectKey{Namespace: v.Namespace, Name: ref.Name}, &s); err != nil {
		return nil, nil, fmt.Errorf("get device registry Secret %s/%s: %w", v.Namespace, ref.Name, err)
	}
	ids, err := mohito.RegistryDeviceIDs(s.Data[key])
	if err != nil {
		return nil, degraded(ReasonInvalidDeviceRegistry, "device registry Secret %s/%s key %q: %v", v.Namespace, ref.Name, key, err), nil
	}
	return ids, nil, nil
}

// syncNATSSecret keeps the vendor's NATS credentials in step with its device registry: the
// service user's password and every registered device's password are kept, a device new to
// the registry is issued its own login, and a device gone from it loses its entries (revoked:
// the accounts reconciler renders it out and the reloader reloads the server). A shared
// device login an older operator issued (device-user, device-password) is removed.
func (r *VendorReconciler) syncNATSSecret(ctx context.Context, v *mohitov1.Vendor) (*outcome, error) {
	ids, o, err := r.registryDevices(ctx, v)
	if err != nil || o != nil {
		return o, err
	}
	var cur corev1.Secret
	name := mohito.NATSSecretName(v.Name)
	err = r.Get(ctx, client.ObjectKey{Namespace: v.Namespace, Name: name}, &cur)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("get Secret %s/%s: %w", v.Namespace, name, err)
	}
	found := err == nil
	password := newPassword()
	if pw := cur.Data[specs.NATSPasswordKey]; found && len(pw) > 0 {
		password = pw
	}
	devices := make(map[string][]byte, len(ids))
	for _, id := range ids {
		if pw := cur.Data[id+specs.DevicePasswordSuffix]; len(pw) > 0 {
			devices[id] = pw
		} else {
			devices[id] = newPassword()
		}
	}
	want := mohito.VendorNATSSecret(v, password, devices)
	if !found {
		return nil, ensureSecret(ctx, r.Client, v, want)
	}
	if err := completeSecret(ctx, r.Client, &cur, want); err != nil {
		return nil, err
	}
	stale := false
	for k := range cur.Data {
		_, keep := want.Data[k]
		device := strings.HasSuffix(k, specs.DeviceUserSuffix) || strings.HasSuffix(k, specs.DevicePasswordSuffix) ||
			k == "device-user" || k == "device-password"
		if !keep && device {
			delete(cur.Data, k)
			stale = true
		} else if keep && device && !bytes.Equal(cur.Data[k], want.Data[k]) {
			cur.Data[k] = want.Data[k]
			stale = true
		}
	}
	if !stale {
		return nil, nil
	}
	if err := r.Update(ctx, &cur); err != nil {
		return nil, fmt.Errorf("revoke devices in Secret %s/%s: %w", v.Namespace, name, err)
	}
	return nil, nil
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
