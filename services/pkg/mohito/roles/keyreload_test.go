package roles

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/keys"
	"github.com/obscura-iot/obscura/services/pkg/mohito"
)

// secretDir writes files the way the kubelet's atomic writer updates a Secret volume: the data
// lives in a timestamped directory, ..data points at it, and every key is a symlink through
// ..data; an update writes a new directory and swaps ..data.
type secretDir struct {
	t    *testing.T
	root string
	gen  int
}

func (s *secretDir) write(files map[string][]byte) {
	s.t.Helper()
	s.gen++
	dir := fmt.Sprintf("..2026_11_22_%02d", s.gen)
	if err := os.Mkdir(filepath.Join(s.root, dir), 0o755); err != nil {
		s.t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(s.root, dir, name), b, 0o400); err != nil {
			s.t.Fatal(err)
		}
		link := filepath.Join(s.root, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				s.t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(s.root, "..data_tmp")
	if err := os.Symlink(dir, tmp); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.root, "..data")); err != nil {
		s.t.Fatal(err)
	}
}

func encodedKey(t *testing.T, k *mohito.PrivateKey) []byte {
	t.Helper()
	b, err := k.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return []byte(base64.StdEncoding.EncodeToString(b))
}

func newKeyFixture(t *testing.T) (*secretDir, *keys.Source, []*mohito.PrivateKey) {
	t.Helper()
	ks := make([]*mohito.PrivateKey, 4)
	for i := range ks {
		k, err := mohito.GenerateKey(mohito.SuiteX25519)
		if err != nil {
			t.Fatal(err)
		}
		ks[i] = k
	}
	d := &secretDir{t: t, root: t.TempDir()}
	return d, &keys.Source{File: d.root}, ks
}

// TestKeyReloaderStagesThenActivates: a new epoch in a live-updated Secret volume is staged at
// the next reload (it decrypts at once), named and announced only after the activation delay,
// and an epoch that retention retired is not re-added although its file remains.
func TestKeyReloaderStagesThenActivates(t *testing.T) {
	dir, src, ks := newKeyFixture(t)
	dir.write(map[string][]byte{keys.EpochFileName(1): encodedKey(t, ks[1])})
	ring, err := mohito.NewKeyRing(mohito.SuiteX25519, mohito.MinKeyRetention)
	if err != nil {
		t.Fatal(err)
	}
	if err := ring.Add(1, ks[1]); err != nil {
		t.Fatal(err)
	}
	const delay = time.Minute
	r := &KeyReloader{Ring: ring, Load: src.LoadRing, Interval: time.Second, ActivationDelay: delay}
	t0 := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

	if staged, err := r.Reload(context.Background(), t0); err != nil || len(staged) != 0 {
		t.Fatalf("reload without a new epoch: staged %v, %v", staged, err)
	}
	dir.write(map[string][]byte{keys.EpochFileName(1): encodedKey(t, ks[1]), keys.EpochFileName(2): encodedKey(t, ks[2]), "README": []byte("not a key")})
	staged, err := r.Reload(context.Background(), t0)
	if err != nil || !slices.Equal(staged, []uint32{2}) {
		t.Fatalf("staged %v, %v", staged, err)
	}
	if _, err := ring.KeyFor(2, ks[2].PublicKey()); err != nil {
		t.Fatalf("a staged epoch must decrypt: %v", err)
	}
	if e, _, _ := ring.Current(); e != 1 {
		t.Fatalf("current = %d before the activation delay", e)
	}
	if due := r.ActivateDue(t0.Add(delay - time.Nanosecond)); len(due) != 0 {
		t.Fatalf("activated %v before the delay", due)
	}
	if got := r.next(t0.Add(delay - time.Second)); got != time.Second {
		t.Fatalf("next wake %v, want the pending activation in 1s", got)
	}
	if due := r.ActivateDue(t0.Add(delay)); !slices.Equal(due, []uint32{2}) {
		t.Fatalf("activated %v at the delay", due)
	}
	if e, _, _ := ring.Current(); e != 2 {
		t.Fatalf("current = %d after activation", e)
	}
	if pk := ring.PublicKeys().Lookup(2); pk == nil || !pk.Equal(ks[2].PublicKey()) {
		t.Fatal("the active epoch is not announced")
	}

	// Rounds name epoch 2 until epoch 1 is retired; its file stays in the volume.
	for round := uint64(10); round < 20 && ring.Len() > 1; round++ {
		ring.Observe(round, 2)
	}
	if got := ring.Epochs(); !slices.Equal(got, []uint32{2}) {
		t.Fatalf("epochs after retention: %v", got)
	}
	if staged, err := r.Reload(context.Background(), t0.Add(2*delay)); err != nil || len(staged) != 0 {
		t.Fatalf("a retired epoch came back: staged %v, %v", staged, err)
	}
}

// TestKeyReloaderBadKey: an undecodable key file fails the reload without showing its content,
// and the keys held keep serving.
func TestKeyReloaderBadKey(t *testing.T) {
	dir, src, ks := newKeyFixture(t)
	ring, _ := mohito.NewKeyRing(mohito.SuiteX25519, mohito.MinKeyRetention)
	if err := ring.Add(0, ks[0]); err != nil {
		t.Fatal(err)
	}
	bad := []byte(strings.Repeat("z", 44)) // 44 characters, not base64 of 32 bytes
	dir.write(map[string][]byte{keys.EpochFileName(3): encodedKey(t, ks[3]), keys.EpochFileName(4): bad})
	r := &KeyReloader{Ring: ring, Load: src.LoadRing, Interval: time.Second, ActivationDelay: time.Second}
	_, err := r.Reload(context.Background(), time.Now())
	if err == nil {
		t.Fatal("a bad key file loaded")
	}
	if strings.Contains(err.Error(), string(bad)) {
		t.Fatalf("the error shows key material: %v", err)
	}
	if e, _, _ := ring.Current(); e != 0 {
		t.Fatalf("current = %d after a failed reload", e)
	}

}

// TestKeyReloaderRun: the loop picks up a new epoch from the volume and calls OnActivate once it
// is current.
func TestKeyReloaderRun(t *testing.T) {
	dir, src, ks := newKeyFixture(t)
	dir.write(map[string][]byte{keys.EpochFileName(0): encodedKey(t, ks[0])})
	ring, _ := mohito.NewKeyRing(mohito.SuiteX25519, mohito.MinKeyRetention)
	if err := ring.Add(0, ks[0]); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var activated []uint32
	m := NewMetrics(nil)
	r := &KeyReloader{Ring: ring, Load: src.LoadRing, Interval: 10 * time.Millisecond, ActivationDelay: 30 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: m,
		OnActivate: func(_ context.Context, e uint32) { mu.Lock(); activated = append(activated, e); mu.Unlock() }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	dir.write(map[string][]byte{keys.EpochFileName(0): encodedKey(t, ks[0]), keys.EpochFileName(1): encodedKey(t, ks[1])})
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		got := slices.Clone(activated)
		mu.Unlock()
		if len(got) > 0 {
			if !slices.Equal(got, []uint32{1}) {
				t.Fatalf("activated %v", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("epoch 1 never activated")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if e, _, _ := ring.Current(); e != 1 {
		t.Fatalf("current = %d", e)
	}
}
