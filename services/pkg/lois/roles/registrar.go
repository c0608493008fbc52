package roles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// EnsureSessionStream creates the session record stream (memory storage: see
// contract.StreamSessions).
func EnsureSessionStream(ctx context.Context, js jetstream.JetStream, replicas int, maxAge time.Duration) error {
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: contract.StreamSessions,
		Subjects: []string{contract.SubjectSessions()}, Storage: jetstream.MemoryStorage, Replicas: max(1, replicas),
		MaxAge: maxAge, Duplicates: 2 * time.Minute, MaxMsgSize: 8 << 20})
	if err != nil {
		return fmt.Errorf("ensure stream %s: %w", contract.StreamSessions, err)
	}
	return nil
}

// Registrar is the cloud's single writer (spec §10): it runs the registration step of a
// session on its deduplicating table, publishes the session record, and hands the device its
// keys only after every replica that must hold the session acknowledged installing it
// (install before use, §3.2).
type Registrar struct {
	JS    jetstream.JetStream
	Cloud string
	// Table is the deduplicating table (DVTConfig.Dedup) of every live session.
	Table *lois.DVT
	// Replicas names the CI replicas and SIs whose acks a session waits for.
	Replicas []string
	mu       sync.Mutex
}

// ErrNotInstalled: a replica did not acknowledge in time; the device must not use the
// session.
var ErrNotInstalled = errors.New("lois registrar: session not installed by every replica")

// Open registers a session and returns the device's keys once it is installed everywhere.
func (r *Registrar) Open(ctx context.Context, p Provision) (*contract.Keys, error) {
	r.mu.Lock()
	p.Registrar = r.Table
	prov, err := p.Run(time.Now())
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	rec := *prov.Server[0]
	rec.Replica = 0
	data, err := json.Marshal(&rec)
	if err != nil {
		return nil, err
	}
	defer clear(data)
	sub, err := r.JS.Conn().SubscribeSync(contract.SubjectAcks(r.Cloud, rec.Session, p.Epoch))
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := natsx.Publish(ctx, r.JS, contract.SubjectSessionOpen(r.Cloud), fmt.Sprintf("%s.%d", rec.Session, p.Epoch), data, nil); err != nil {
		return nil, err
	}
	pending := map[string]bool{}
	for _, n := range r.Replicas {
		pending[n] = true
	}
	for len(pending) > 0 {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: %d waiting (%v)", ErrNotInstalled, len(pending), err)
		}
		delete(pending, m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
	}
	return prov.Device, nil
}

// Installer is a replica's side of a session record.
type Installer interface {
	// InstallSession installs the record's streams this replica holds; a session installed
	// before (a redelivery, a replay at start) is a no-op.
	InstallSession(k *contract.Keys) error
}

// Follow replays and follows the session records of cloud for replica name (index replica
// of its service's SIs; 0 for CI replicas), installs each and acknowledges it, until ctx
// ends. Each start replays the whole stream (a fresh consumer): a restarted replica rebuilds
// its table (§3.10 session loss).
func Follow(ctx context.Context, js jetstream.JetStream, cloud, name string, replica int, inst Installer, log *slog.Logger) error {
	durable := fmt.Sprintf("lois-%s-%d", name, time.Now().UnixNano())
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = js.DeleteConsumer(dctx, contract.StreamSessions, durable)
	}()
	return natsx.Consume(ctx, js, natsx.ConsumerSpec{Stream: contract.StreamSessions, Durable: durable,
		Filters: []string{contract.SubjectSessionOpen(cloud)}}, log, func(ctx context.Context, m jetstream.Msg) natsx.Outcome {
		rec, err := contract.ParseKeys(m.Data())
		if err != nil {
			log.Warn("session record dropped", "err", err)
			return natsx.Drop
		}
		k := *rec
		k.Replica = replica
		if k.Replicas > 0 && replica >= k.Replicas {
			k.Replica = -1 // outside the record's partition: upload only
		}
		if err := inst.InstallSession(&k); err != nil {
			log.Warn("session not installed", "err", err)
			return natsx.Drop
		}
		epoch := uint32(0)
		if len(k.Streams) > 0 {
			epoch = k.Streams[0].Epoch
		}
		if err := js.Conn().Publish(contract.SubjectAck(cloud, k.Session, epoch, name), nil); err != nil {
			return natsx.Retry
		}
		return natsx.Ack
	})
}
