package natsx

import (
	"context"
	"fmt"
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
	if s, ok := onFile(ctx, js, name); ok {
		return s, nil
	}
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       name,
		Subjects:   subjects,
		Storage:    jetstream.MemoryStorage,
		MaxAge:     DefaultMaxAge,
		Duplicates: DefaultDuplicates,
		MaxMsgSize: 8 << 20,
		Replicas:   Replicas(js),
	})
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", name, err)
	}
	return s, nil
}

// EnsureMemoryKV is EnsureKV with memory storage.
func EnsureMemoryKV(ctx context.Context, js jetstream.JetStream, bucket string, ttl time.Duration) (jetstream.KeyValue, error) {
	if _, ok := onFile(ctx, js, "KV_"+bucket); ok {
		return js.KeyValue(ctx, bucket)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, TTL: ttl, Storage: jetstream.MemoryStorage, History: 1,
		Replicas: Replicas(js)})
	if err != nil {
		return nil, fmt.Errorf("ensure kv %s: %w", bucket, err)
	}
	return kv, nil
}

// EnsureMemoryObjectStore is EnsureObjectStore with memory storage.
func EnsureMemoryObjectStore(ctx context.Context, js jetstream.JetStream, bucket string, ttl time.Duration) (jetstream.ObjectStore, error) {
	if _, ok := onFile(ctx, js, "OBJ_"+bucket); ok {
		return js.ObjectStore(ctx, bucket)
	}
	os, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: bucket, TTL: ttl, Storage: jetstream.MemoryStorage,
		Replicas: Replicas(js)})
	if err != nil {
		return nil, fmt.Errorf("ensure object store %s: %w", bucket, err)
	}
	return os, nil
}

// onFile returns stream name if it exists on file storage.
func onFile(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, bool) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, false
	}
	return s, s.CachedInfo().Config.Storage == jetstream.FileStorage
}
