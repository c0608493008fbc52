package roles

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// The key directory (spec §3.2, simplified): each party announces its public
// keys — one per key epoch it holds (spec O16), encoded as a mohito.KeySet —
// into the other side's key stream (inbox.go), on a subject only it can publish to —
// the account exports give vendor v exactly mohito.i.in.v{v}.> and the
// integrator exactly mohito.v{v}.in.> — so the sender of a key is
// authenticated by the account boundary. Streams keep messages for
// natsx.DefaultMaxAge, so the daemons re-announce every KeyAnnounceInterval
// and at once when their key set changes; readers take the last message on
// the subject and keep watching it.
const KeyAnnounceInterval = time.Minute

// DefaultKeyRetention is W of spec O16 for the services: a superseded key
// epoch is kept for this many rounds after the first round that names a
// newer one (pipelining keeps at most two or three rounds in flight).
const DefaultKeyRetention = 8

func announce(ctx context.Context, js jetstream.JetStream, subject string, ks mohito.KeySet) error {
	b, err := ks.MarshalBinary()
	if err != nil {
		return fmt.Errorf("key set for %s: %w", subject, err)
	}
	h := sha256.Sum256(b)
	id := fmt.Sprintf("key-%s-%d", hex.EncodeToString(h[:8]), time.Now().Unix()/int64(KeyAnnounceInterval/time.Second))
	return natsx.Publish(ctx, js, subject, id, b, nil)
}

// AnnounceVendorKey publishes vendor v's public keys to the integrator (vendor account).
func AnnounceVendorKey(ctx context.Context, js jetstream.JetStream, v int, ks mohito.KeySet) error {
	return announce(ctx, js, contract.VendorKeySubject(v), ks)
}

// AnnounceIntegratorKey publishes the integrator's public keys to vendor v (integrator account).
func AnnounceIntegratorKey(ctx context.Context, js jetstream.JetStream, v int, ks mohito.KeySet) error {
	return announce(ctx, js, contract.IntegratorKeySubject(v), ks)
}

func lastKey(ctx context.Context, js jetstream.JetStream, stream, subject string, suite mohito.Suite) (mohito.KeySet, error) {
	stream = keyStream(ctx, js, stream, subject)
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", stream, err)
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return nil, fmt.Errorf("no key announced on %s: %w", subject, err)
	}
	ks, err := mohito.ParseKeySet(suite, m.Data)
	if err != nil {
		return nil, fmt.Errorf("key set on %s: %w", subject, err)
	}
	return ks, nil
}

// FetchVendorKeys reads every vendor's last announced key set (integrator account).
func FetchVendorKeys(ctx context.Context, js jetstream.JetStream, p mohito.Params) (*KeyDirectory, error) {
	out := make([]mohito.KeySet, p.Vendors)
	for v := range out {
		ks, err := lastKey(ctx, js, contract.StreamIntegratorKeys, contract.VendorKeySubject(v), p.Suite)
		if err != nil {
			return nil, fmt.Errorf("vendor %d: %w", v, err)
		}
		out[v] = ks
	}
	return NewKeyDirectory(out), nil
}

// FetchIntegratorKey reads the integrator's key set as announced to vendor v (vendor account).
func FetchIntegratorKey(ctx context.Context, js jetstream.JetStream, v int, p mohito.Params) (mohito.KeySet, error) {
	return lastKey(ctx, js, contract.StreamVendorKeys, contract.IntegratorKeySubject(v), p.Suite)
}

// KeyDirectory is the integrator's view of every vendor's announced key set.
// The epoch in force for vendor v is the highest it announced. Safe for
// concurrent use.
type KeyDirectory struct {
	mu   sync.RWMutex
	sets []mohito.KeySet
}

// NewKeyDirectory returns a directory of one key set per vendor.
func NewKeyDirectory(sets []mohito.KeySet) *KeyDirectory {
	return &KeyDirectory{sets: append([]mohito.KeySet(nil), sets...)}
}

// StaticKeyDirectory is a directory of one epoch-0 key per vendor (tests).
func StaticKeyDirectory(keys []*mohito.PublicKey) *KeyDirectory {
	sets := make([]mohito.KeySet, len(keys))
	for v, k := range keys {
		sets[v] = mohito.KeySet{{Epoch: 0, Key: k}}
	}
	return NewKeyDirectory(sets)
}

// Len is the number of vendors.
func (d *KeyDirectory) Len() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.sets)
}

// Set replaces vendor v's key set (an announcement).
func (d *KeyDirectory) Set(v int, ks mohito.KeySet) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if v >= 0 && v < len(d.sets) && len(ks) > 0 {
		d.sets[v] = ks
	}
}

// Current returns vendor v's key in force: its highest announced epoch.
func (d *KeyDirectory) Current(v int) (mohito.EpochKey, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if v < 0 || v >= len(d.sets) {
		return mohito.EpochKey{}, false
	}
	return d.sets[v].Current()
}

// watchKeys follows the last key set on every subject matching filter and
// calls fn for each announcement until ctx ends. Bad announcements are
// counted and skipped.
func watchKeys(ctx context.Context, js jetstream.JetStream, stream, filter string, suite mohito.Suite, log *slog.Logger, m *Metrics, fn func(subject string, ks mohito.KeySet)) error {
	c, err := js.OrderedConsumer(ctx, keyStream(ctx, js, stream, filter), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return fmt.Errorf("watch key directory %s: %w", filter, err)
	}
	cc, err := c.Consume(func(msg jetstream.Msg) {
		ks, err := mohito.ParseKeySet(suite, msg.Data())
		if err != nil {
			m.Dropped.WithLabelValues("key_set").Inc()
			log.Warn("bad key set announcement", "subject", msg.Subject(), "err", err)
			return
		}
		fn(msg.Subject(), ks)
	})
	if err != nil {
		return fmt.Errorf("watch key directory %s: %w", filter, err)
	}
	<-ctx.Done()
	cc.Stop()
	return nil
}

// WatchVendorKeys keeps d in step with the vendors' announcements
// (integrator account) until ctx ends.
func WatchVendorKeys(ctx context.Context, js jetstream.JetStream, p mohito.Params, d *KeyDirectory, log *slog.Logger, m *Metrics) error {
	return watchKeys(ctx, js, contract.StreamIntegratorKeys, contract.VendorKeySubjects, p.Suite, log, m, func(subject string, ks mohito.KeySet) {
		v, err := contract.VendorOfKeySubject(subject)
		if err != nil || v >= d.Len() {
			return
		}
		if cur, ok := d.Current(v); !ok || cur.Epoch != mustCurrent(ks).Epoch {
			log.Info("vendor key epoch announced", "vendor", v, "epoch", mustCurrent(ks).Epoch)
		}
		d.Set(v, ks)
	})
}

// WatchIntegratorKeys calls fn with every integrator key set announced to
// vendor v (vendor account) until ctx ends.
func WatchIntegratorKeys(ctx context.Context, js jetstream.JetStream, v int, p mohito.Params, log *slog.Logger, m *Metrics, fn func(mohito.KeySet)) error {
	return watchKeys(ctx, js, contract.StreamVendorKeys, contract.IntegratorKeySubject(v), p.Suite, log, m, func(_ string, ks mohito.KeySet) { fn(ks) })
}

func mustCurrent(ks mohito.KeySet) mohito.EpochKey {
	c, _ := ks.Current()
	return c
}

// EnsureIntegratorStreams creates the integrator's streams (idempotent), so integrator
// roles can start in any order: its inbox (round messages and key announcements, inbox.go)
// and the work stream, whose messages are kept d.WorkTTL().
func EnsureIntegratorStreams(ctx context.Context, js jetstream.JetStream, d *Deployment) error {
	if err := ensureIntegratorInbox(ctx, js, d); err != nil {
		return err
	}
	_, err := natsx.EnsureMemoryStreamMaxAge(ctx, js, contract.StreamWork, d.WorkTTL(), contract.WorkSubjects)
	return err
}
