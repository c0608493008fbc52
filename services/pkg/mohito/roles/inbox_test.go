package roles

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/testenv"
)

func inboxKeySet(t *testing.T) mohito.KeySet {
	t.Helper()
	k, err := mohito.GenerateKey(mohito.SuiteX25519)
	if err != nil {
		t.Fatal(err)
	}
	return mohito.KeySet{{Epoch: 0, Key: k.PublicKey()}}
}

// announceAndRead announces a vendor key set and an integrator key set and reads both back,
// by the last message and by a watch, as the roles do.
func announceAndRead(ctx context.Context, t *testing.T, js jetstream.JetStream) {
	t.Helper()
	p := mohito.Params{Vendors: 1, Suite: mohito.SuiteX25519}
	vks, iks := inboxKeySet(t), inboxKeySet(t)
	if err := AnnounceVendorKey(ctx, js, 0, vks); err != nil {
		t.Fatal(err)
	}
	if err := AnnounceIntegratorKey(ctx, js, 0, iks); err != nil {
		t.Fatal(err)
	}
	dir, err := FetchVendorKeys(ctx, js, p)
	if err != nil {
		t.Fatal(err)
	}
	if cur, ok := dir.Current(0); !ok || !cur.Key.Equal(vks[0].Key) {
		t.Fatal("the vendor's key set read back is not the one announced")
	}
	got, err := FetchIntegratorKey(ctx, js, 0, p)
	if err != nil {
		t.Fatal(err)
	}
	if cur, ok := got.Current(); !ok || !cur.Key.Equal(iks[0].Key) {
		t.Fatal("the integrator's key set read back is not the one announced")
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	watched := make(chan mohito.KeySet, 1)
	go func() {
		_ = WatchIntegratorKeys(wctx, js, 0, p, slog.New(slog.DiscardHandler), NewMetrics(nil), func(ks mohito.KeySet) {
			select {
			case watched <- ks:
			default:
			}
		})
	}()
	select {
	case ks := <-watched:
		if cur, ok := ks.Current(); !ok || !cur.Key.Equal(iks[0].Key) {
			t.Fatal("the watched integrator key set is not the one announced")
		}
	case <-ctx.Done():
		t.Fatal("the integrator's key set was never delivered to a watcher")
	}
	// The integrator watches every vendor's announcements through a wildcard.
	vdir := StaticKeyDirectory([]*mohito.PublicKey{inboxKeySet(t)[0].Key})
	go func() { _ = WatchVendorKeys(wctx, js, p, vdir, slog.New(slog.DiscardHandler), NewMetrics(nil)) }()
	testenv.Eventually(t, 10*time.Second, "the vendor's key set delivered to the integrator's watch", func() error {
		if cur, ok := vdir.Current(0); !ok || !cur.Key.Equal(vks[0].Key) {
			return errors.New("not yet")
		}
		return nil
	})
}

func streamConfig(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return s.CachedInfo().Config
}

// TestInboxRoundsInMemoryKeysOnFile: on a real nats-server, each party's inbox is a memory
// stream of round messages, kept two whole rounds, and a file stream of key announcements; a
// round message lands in the round stream, and key sets are announced, read and watched
// through the key streams.
func TestInboxRoundsInMemoryKeysOnFile(t *testing.T) {
	js := testenv.StartNATS(t).JetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	d := &Deployment{Round: time.Second, ShufflerTimeout: 3 * time.Second, ResponseDeadline: time.Second}
	if err := EnsureIntegratorStreams(ctx, js, d); err != nil {
		t.Fatal(err)
	}
	if err := EnsureVendorStreams(ctx, js, 0, d); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		stream, subject string
		storage         jetstream.StorageType
	}{
		{contract.StreamIntegratorIn, contract.IntegratorRoundSubjects, jetstream.MemoryStorage},
		{contract.StreamVendorIn, contract.VendorRoundSubjects(0), jetstream.MemoryStorage},
		{contract.StreamIntegratorKeys, contract.VendorKeySubjects, jetstream.FileStorage},
		{contract.StreamVendorKeys, contract.IntegratorKeySubject(0), jetstream.FileStorage},
	} {
		cfg := streamConfig(ctx, t, js, c.stream)
		if cfg.Storage != c.storage || !slices.Equal(cfg.Subjects, []string{c.subject}) {
			t.Errorf("%s: %v storage, subjects %v; want %v, [%s]", c.stream, cfg.Storage, cfg.Subjects, c.storage, c.subject)
		}
		if want := 2 * (d.Round + d.ResponsePhase()); c.storage == jetstream.MemoryStorage && cfg.MaxAge != want {
			t.Errorf("%s keeps messages %v, not two whole rounds (%v)", c.stream, cfg.MaxAge, want)
		}
	}
	for subject, stream := range map[string]string{
		contract.ToIntegrator(0, 7, contract.KindShuffled): contract.StreamIntegratorIn,
		contract.ToVendor(0, 7, contract.KindForward):      contract.StreamVendorIn,
	} {
		ack, err := js.Publish(ctx, subject, []byte("m"))
		if err != nil || ack.Stream != stream {
			t.Fatalf("%s: stored in %v (%v), want %s", subject, ack, err, stream)
		}
	}
	announceAndRead(ctx, t, js)
	// Ensuring again (another role starting) changes nothing.
	if err := EnsureIntegratorStreams(ctx, js, d); err != nil {
		t.Fatal(err)
	}
	if err := EnsureVendorStreams(ctx, js, 0, d); err != nil {
		t.Fatal(err)
	}
}

// TestInboxOfEarlierReleaseKept: an inbox stream an earlier release created on file storage
// with every inbox subject (round messages and keys together) is left as it is, no key stream
// is created beside it, and the key sets announced into it are still read and watched.
func TestInboxOfEarlierReleaseKept(t *testing.T) {
	js := testenv.StartNATS(t).JetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for name, subject := range map[string]string{
		contract.StreamIntegratorIn: contract.IntegratorInSubjects,
		contract.StreamVendorIn:     contract.VendorInbox(0) + ".>",
	} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage}); err != nil {
			t.Fatal(err)
		}
	}
	d := &Deployment{}
	if err := EnsureIntegratorStreams(ctx, js, d); err != nil {
		t.Fatal(err)
	}
	if err := EnsureVendorStreams(ctx, js, 0, d); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{contract.StreamIntegratorIn, contract.StreamVendorIn} {
		if cfg := streamConfig(ctx, t, js, name); cfg.Storage != jetstream.FileStorage || len(cfg.Subjects) != 1 || cfg.Subjects[0] == contract.IntegratorRoundSubjects {
			t.Errorf("%s changed: %v storage, subjects %v", name, cfg.Storage, cfg.Subjects)
		}
	}
	for _, name := range []string{contract.StreamIntegratorKeys, contract.StreamVendorKeys} {
		if _, err := js.Stream(ctx, name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("%s created beside an inbox that holds the keys (err %v)", name, err)
		}
	}
	announceAndRead(ctx, t, js)
}
