package controller

import (
	"sigs.k8s.io/controller-runtime/pkg/client"
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
