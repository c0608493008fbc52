package controller

import (
	"context"
	"fmt"

	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs/mohito"
)

// applyWorkloads runs the shuffler in its vendor's trust domain (the vendor's key, NATS user
// and service account) with the parameters of the vendor's series.
func (r *ShufflerReconciler) applyWorkloads(ctx context.Context, s *mohitov1.Shuffler, v *mohitov1.Vendor) (outcome, error) {
	sr, o, err := seriesOf(ctx, r.Client, v)
	if err != nil || o != nil {
		return deref(o), err
	}
	if sr == nil {
		return ready(fmt.Sprintf("vendor %s is in no Round series yet, so the shuffler does not run", v.Name)), nil
	}
	d := mohito.Shuffler(s, v, sr.round, r.Platform, sr.configHash)
	if err := applyOwned(ctx, r.Client, s, d); err != nil {
		return outcome{}, err
	}
	var ro rollout
	if err := ro.observe(ctx, r.Client, d); err != nil {
		return outcome{}, err
	}
	if !ro.done() {
		return rollingOut("shuffler %s is not available yet", d.Name), nil
	}
	return ready(fmt.Sprintf("shuffles for vendor %s (index %d) in series %s with weight %d",
		v.Name, v.Spec.Index, sr.round.Name, s.Status.EffectiveWeight)), nil
}
