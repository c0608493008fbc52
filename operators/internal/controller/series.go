package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// ReasonMultipleSeries: more than one Round selects a vendor; a vendor's roles serve one series.
const ReasonMultipleSeries = "MultipleSeries"

// series is the Round series a vendor belongs to, with the deployment its roles read.
type series struct {
	round      *mohitov1.Round
	configHash string
}

// seriesOf finds the Round that selects vendor v. It returns nil without an outcome when no
// Round selects v (the vendor then runs nothing yet), a rolling-out outcome while the Round has
// not written its deployment, and a degraded one when several Rounds select v.
func seriesOf(ctx context.Context, c client.Client, v *mohitov1.Vendor) (*series, *outcome, error) {
	var rounds mohitov1.RoundList
	if err := c.List(ctx, &rounds, client.InNamespace(v.Namespace)); err != nil {
		return nil, nil, fmt.Errorf("list rounds for vendor %s: %w", v.Name, err)
	}
	var matched []*mohitov1.Round
	for i := range rounds.Items {
		sel, err := metav1.LabelSelectorAsSelector(&rounds.Items[i].Spec.VendorSelector)
		if err == nil && sel.Matches(labels.Set(v.Labels)) {
			matched = append(matched, &rounds.Items[i])
		}
	}
	switch len(matched) {
	case 0:
		return nil, nil, nil
	case 1:
	default:
		names := make([]string, len(matched))
		for i, r := range matched {
			names[i] = r.Name
		}
		sort.Strings(names)
		return nil, degraded(ReasonMultipleSeries, "vendor %s is selected by Rounds %s; its roles can serve one series",
			v.Name, strings.Join(names, ", ")), nil
	}
	rd := matched[0]
	var cm corev1.ConfigMap
	err := c.Get(ctx, client.ObjectKey{Namespace: rd.Namespace, Name: mohito.DeploymentConfigName(rd)}, &cm)
	if apierrors.IsNotFound(err) {
		o := rollingOut("waiting for Round %s to publish its deployment", rd.Name)
		return nil, &o, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("get deployment of round %s: %w", rd.Name, err)
	}
	return &series{round: rd, configHash: mohito.ConfigHash(cm.Data[contract.DeploymentKey])}, nil, nil
}

// vendorsOfRoundChange maps a Round or its deployment ConfigMap to every object of the
// namespace listed by list: vendor roles follow their series' parameters.
func vendorsOfRoundChange[L client.ObjectList](c client.Client, newList func() L, requests func(L) []reconcile.Request) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		if _, isCM := o.(*corev1.ConfigMap); isCM && o.GetLabels()[specs.LabelComponent] != "config" {
			return nil
		}
		list := newList()
		if err := c.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
			logf.FromContext(ctx).Error(err, "list objects following a round series")
			return nil
		}
		return requests(list)
	}
}
