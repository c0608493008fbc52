package natsx

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/clock"
)

// Memory storage is for what need not outlive the NATS servers (docs/services.md, "Durability
// per round"): a round's messages, which are re-created from the store of record or end in an
// aborted round, and buckets whose entries live for seconds or minutes. It saves the file
// store's write of every message and every consumer's state file. Replicated as js says
// (WithReplicas), a memory stream survives the loss of a node but not of the whole cluster.
//
// JetStream cannot change a stream's storage in place: a stream, bucket or object store that
// already exists on file storage (created by an earlier release) is left as it is, and moves to
// memory once an operator deletes it.
//
// A single NATS server that restarts comes back without its memory streams — and a restart is
// how the NATS reloader applies an added or removed account (a Vendor, a SecurePipeline, an
// EncounterSimulation). So every memory stream, bucket and object store a connection ensured
// is ensured again when that connection reconnects (recreateOnReconnect): the rounds in
// flight abort, as the spec allows, and the next rounds run, instead of every role failing
// until it is restarted.

// EnsureMemoryStream is EnsureStream with memory storage.
func EnsureMemoryStream(ctx context.Context, js jetstream.JetStream, name string, subjects ...string) (jetstream.Stream, error) {
	return EnsureMemoryStreamMaxAge(ctx, js, name, DefaultMaxAge, subjects...)
}

// EnsureMemoryStreamMaxAge is EnsureMemoryStream keeping a message at most maxAge: the bound
// on what a stream whose messages are only needed for a round or two holds in the servers'
// memory (max_memory_store is shared by every memory stream of the cluster). Every creator
// of one stream must pass the same maxAge, or each would rewrite the others' configuration.
func EnsureMemoryStreamMaxAge(ctx context.Context, js jetstream.JetStream, name string, maxAge time.Duration, subjects ...string) (jetstream.Stream, error) {
	if s, ok := onFile(ctx, js, name); ok {
		return s, nil
	}
	recreateOnReconnect(js, "stream "+name, func(ctx context.Context) error {
		_, err := ensureStream(ctx, js, jetstream.MemoryStorage, maxAge, name, subjects)
		return err
	})
	return ensureStream(ctx, js, jetstream.MemoryStorage, maxAge, name, subjects)
}

// EnsureMemoryKV is EnsureKV with memory storage.
func EnsureMemoryKV(ctx context.Context, js jetstream.JetStream, bucket string, ttl time.Duration) (jetstream.KeyValue, error) {
	if _, ok := onFile(ctx, js, "KV_"+bucket); ok {
		return js.KeyValue(ctx, bucket)
	}
	recreateOnReconnect(js, "bucket "+bucket, func(ctx context.Context) error {
		_, err := ensureKV(ctx, js, jetstream.MemoryStorage, bucket, ttl)
		return err
	})
	return ensureKV(ctx, js, jetstream.MemoryStorage, bucket, ttl)
}

// EnsureMemoryObjectStore is EnsureObjectStore with memory storage.
func EnsureMemoryObjectStore(ctx context.Context, js jetstream.JetStream, bucket string, ttl time.Duration) (jetstream.ObjectStore, error) {
	if _, ok := onFile(ctx, js, "OBJ_"+bucket); ok {
		return js.ObjectStore(ctx, bucket)
	}
	recreateOnReconnect(js, "object store "+bucket, func(ctx context.Context) error {
		_, err := ensureObjectStore(ctx, js, jetstream.MemoryStorage, bucket, ttl)
		return err
	})
	return ensureObjectStore(ctx, js, jetstream.MemoryStorage, bucket, ttl)
}

// onFile returns stream name if it exists on file storage.
func onFile(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, bool) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, false
	}
	return s, s.CachedInfo().Config.Storage == jetstream.FileStorage
}

// recreators holds, per connection, what to ensure again when it reconnects.
var recreators = struct {
	sync.Mutex
	by map[*nats.Conn]*recreator
}{by: map[*nats.Conn]*recreator{}}

type recreator struct {
	mu      sync.Mutex
	ensure  map[string]func(context.Context) error
	running bool // a re-creation pass is under way
	again   bool // and another is due after it
}

// recreateOnReconnect remembers ensure under what for js's connection; on the connection's
// first use it chains a reconnect handler (after any the caller set) that runs every
// remembered ensure, retrying each with backoff for up to a minute while JetStream comes back.
func recreateOnReconnect(js jetstream.JetStream, what string, ensure func(context.Context) error) {
	nc := js.Conn()
	if nc == nil {
		return
	}
	recreators.Lock()
	r, ok := recreators.by[nc]
	if !ok {
		r = &recreator{ensure: map[string]func(context.Context) error{}}
		recreators.by[nc] = r
		prev, closed := nc.ReconnectHandler(), nc.ClosedHandler()
		nc.SetReconnectHandler(func(c *nats.Conn) {
			if prev != nil {
				prev(c)
			}
			r.recreate()
		})
		nc.SetClosedHandler(func(c *nats.Conn) {
			recreators.Lock()
			delete(recreators.by, c)
			recreators.Unlock()
			if closed != nil {
				closed(c)
			}
		})
	}
	recreators.Unlock()
	r.mu.Lock()
	r.ensure[what] = ensure
	r.mu.Unlock()
}

// recreate runs every remembered ensure in the background, one pass at a time; a reconnect
// during a pass runs another pass after it.
func (r *recreator) recreate() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running {
		r.again = true
		return
	}
	r.running = true
	go func() {
		for {
			r.mu.Lock()
			fns := make(map[string]func(context.Context) error, len(r.ensure))
			for k, f := range r.ensure {
				fns[k] = f
			}
			r.again = false
			r.mu.Unlock()
			ensureAll(fns)
			r.mu.Lock()
			if !r.again {
				r.running = false
				r.mu.Unlock()
				return
			}
			r.mu.Unlock()
		}
	}()
}

// ensureAll runs each ensure until it succeeds, with backoff, for up to a minute in all.
func ensureAll(fns map[string]func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for what, ensure := range fns {
		wait := 100 * time.Millisecond
		for {
			actx, acancel := context.WithTimeout(ctx, 5*time.Second)
			err := ensure(actx)
			acancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil || !clock.Sleep(ctx, wait) {
				slog.Warn("memory storage not re-created after a reconnect", "what", what, "err", err)
				break
			}
			wait = min(2*wait, 2*time.Second)
		}
	}
}
