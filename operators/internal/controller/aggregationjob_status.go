package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/obscura-iot/obscura/operators/api/common"
	pdav1 "github.com/obscura-iot/obscura/operators/api/pda/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/pdastatus"
	"github.com/obscura-iot/obscura/operators/internal/specs/pda"
	pdacontract "github.com/obscura-iot/obscura/services/pkg/pda/contract"
)

// Reasons about the window.
const (
	// ReasonServicesNotObserved: the window has closed but the operator has no NATS
	// connection, so it cannot see the services take the window past Collecting.
	ReasonServicesNotObserved = "ServicesNotObserved"
	// ReasonWindowFailed: the window cannot complete (the reason's message says why).
	ReasonWindowFailed = "WindowFailed"
	// ReasonResultsPublished (Event): the revealed keys were written to the sink.
	ReasonResultsPublished = "ResultsPublished"
)

// maxSinkBytes keeps a result under the 1 MiB limit of a ConfigMap or Secret, with room for
// the one-key-per-line copy.
const maxSinkBytes = 480 << 10

// phaseOrder ranks the phases: a job never moves back, even if KV briefly loses an entry.
var phaseOrder = []pdav1.Phase{pdav1.PhasePending, pdav1.PhaseCollecting, pdav1.PhaseMixing,
	pdav1.PhaseAggregating, pdav1.PhaseRevealing, pdav1.PhaseComplete}

func later(a, b pdav1.Phase) pdav1.Phase {
	if slices.Index(phaseOrder, b) > slices.Index(phaseOrder, a) {
		return b
	}
	return a
}

// advance moves the window through its phases: Pending and Collecting from the clock, then
// Mixing → Aggregating → Revealing → Complete from what the services report in NATS KV:
//
//	pda_windows/<w>        state sealed       the mixer forwarded the whole window: Aggregating
//	pda_db_windows/<w>.seal present           the front-end has every chunk; shards evaluate
//	                                          and reveal: Revealing
//	pda_results/<w>        present            merged result of every shard: Complete
//
// It returns the outcome to report and when to look again.
func (r *AggregationJobReconciler) advance(ctx context.Context, job *pdav1.AggregationJob, start, end metav1.Time, o outcome) (outcome, time.Duration) {
	now := time.Now()
	length, w := pda.Window(start, end)
	id := int64(w)
	job.Status.Window = &id
	prev := job.Status.Phase
	phase, why := prev, ""
	var next time.Duration
	poll := min(max(length.Duration/60, time.Second), 15*time.Second)

	switch {
	case prev == pdav1.PhaseComplete || prev == pdav1.PhaseFailed:
	case now.Before(start.Time):
		phase, why, next = pdav1.PhasePending, "the window opens at "+start.UTC().Format(time.RFC3339), start.Sub(now)
	case now.Before(end.Time):
		phase, why, next = later(prev, pdav1.PhaseCollecting), "participants submit until "+end.UTC().Format(time.RFC3339), end.Sub(now)
		if job.Spec.ShardAutoscale != nil && r.Services != nil {
			// The shard autoscaler follows what the window pools while it collects.
			next = min(next, poll)
		}
	case r.Services == nil:
		phase = later(prev, pdav1.PhaseCollecting)
		o = outcome{ready: true, progressing: true, reason: ReasonServicesNotObserved, message: fmt.Sprintf(
			"the window closed at %s; the operator has no NATS connection (--nats-url) to read the services' progress "+
				"(KV %s, %s, %s), so it cannot report Mixing, Aggregating, Revealing or Complete",
			end.UTC().Format(time.RFC3339), pdacontract.WindowsBucket, pdacontract.DBWindowsBucket, pdacontract.ResultsBucket)}
	default:
		observed, what, failed := r.observe(ctx, job, w)
		if failed != "" {
			phase, why = pdav1.PhaseFailed, failed
		} else {
			phase, why = later(later(prev, pdav1.PhaseMixing), observed), what
		}
		next = poll
	}
	if r.Services != nil && phase != pdav1.PhaseComplete && phase != pdav1.PhaseFailed {
		r.observeRing(ctx, job, w)
	}
	if phase == pdav1.PhaseComplete && job.Status.ResultsPublished == nil {
		if failed := r.publishResults(ctx, job, w); failed != "" {
			phase, why = pdav1.PhaseFailed, failed
		}
	}
	if phase == pdav1.PhaseFailed {
		msg := why
		if msg == "" {
			msg = "the window failed"
		}
		if c := meta.FindStatusCondition(job.Status.Conditions, common.ConditionReady); prev == pdav1.PhaseFailed && c != nil {
			msg = c.Message
		}
		o = *degraded(ReasonWindowFailed, "%s", msg)
		next = 0
	}
	if phase != prev {
		job.Status.Phase = phase
		kind := corev1.EventTypeNormal
		if phase == pdav1.PhaseFailed {
			kind = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(job, nil, kind, string(phase), "Phase", "%s → %s: %s", prev, phase, why)
		logf.FromContext(ctx).Info("phase", "from", prev, "to", phase, "window", w)
	}
	if next > 0 {
		next = max(next, 100*time.Millisecond)
	}
	return o, next
}

// observe reads how far the services have taken window w. It never fails the reconcile: NATS
// may be briefly away, and the phase then stays where it is.
func (r *AggregationJobReconciler) observe(ctx context.Context, job *pdav1.AggregationJob, w uint64) (phase pdav1.Phase, why, failed string) {
	log := logf.FromContext(ctx)
	phase, why = pdav1.PhaseMixing, "the proxy mixer shuffles the window"
	res, raw, err := r.Services.Result(ctx, w)
	switch {
	case err == nil:
		if res.Window != w {
			return phase, why, fmt.Sprintf("%s/%d holds the result of window %d", pdacontract.ResultsBucket, w, res.Window)
		}
		job.Status.RevealedKeys = int64(len(res.Revealed))
		job.Status.RingVersion, job.Status.RingShards = int64(res.RingVersion), int32(len(res.Shards))
		phase, why = pdav1.PhaseComplete, fmt.Sprintf("%d keys met τ = %d", len(res.Revealed), job.Spec.Threshold)
	case raw != nil:
		return phase, why, fmt.Sprintf("the services' result of window %d does not decode: %v", w, err)
	case !errors.Is(err, pdastatus.ErrNotReported):
		log.Info("window result unavailable", "window", w, "err", err.Error())
	}
	rec, err := r.Services.Window(ctx, w)
	switch {
	case err == nil && rec.State == pdacontract.WindowSealed:
		job.Status.Submissions = int64(rec.Total)
		if phase == pdav1.PhaseMixing {
			phase, why = pdav1.PhaseAggregating, fmt.Sprintf("the mixer forwarded %d items as one permutation; the database ingests them", rec.Total)
		}
	case err != nil && !errors.Is(err, pdastatus.ErrNotReported):
		log.Info("window state unavailable", "window", w, "err", err.Error())
	}
	if phase == pdav1.PhaseAggregating || phase == pdav1.PhaseMixing {
		sealed, err := r.Services.DBSealed(ctx, w)
		if err != nil {
			log.Info("database window state unavailable", "window", w, "err", err.Error())
		}
		if sealed {
			phase, why = pdav1.PhaseRevealing, "the database has the whole window; shards evaluate the threshold and reveal through the oracle"
		}
	}
	return phase, why, ""
}

// observeRing reports the ring in force: the one pinned for the window once the database
// routes it, the current one before.
func (r *AggregationJobReconciler) observeRing(ctx context.Context, job *pdav1.AggregationJob, w uint64) {
	ring, err := r.Services.PinnedRing(ctx, w)
	if errors.Is(err, pdastatus.ErrNotReported) {
		ring, err = r.Services.Ring(ctx)
	}
	if err != nil {
		return
	}
	job.Status.RingVersion, job.Status.RingShards = int64(ring.Version), int32(len(ring.Shards))
}

// publishResults copies the services' result of window w into the sink. It returns why the
// window failed, or "".
func (r *AggregationJobReconciler) publishResults(ctx context.Context, job *pdav1.AggregationJob, w uint64) string {
	if r.Services == nil {
		return ""
	}
	res, raw, err := r.Services.Result(ctx, w)
	if err != nil {
		logf.FromContext(ctx).Info("window result unavailable", "window", w, "err", err.Error())
		return ""
	}
	if len(raw) > maxSinkBytes {
		return fmt.Sprintf("the result of window %d is %d bytes, more than a ConfigMap or Secret holds (%d)", w, len(raw), maxSinkBytes)
	}
	keys := make([]string, 0, len(res.Revealed))
	for _, k := range res.Revealed {
		keys = append(keys, k.Key)
	}
	sink := job.Spec.ResultSink
	switch {
	case sink.ConfigMap != nil:
		if err := applyOwned(ctx, r.Client, job, pda.ResultConfigMap(job, sink.ConfigMap.Name, raw, keys)); err != nil {
			logf.FromContext(ctx).Error(err, "write result ConfigMap")
			return ""
		}
	case sink.Secret != nil:
		if err := applyOwned(ctx, r.Client, job, pda.ResultSecret(job, sink.Secret.Name, raw, keys)); err != nil {
			logf.FromContext(ctx).Error(err, "write result Secret")
			return ""
		}
	}
	if sink.NATSSubject != "" {
		if err := r.Services.PublishResult(sink.NATSSubject, raw); err != nil {
			logf.FromContext(ctx).Error(err, "publish result")
			return ""
		}
	}
	now := metav1.Now()
	job.Status.ResultsPublished = &now
	r.Recorder.Eventf(job, nil, corev1.EventTypeNormal, ReasonResultsPublished, "Publish",
		"%d revealed keys of window %d written to %s", len(keys), w, sinkName(sink))
	return ""
}

func sinkName(s pdav1.ResultSink) string {
	var out []string
	if s.ConfigMap != nil {
		out = append(out, "ConfigMap "+s.ConfigMap.Name)
	}
	if s.Secret != nil {
		out = append(out, "Secret "+s.Secret.Name)
	}
	if s.NATSSubject != "" {
		out = append(out, "subject "+s.NATSSubject)
	}
	return fmt.Sprint(out)
}
