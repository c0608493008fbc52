package keys_test

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/keys"
	"github.com/obscura-iot/obscura/services/testenv"
)

func epochsOf(es []keys.Epoch) []uint32 {
	var out []uint32
	for _, e := range es {
		out = append(out, e.N)
	}
	return out
}

// TestLoadRingDirectory: a Secret mounted whole is a directory of
// epoch-<n>.key files (with kubelet's ..data links beside them); a plain file
// is epoch 0.
func TestLoadRingDirectory(t *testing.T) {
	dir := t.TempDir()
	k0, k2, k10 := key32(1), key32(2), key32(3)
	// kubelet layout: the keys are symlinks into a timestamped directory.
	data := filepath.Join(dir, "..2026_01_01_00_00_00.1")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(data, name), b, 0o400); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(data, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	write("epoch-10.key", []byte(hex.EncodeToString(k10)+"\n"))
	write("epoch-0.key", k0)
	write("epoch-2.key", k2)
	write("private.key", key32(9))    // not an epoch: ignored
	write("epoch-02.key", key32(8))   // non-canonical number: ignored
	write("epoch-x.key", []byte("x")) // ignored
	src := &keys.Source{File: dir}
	ring, err := src.LoadRing(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := epochsOf(ring); len(got) != 3 || got[0] != 0 || got[1] != 2 || got[2] != 10 {
		t.Fatalf("epochs %v", got)
	}
	if !bytes.Equal(ring[0].Key, k0) || !bytes.Equal(ring[1].Key, k2) || !bytes.Equal(ring[2].Key, k10) {
		t.Fatal("keys do not match their epochs")
	}

	single := filepath.Join(t.TempDir(), "private.key")
	if err := os.WriteFile(single, k2, 0o400); err != nil {
		t.Fatal(err)
	}
	ring, err = (&keys.Source{File: single}).LoadRing(ctx(t))
	if err != nil || len(ring) != 1 || ring[0].N != 0 || !bytes.Equal(ring[0].Key, k2) {
		t.Fatalf("single file: %v %v", epochsOf(ring), err)
	}

	empty := t.TempDir()
	if _, err := (&keys.Source{File: empty}).LoadRing(ctx(t)); err == nil || !strings.Contains(err.Error(), "no epoch-<n>.key") {
		t.Fatalf("empty directory: %v", err)
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "epoch-1.key"), []byte("short"), 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := (&keys.Source{File: bad}).LoadRing(ctx(t)); err == nil || !strings.Contains(err.Error(), "epoch-1.key") {
		t.Fatalf("bad epoch file: %v", err)
	}
	if keys.EpochFileName(7) != "epoch-7.key" {
		t.Fatal(keys.EpochFileName(7))
	}
}

// TestVaultRing reads a ring from a KV v2 folder of epoch-<n> secrets on a
// real Vault dev server; a path without the trailing '/' is one key, epoch 0.
func TestVaultRing(t *testing.T) {
	t.Parallel()
	v := testenv.StartVault(t)
	kv := v.Client(t).KVv2("secret")
	k1, k4 := key32(0x21), key32(0x24)
	for path, k := range map[string][]byte{"mohito/ring/epoch-1": k1, "mohito/ring/epoch-4": k4, "mohito/ring/notes": key32(0x30)} {
		if _, err := kv.Put(ctx(t), path, map[string]any{"private_key": hex.EncodeToString(k)}); err != nil {
			t.Fatal(err)
		}
	}
	src := func(path string) *keys.Source {
		return &keys.Source{Vault: keys.Vault{Addr: v.Addr(), Path: path, Token: v.RootToken, Timeout: 10 * time.Second}}
	}
	ring, err := src("mohito/ring/").LoadRing(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := epochsOf(ring); len(got) != 2 || got[0] != 1 || got[1] != 4 || !bytes.Equal(ring[1].Key, k4) {
		t.Fatalf("vault ring epochs %v", got)
	}
	ring, err = src("mohito/ring/epoch-4").LoadRing(ctx(t))
	if err != nil || len(ring) != 1 || ring[0].N != 0 || !bytes.Equal(ring[0].Key, k4) {
		t.Fatalf("single secret: %v %v", epochsOf(ring), err)
	}
	if _, err := src("mohito/none/").LoadRing(ctx(t)); err == nil {
		t.Fatal("empty folder accepted")
	}
}
