package natsx_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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

// TestMemoryStorageRecreatedOnReconnect: a single NATS server restarts without its memory
// streams, buckets and object stores (the NATS reloader restarts it for a changed account);
// each connection that ensured one ensures it again when it reconnects, so publishing into it
// works again without restarting the client. File-stored ones come back from the store.
func TestMemoryStorageRecreatedOnReconnect(t *testing.T) {
	n := testenv.StartNATS(t)
	nc := n.Connect(t, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	reconnected := make(chan struct{}, 1)
	nc.SetReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }) // a handler of the caller's own, kept
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := natsx.EnsureMemoryStreamMaxAge(ctx, js, "WORK", time.Minute, "w.>"); err != nil {
		t.Fatal(err)
	}
	if _, err := natsx.EnsureMemoryKV(ctx, js, "INFO", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := natsx.EnsureMemoryObjectStore(ctx, js, "TABLES", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := natsx.EnsureStream(ctx, js, "KEYS", "k.>"); err != nil {
		t.Fatal(err)
	}
	if err := n.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reconnected:
	case <-ctx.Done():
		t.Fatal("no reconnect after the restart")
	}
	testenv.Eventually(t, 30*time.Second, "memory storage re-created", func() error {
		for _, s := range []string{"WORK", "KV_INFO", "OBJ_TABLES", "KEYS"} {
			if _, err := js.Stream(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		if _, err := js.Publish(ctx, "w.1", []byte("x")); err != nil {
			return err
		}
		return nil
	})
	si, err := js.Stream(ctx, "WORK")
	if err != nil {
		t.Fatal(err)
	}
	if c := si.CachedInfo().Config; c.Storage != jetstream.MemoryStorage || c.MaxAge != time.Minute {
		t.Fatalf("re-created WORK: storage %v, max age %v: want memory, 1m0s", c.Storage, c.MaxAge)
	}
}
