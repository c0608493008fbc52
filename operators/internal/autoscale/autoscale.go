// Package autoscale decides how many integrator decryption workers a Round series needs. It is a
// pure function of what the operator observed — JetStream consumer lag on the shuffled stream
// and recent round durations from the round KV — so every decision can be unit-tested and
// explained in an Event with the figures that drove it.
//
// Two signals drive it (spec §3.5: decrypting and encoding the shuffler's output determine the
// round duration): the backlog, scaled so that each worker holds at most TargetLag pending
// messages, and round time, scaled so that the slow rounds finish within Headroom of the period.
// Scaling up is immediate (after a short cooldown) because a late round delays every user;
// scaling down waits for a longer cooldown and a clear margin (hysteresis), so a noisy signal
// never makes the worker count oscillate.
package autoscale

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Policy holds the scaling behaviour; DefaultPolicy is what the operator uses.
type Policy struct {
	// Headroom is the fraction of the period a round may take before workers are added.
	Headroom float64
	// Tolerance is the relative margin inside which no change is made (hysteresis).
	Tolerance float64
	// UpCooldown is the least time between a scale-up and the previous change.
	UpCooldown time.Duration
	// DownCooldown is the least time between a scale-down and the previous change.
	DownCooldown time.Duration
	// MaxStepDown bounds how many workers one decision removes.
	MaxStepDown int32
}

// DefaultPolicy: act when rounds use more than 80 % of the period, ignore changes within 10 %,
// scale up at most every 15 s and down at most every 3 min, one worker at a time.
var DefaultPolicy = Policy{Headroom: 0.8, Tolerance: 0.1, UpCooldown: 15 * time.Second, DownCooldown: 3 * time.Minute, MaxStepDown: 1}

// Observation is what the operator saw.
type Observation struct {
	// Current is the number of workers now.
	Current int32
	// Min and Max bound the worker count (spec.decryptWorkers).
	Min, Max int32
	// TargetLag is the pending messages per worker to aim for.
	TargetLag int64
	// Lag is the number of messages pending on the shuffled-stream consumer.
	Lag int64
	// RoundDurations are the work of the most recent completed rounds (close to release less
	// the response deadline, contract.SeriesStatus.LastProcessingSeconds).
	RoundDurations []time.Duration
	// Period is the round period T.
	Period time.Duration
	// LastChange is when the worker count last changed; zero if never.
	LastChange time.Time
	// Now is the time of the decision.
	Now time.Time
	// Unit names what is scaled in messages (plural); empty means decrypt workers.
	Unit string
}

// Reason says what a decision did.
type Reason string

// Decision reasons; they are also the Event reasons.
const (
	ScaleUp   Reason = "ScaleUp"
	ScaleDown Reason = "ScaleDown"
	Steady    Reason = "Steady"
	Cooldown  Reason = "ScaleCooldown"
	Clamped   Reason = "ScaleClamped"
)

// Decision is the worker count to run and why.
type Decision struct {
	Replicas int32
	Reason   Reason
	// Message explains the decision with its figures, for an Event and the logs.
	Message string
}

// Changed reports whether the decision changes the worker count.
func (d Decision) Changed(current int32) bool { return d.Replicas != current }

// Decide computes the next worker count. The load is the larger of the backlog per worker
// relative to TargetLag and the p90 round work relative to Headroom × Period; 1 means the
// current workers are exactly enough. Inside 1 ± Tolerance nothing changes.
func Decide(o Observation, p Policy) Decision {
	cur := clamp(o.Current, o.Min, o.Max)
	slow := quantile(o.RoundDurations, 0.9)
	unit := o.Unit
	if unit == "" {
		unit = "decrypt workers"
	}
	figures := fmt.Sprintf("lag %d (target %d each), p90 work %s of period %s",
		o.Lag, o.TargetLag, slow.Round(time.Millisecond), o.Period)
	if cur != o.Current {
		// Someone set a count outside [min, max] (e.g. an edit of the bounds): fix it at once.
		return Decision{Replicas: cur, Reason: Clamped,
			Message: fmt.Sprintf("%d→%d %s to stay within [%d, %d]; %s", o.Current, cur, unit, o.Min, o.Max, figures)}
	}

	load := 0.0
	if o.TargetLag > 0 {
		load = float64(o.Lag) / float64(int64(cur)*o.TargetLag)
	}
	if slow > 0 && o.Period > 0 {
		load = max(load, slow.Seconds()/(p.Headroom*o.Period.Seconds()))
	}
	// ceil(cur × load) workers bring the load back to at most 1.
	target := clamp(int32(math.Ceil(float64(cur)*load)), o.Min, o.Max)
	since := o.Now.Sub(o.LastChange)
	hold := func(cooldown time.Duration) Decision {
		return Decision{Replicas: cur, Reason: Cooldown,
			Message: fmt.Sprintf("want %d %s, holding %d for %s after the last change; %s",
				target, unit, cur, (cooldown - since).Round(time.Second), figures)}
	}
	switch {
	case load > 1+p.Tolerance && target > cur:
		if !o.LastChange.IsZero() && since < p.UpCooldown {
			return hold(p.UpCooldown)
		}
		return Decision{Replicas: target, Reason: ScaleUp,
			Message: fmt.Sprintf("%d→%d %s: %s", cur, target, unit, figures)}
	case load < 1-p.Tolerance && target < cur:
		if !o.LastChange.IsZero() && since < p.DownCooldown {
			return hold(p.DownCooldown)
		}
		next := max(target, cur-p.MaxStepDown)
		return Decision{Replicas: next, Reason: ScaleDown,
			Message: fmt.Sprintf("%d→%d %s: %s", cur, next, unit, figures)}
	default:
		return Decision{Replicas: cur, Reason: Steady, Message: fmt.Sprintf("%d %s: %s", cur, unit, figures)}
	}
}

func clamp(v, lo, hi int32) int32 { return min(max(v, lo), hi) }

// quantile returns the q-quantile (nearest rank) of ds, or 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)]
}
