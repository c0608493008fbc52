package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// fieldOwner is the operator's name in server-side apply's managed fields.
const fieldOwner = "obscura-operator"

// applyOwned server-side applies the desired object, owned (and garbage-collected) by owner.
// Server-side apply makes reconciles idempotent: fields the API server defaults, or that other
// controllers own (an HPA's replicas through the Round's scale subresource), are left alone.
// A nil owner applies the object unowned: owner references cannot cross namespaces, so an
// AggregationJob's trust-domain workloads carry labels and the job's finalizer instead.
func applyOwned(ctx context.Context, c client.Client, owner, obj client.Object) error {
	if owner != nil {
		if err := controllerutil.SetControllerReference(owner, obj, c.Scheme()); err != nil {
			return fmt.Errorf("own %T %s: %w", obj, obj.GetName(), err)
		}
	}
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return fmt.Errorf("convert %T %s: %w", obj, obj.GetName(), err)
	}
	// Typed objects carry empty status and null timestamps; applying them would claim fields
	// the operator has no opinion on.
	delete(m, "status")
	unstructured.RemoveNestedField(m, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(m, "spec", "template", "metadata", "creationTimestamp")
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// ensureSecret creates a generated Secret once, owned by owner (unless nil, see applyOwned);
// an existing one is kept as it is, so a generated password never changes under running pods.
func ensureSecret(ctx context.Context, c client.Client, owner client.Object, s *corev1.Secret) error {
	var cur corev1.Secret
	err := c.Get(ctx, client.ObjectKeyFromObject(s), &cur)
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	if owner != nil {
		if err := controllerutil.SetControllerReference(owner, s, c.Scheme()); err != nil {
			return err
		}
	}
	if err := c.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// newPassword is a random NATS password (256 bits, hex).
func newPassword() []byte {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux; a failure is not recoverable
	}
	return []byte(hex.EncodeToString(b))
}

// rollout summarises whether applied workloads have caught up with their spec.
type rollout struct {
	total, available int
	waiting          []string
}

// observe reads a workload back and counts it as available when its controller has seen the
// current generation and every desired replica is updated and ready.
func (ro *rollout) observe(ctx context.Context, c client.Client, obj client.Object) error {
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		if apierrors.IsNotFound(err) {
			ro.total++
			ro.waiting = append(ro.waiting, obj.GetName())
			return nil
		}
		return fmt.Errorf("read back %s: %w", obj.GetName(), err)
	}
	ro.total++
	ok := false
	switch o := obj.(type) {
	case *appsv1.Deployment:
		want := int32(1)
		if o.Spec.Replicas != nil {
			want = *o.Spec.Replicas
		}
		ok = o.Status.ObservedGeneration >= o.Generation && o.Status.UpdatedReplicas >= want && o.Status.AvailableReplicas >= want
	case *appsv1.StatefulSet:
		want := int32(1)
		if o.Spec.Replicas != nil {
			want = *o.Spec.Replicas
		}
		ok = o.Status.ObservedGeneration >= o.Generation && o.Status.UpdatedReplicas >= want && o.Status.ReadyReplicas >= want
	}
	if ok {
		ro.available++
	} else {
		ro.waiting = append(ro.waiting, obj.GetName())
	}
	return nil
}

func (ro rollout) done() bool { return ro.available == ro.total }
