package roles

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/clock"
	"github.com/obscura-iot/obscura/services/pkg/keys"
	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// Live key rotation (spec O16 without restarts). Every role that holds a
// private key re-reads its key source every KeyReloader.Interval. An epoch
// higher than any it holds is staged at once — it decrypts from then on — and
// activated ActivationDelay later, when the role starts naming and announcing
// it. Every replica reading the same source (a Secret mounted whole, or a Vault
// KV folder) loads a new epoch within the source's propagation time P (the
// kubelet's sync period for a Secret volume), so with ActivationDelay > P +
// Interval no round names an epoch that a peer does not hold yet: the
// coordinator does not name a new pk_I before every decrypt worker holds sk_I,
// and a vendor's agent does not announce a new pk_V before its shufflers hold
// sk_V. Epochs at or below the highest one held are never re-added, so an
// epoch that retention retired stays retired while its file remains.

// Defaults of the reloader (flags --key-reload-interval, --key-activation-delay).
const (
	DefaultKeyReloadInterval  = 15 * time.Second
	DefaultKeyActivationDelay = contract.DefaultKeyActivationDelay
	MinKeyActivationDelay     = time.Second
	keyReloadTimeout          = 30 * time.Second
)

// KeyReloader keeps a role's key ring in step with its key source.
type KeyReloader struct {
	Ring            *mohito.KeyRing
	Load            func(ctx context.Context) ([]keys.Epoch, error) // keys.Source.LoadRing
	Interval        time.Duration
	ActivationDelay time.Duration
	// OnActivate is called after an epoch becomes current (re-announce the key set).
	OnActivate func(ctx context.Context, epoch uint32)
	Log        *slog.Logger
	Metrics    *Metrics

	mu      sync.Mutex
	pending map[uint32]time.Time // staged epoch → activation time
}

// Reload reads the source once and stages every epoch higher than the
// highest held. It returns the epochs staged. A key that is not one of the
// ring's suite is an error naming its epoch only.
func (r *KeyReloader) Reload(ctx context.Context, now time.Time) ([]uint32, error) {
	ctx, cancel := context.WithTimeout(ctx, keyReloadTimeout)
	defer cancel()
	epochs, err := r.Load(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, e := range epochs {
			clear(e.Key)
		}
	}()
	high, held := r.Ring.Highest()
	var staged []uint32
	var errs []error
	for _, e := range epochs {
		if held && e.N <= high {
			continue
		}
		k, err := mohito.ParsePrivateKey(r.Ring.Suite(), e.Key)
		if err == nil {
			err = r.Ring.Stage(e.N, k)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("key epoch %d is not a private key of the deployment's suite", e.N))
			continue
		}
		staged = append(staged, e.N)
	}
	if len(staged) > 0 {
		r.mu.Lock()
		if r.pending == nil {
			r.pending = map[uint32]time.Time{}
		}
		for _, e := range staged {
			r.pending[e] = now.Add(r.ActivationDelay)
		}
		r.mu.Unlock()
	}
	return staged, errors.Join(errs...)
}

// ActivateDue activates every staged epoch whose delay has passed by now and
// returns them, ascending.
func (r *KeyReloader) ActivateDue(now time.Time) []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var due []uint32
	for e, at := range r.pending {
		if !now.Before(at) {
			delete(r.pending, e)
			if r.Ring.Activate(e) {
				due = append(due, e)
			}
		}
	}
	slices.Sort(due)
	return due
}

// next is when the loop should wake: the next reload or the next activation.
func (r *KeyReloader) next(now time.Time) time.Duration {
	wait := r.Interval
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, at := range r.pending {
		wait = min(wait, at.Sub(now))
	}
	return max(wait, 0)
}

// Run reloads every Interval and activates staged epochs when due, until ctx
// ends. Failed reloads are logged and counted, never fatal: the ring in
// memory keeps serving.
func (r *KeyReloader) Run(ctx context.Context) error {
	lastLoad := time.Now()
	for {
		if !clock.Sleep(ctx, r.next(time.Now())) {
			return nil
		}
		now := time.Now()
		if now.Sub(lastLoad) >= r.Interval {
			lastLoad = now
			staged, err := r.Reload(ctx, now)
			switch {
			case err != nil && ctx.Err() != nil:
				// Stopping: the read was cut short, not failed.
			case err != nil:
				r.Log.Warn("key reload failed; keeping the keys held", "err", err)
				r.count("failed")
			default:
				r.count("ok")
			}
			if len(staged) > 0 {
				r.Log.Info("key epochs staged", "epochs", staged, "activate_in", r.ActivationDelay.String())
			}
		}
		for _, e := range r.ActivateDue(now) {
			r.Log.Info("key epoch active", "epoch", e)
			if r.OnActivate != nil {
				r.OnActivate(ctx, e)
			}
		}
		r.observe()
	}
}

// count counts one reload by result.
func (r *KeyReloader) count(result string) {
	if r.Metrics != nil {
		r.Metrics.KeyReloads.WithLabelValues(result).Inc()
	}
}

// observe exports the ring's state.
func (r *KeyReloader) observe() {
	if r.Metrics == nil {
		return
	}
	if e, _, ok := r.Ring.Current(); ok {
		r.Metrics.KeyEpoch.Set(float64(e))
	}
	r.Metrics.KeyEpochsHeld.Set(float64(r.Ring.Len()))
}
