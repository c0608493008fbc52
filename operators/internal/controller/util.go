package controller

import (
	"unicode/utf8"

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
