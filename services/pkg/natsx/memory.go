package natsx

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
	return ensureStream(ctx, js, jetstream.MemoryStorage, maxAge, name, subjects)
}

// EnsureMemoryKV is EnsureKV with memory storage.
func EnsureMemoryKV(ctx context.Context, js jetstream.JetStream, bucket string, ttl time.Duration) (jetstream.KeyValue, error) {
	if _, ok := onFile(ctx, js, "KV_"+bucket); ok {
		return js.KeyValue(ctx, bucket)
	}
	return ensureKV(ctx, js, jetstream.MemoryStorage, bucket, ttl)
}

// EnsureMemoryObjectStore is EnsureObjectStore with memory storage.
func EnsureMemoryObjectStore(ctx context.Context, js jetstream.JetStream, bucket string, ttl time.Duration) (jetstream.ObjectStore, error) {
	if _, ok := onFile(ctx, js, "OBJ_"+bucket); ok {
		return js.ObjectStore(ctx, bucket)
	}
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
