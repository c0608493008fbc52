package roles

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// roundInfoKeep is how many rounds' RoundInfo a reader keeps: rounds are pipelined a few at a
// time, so the rounds a role still hears of are the last few dozen.
const roundInfoKeep = 32

// roundInfos is the round-info bucket (M0 of every round, spec §3.5): the coordinator puts
// each round's M0 there and names the current one; the gateway and the decrypt workers read a
// round's RoundInfo — who V* is, which key epochs the round names — and keep the recent
// rounds' parsed, since every submission and every M4 batch of a round asks again.
type roundInfos struct {
	kv jetstream.KeyValue

	mu sync.Mutex
	m  map[uint64]*mohito.RoundInfo
}

// openRoundInfos opens (creating it if need be) the round-info bucket.
func openRoundInfos(ctx context.Context, js jetstream.JetStream) (*roundInfos, error) {
	kv, err := natsx.EnsureMemoryKV(ctx, js, contract.BucketRoundInfo, 10*time.Minute)
	if err != nil {
		return nil, err
	}
	return &roundInfos{kv: kv, m: map[uint64]*mohito.RoundInfo{}}, nil
}

func roundInfoKey(t uint64) string { return "t." + strconv.FormatUint(t, 10) }

// roundInfoCurrent is the key of the open round's M0, which users fetch through the gateway.
const roundInfoCurrent = "current"

// put publishes round t's M0 and makes it the current round's.
func (r *roundInfos) put(ctx context.Context, t uint64, m0 []byte) error {
	if _, err := r.kv.Put(ctx, roundInfoKey(t), m0); err != nil {
		return err
	}
	_, err := r.kv.Put(ctx, roundInfoCurrent, m0)
	return err
}

// current returns the current round's M0 as published.
func (r *roundInfos) current(ctx context.Context) ([]byte, error) {
	e, err := r.kv.Get(ctx, roundInfoCurrent)
	if err != nil {
		return nil, err
	}
	return e.Value(), nil
}

// get returns round t's RoundInfo; fresh is true when it was read from the bucket rather than
// kept from an earlier call.
func (r *roundInfos) get(ctx context.Context, t uint64) (ri *mohito.RoundInfo, fresh bool, err error) {
	r.mu.Lock()
	ri, ok := r.m[t]
	r.mu.Unlock()
	if ok {
		return ri, false, nil
	}
	e, err := r.kv.Get(ctx, roundInfoKey(t))
	if err != nil {
		return nil, false, err
	}
	if ri, err = mohito.ParseRoundInfo(e.Value()); err != nil {
		return nil, false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[t] = ri
	if len(r.m) > 2*roundInfoKeep {
		for k := range r.m {
			if k+roundInfoKeep < t {
				delete(r.m, k)
			}
		}
	}
	if len(r.m) > 2*roundInfoKeep { // rounds newer than t: keep only t's
		clear(r.m)
		r.m[t] = ri
	}
	return ri, true, nil
}
