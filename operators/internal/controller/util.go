package controller

import (
	"context"
	"fmt"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// requestsFor turns a list of objects into reconcile requests, leaving out the one named skip.
func requestsFor[T any, PT interface {
	*T
	client.Object
}](items []T, skip string) []reconcile.Request {
	reqs := make([]reconcile.Request, 0, len(items))
	for i := range items {
		o := PT(&items[i])
		if o.GetName() == skip {
			continue
		}
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
	}
	return reqs
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

func deref(o *outcome) outcome {
	if o == nil {
		return outcome{}
	}
	return *o
}

// truncate shortens s to at most n bytes on a rune boundary, marking the cut with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// addFinalizer adds finalizer to obj unless it is there. A conflict ends this reconcile without
// an error (stop): someone changed the object since it was read, and the watch event for that
// change reconciles it again with fresh data — as writeStatus does for a status conflict.
func addFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) (stop bool, err error) {
	if controllerutil.ContainsFinalizer(obj, finalizer) {
		return false, nil
	}
	controllerutil.AddFinalizer(obj, finalizer)
	if err := c.Update(ctx, obj); err != nil {
		if apierrors.IsConflict(err) {
			return true, nil
		}
		return false, fmt.Errorf("add finalizer to %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), err)
	}
	return false, nil
}
