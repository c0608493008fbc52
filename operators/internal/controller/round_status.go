package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/autoscale"
	"github.com/obscura-iot/obscura/operators/internal/mohitostatus"
	"github.com/obscura-iot/obscura/operators/internal/specs/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// roundHistory remembers the work (status.lastRoundWork) of the last rounds the coordinator
// reported for each series; the autoscaler looks at their p90. Not the rounds' durations: each
// lasts period + response deadline at least whatever the load, which would keep every stage
// at its maximum. It lives in the operator's memory: after a restart the
// autoscaler starts from the backlog alone until a few rounds are reported again.
type roundHistory struct {
	mu     sync.Mutex
	series map[types.UID]*durations
}

type durations struct {
	lastUpdated string
	values      []time.Duration
}

const historyLen = 20

func (h *roundHistory) observe(uid types.UID, s contract.SeriesStatus) []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.series == nil {
		h.series = map[types.UID]*durations{}
	}
	d := h.series[uid]
	if d == nil {
		d = &durations{}
		h.series[uid] = d
	}
	if s.Updated != d.lastUpdated && s.LastProcessingSeconds > 0 {
		d.lastUpdated = s.Updated
		d.values = append(d.values, time.Duration(s.LastProcessingSeconds*float64(time.Second)))
		if len(d.values) > historyLen {
			d.values = d.values[len(d.values)-historyLen:]
		}
	}
	return append([]time.Duration(nil), d.values...)
}

// observeServices copies the coordinator's figures into the Round's status and, when the
// operator scales the workers, makes the scaling decision. It never fails the reconcile: the
// services may not have reported yet, and NATS may be briefly away.
func (r *RoundReconciler) observeServices(ctx context.Context, rd *mohitov1.Round) {
	log := logf.FromContext(ctx)
	s, err := r.Services.Series(ctx, mohito.SeriesName(rd))
	switch {
	case errors.Is(err, mohitostatus.ErrNotReported):
	case err != nil:
		log.Info("round figures unavailable", "err", err.Error())
	default:
		cur := int64(s.CurrentRound)
		rd.Status.CurrentRound = &cur
		rd.Status.CompletedRounds, rd.Status.AbortedRounds, rd.Status.Bursts = s.CompletedRounds, s.AbortedRounds, s.Bursts
		rd.Status.CommandsPerSecond = s.CommandsPerSecond
		rd.Status.LastRoundSeconds = quantity(s.LastRoundSeconds)
		rd.Status.LastRoundWork = &metav1.Duration{Duration: time.Duration(s.LastProcessingSeconds * float64(time.Second)).Round(time.Millisecond)}
		rd.Status.FakeRatio = quantity(s.FakeRatio)
		r.observeCapacity(rd, s)
		if t := s.UpdatedTime(); !t.IsZero() {
			rd.Status.StatusUpdated = &metav1.Time{Time: t}
		}
	}
	durations := r.history.observe(rd.UID, s)
	if rd.Spec.Encoders.Autoscale {
		r.scaleEncoders(ctx, rd, durations)
	}
	if rd.Spec.DecryptWorkers.Autoscaler == mohitov1.AutoscalerExternal || rd.Spec.DecryptWorkers.Replicas == nil {
		return
	}
	lag, err := r.Services.WorkerLag(ctx)
	if err != nil && !errors.Is(err, mohitostatus.ErrNotReported) {
		log.Info("decrypt worker backlog unavailable; not scaling", "err", err.Error())
		return
	}
	obs := autoscale.Observation{
		Current: *rd.Spec.DecryptWorkers.Replicas, Min: rd.Spec.DecryptWorkers.Min, Max: rd.Spec.DecryptWorkers.Max,
		TargetLag: rd.Spec.DecryptWorkers.TargetLag, Lag: lag,
		RoundDurations: durations, Period: rd.Spec.Period.Duration, Now: time.Now(), Unit: "decrypt workers",
	}
	applyScale(ctx, r.Recorder, rd, "Scale", obs, &rd.Status.LastScaleTime, func(n int32) error {
		return r.setWorkerReplicas(ctx, rd, n)
	})
}

// scaleEncoders sets spec.encoders.partitions from the encoders' backlog and round time (issue
// 14 item 2) with the decrypt workers' policy: up at once after a short cooldown, down one
// partition at a time after a long one. A new count rolls the encoders' StatefulSet; the
// partitions of the old and the new count overlap while it rolls and hand their vendors over by
// table claims, so no round aborts (TestEncoderRescaleMidRun).
func (r *RoundReconciler) scaleEncoders(ctx context.Context, rd *mohitov1.Round, durations []time.Duration) {
	log := logf.FromContext(ctx)
	e := rd.Spec.Encoders
	lag, err := r.Services.EncoderLag(ctx, int(e.Partitions))
	if errors.Is(err, mohitostatus.ErrNotReported) {
		// The consumers are named by partition count: right after a rescale the new count's
		// encoders have not started, and an absent backlog is no evidence of idleness (read as
		// zero, it scaled 1→4 partitions back to 3 whenever the status update recording the
		// scale-out lost a conflict, since no cooldown then applied).
		log.V(1).Info("encoders of this partition count have not reported; not scaling encoders", "partitions", e.Partitions)
		return
	}
	if err != nil {
		log.Info("encoder backlog unavailable; not scaling encoders", "err", err.Error())
		return
	}
	// A partition owns whole vendors (a vendor's table is one OKVS encode), so partitions beyond
	// the series' vendors would idle; each rescale rolls every encoder, and a cluster e2e with
	// one vendor spent two rounds on going 1→2→4 partitions for nothing.
	hi := e.Max
	if v := rd.Status.Vendors; v > 0 && v < hi {
		hi = max(v, e.Min)
	}
	obs := autoscale.Observation{Current: e.Partitions, Min: e.Min, Max: hi, TargetLag: e.TargetLag, Lag: lag,
		RoundDurations: durations, Period: rd.Spec.Period.Duration, Now: time.Now(), Unit: "encoder partitions"}
	applyScale(ctx, r.Recorder, rd, "ScaleEncoders", obs, &rd.Status.LastEncoderScaleTime, func(n int32) error {
		patch := client.MergeFrom(rd.DeepCopy())
		rd.Spec.Encoders.Partitions = n
		if err := r.Patch(ctx, rd, patch); err != nil {
			rd.Spec.Encoders.Partitions = obs.Current
			return err
		}
		return nil
	})
}

// observeCapacity copies the series' capacity class and reports a class change once, as an Event
// with the coordinator's figures.
func (r *RoundReconciler) observeCapacity(rd *mohitov1.Round, s contract.SeriesStatus) {
	rd.Status.CapacityPercent = int32(s.CapacityPercent)
	if rd.Status.CapacityPercent == 0 {
		rd.Status.CapacityPercent = 100
	}
	ch := s.CapacityChange
	if ch == nil {
		return
	}
	at, err := time.Parse(time.RFC3339, ch.At)
	if err != nil {
		return
	}
	if last := rd.Status.LastCapacityChange; last != nil && last.Time.Time.Equal(at) {
		return
	}
	reason, verb := ReasonCapacityRaised, "raised"
	if ch.ToPercent < ch.FromPercent {
		reason, verb = ReasonCapacityLowered, "lowered"
	}
	msg := fmt.Sprintf("capacity class %s from %d%% to %d%% of the vendors' base after %d rounds: %.1f%% of them burst, each had at least %.1f%% fakes",
		verb, ch.FromPercent, ch.ToPercent, ch.Rounds, 100*ch.BurstRate, 100*ch.MinFakeRatio)
	rd.Status.LastCapacityChange = &mohitov1.CapacityChange{Time: metav1.Time{Time: at}, FromPercent: int32(ch.FromPercent),
		ToPercent: int32(ch.ToPercent), Message: msg}
	r.Recorder.Eventf(rd, nil, corev1.EventTypeNormal, reason, "Capacity", "%s", msg)
}

// quantity renders a figure with three decimals as a resource.Quantity ("1.934").
func quantity(f float64) *resource.Quantity {
	q, err := resource.ParseQuantity(strconv.FormatFloat(f, 'f', 3, 64))
	if err != nil {
		return nil
	}
	return &q
}

// servicesPoll is how often vendors' and shufflers' figures are read.
const servicesPoll = 30 * time.Second

// pollInterval is how often a running series' figures are read: every period, but not more
// than once a second nor less than every 30 s.
func pollInterval(rd *mohitov1.Round) time.Duration {
	return min(max(rd.Spec.Period.Duration, time.Second), 30*time.Second)
}
