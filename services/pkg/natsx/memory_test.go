package natsx_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestEnsureMemoryKeepsFileStreams: the memory helpers create memory-backed streams, buckets
// and object stores on a real nats-server, are idempotent, and leave one that an earlier
// release created on file storage as it is (JetStream cannot change storage in place) instead
// of failing the role's start.
func TestEnsureMemoryKeepsFileStreams(t *testing.T) {
	js := testenv.StartNATS(t).JetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	storage := func(name string) jetstream.StorageType {
		t.Helper()
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config.Storage
	}
	for range 2 {
		if _, err := natsx.EnsureMemoryStream(ctx, js, "ROUNDS", "r.>"); err != nil {
			t.Fatal(err)
		}
		if _, err := natsx.EnsureMemoryKV(ctx, js, "INFO", time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := natsx.EnsureMemoryObjectStore(ctx, js, "TABLES", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{"ROUNDS", "KV_INFO", "OBJ_TABLES"} {
		if got := storage(s); got != jetstream.MemoryStorage {
			t.Fatalf("%s on %v, want memory", s, got)
		}
	}
	if _, err := natsx.EnsureStream(ctx, js, "OLD", "old.>"); err != nil {
		t.Fatal(err)
	}
	if _, err := natsx.EnsureKV(ctx, js, "OLDKV", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := natsx.EnsureMemoryStream(ctx, js, "OLD", "old.>"); err != nil {
		t.Fatalf("memory over a file stream: %v", err)
	}
	kv, err := natsx.EnsureMemoryKV(ctx, js, "OLDKV", time.Minute)
	if err != nil {
		t.Fatalf("memory over a file bucket: %v", err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"OLD", "KV_OLDKV"} {
		if got := storage(s); got != jetstream.FileStorage {
			t.Fatalf("%s on %v, want the file storage it was created with", s, got)
		}
	}
}
