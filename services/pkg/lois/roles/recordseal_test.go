package roles

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRecordKeyRotation: session records sealed before a rotation of the record key still
// open after it — those of the original format (LRS1, no key id) and those sealed under
// key id 0 — while every record sealed after it carries and uses the new key id; a
// replica whose key file lacks the new id refuses its records with ErrUnknownRecordKey
// naming the id and the ids it holds, and opens them once its file (a mounted Secret)
// has the new key, without a restart; "current <id>" keeps sealing under an older key
// while a new one is distributed; a running sealer follows its file when another key is made
// current, without a restart; malformed files are refused without quoting a key.
func TestRecordKeyRotation(t *testing.T) {
	dir := t.TempDir()
	oldKey, newKey := NewRecordKey(), NewRecordKey()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const subj = "lois.session.c1.open.abc"
	data := []byte(`{"session":"abc"}`)

	// Before: a one-key file in the original format (a bare key: id 0).
	replicaFile := write("replica", string(oldKey)+"\n")
	before, err := ReadRecordKey(replicaFile)
	if err != nil {
		t.Fatal(err)
	}
	legacy := sealLRS1(t, oldKey, subj, data) // as records were sealed before key ids
	sealed0 := before.Seal(subj, data)
	if !bytes.HasPrefix(sealed0, []byte(recordMagic2)) || binary.BigEndian.Uint32(sealed0[4:]) != 0 {
		t.Fatalf("a record under the one-key file: header %x, want LRS2 and key id 0", sealed0[:8])
	}

	// Rotation at the registrar: key 1 added, the newest is current.
	rotated, err := ReadRecordKey(write("registrar", fmt.Sprintf("# rotated\n0 %s\n1 %s\n", oldKey, newKey)))
	if err != nil {
		t.Fatal(err)
	}
	if rotated.CurrentKeyID() != 1 {
		t.Fatalf("current key id %d, want 1", rotated.CurrentKeyID())
	}
	for name, rec := range map[string][]byte{"LRS1": legacy, "key id 0": sealed0} {
		if got, err := rotated.Open(subj, rec); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("a record sealed before the rotation (%s) does not open after it: %v", name, err)
		}
	}
	sealed1 := rotated.Seal(subj, data)
	if binary.BigEndian.Uint32(sealed1[4:]) != 1 {
		t.Fatalf("a record written after the rotation names key id %d, want 1", binary.BigEndian.Uint32(sealed1[4:]))
	}
	if _, err := (mustSeal(t, newKey)).Open(subj, sealed1); err != nil {
		// the body is sealed under the new key itself, not only labelled with its id
		t.Fatalf("the new record does not open under the new key alone: %v", err)
	}

	// A replica still holding only key 0 refuses the new record, clearly.
	before.lastRead.Store(0) // as if its last read were long ago
	_, err = before.Open(subj, sealed1)
	if !errors.Is(err, ErrUnknownRecordKey) || !errors.Is(err, ErrRecordSeal) ||
		!strings.Contains(err.Error(), "key id 1") || !strings.Contains(err.Error(), "[0]") {
		t.Fatalf("a record under a key id the replica lacks: %v", err)
	}
	if strings.Contains(err.Error(), string(oldKey)) || strings.Contains(err.Error(), string(newKey)) {
		t.Fatal("the refusal quotes a key")
	}
	// Its mounted file gets the new key: the next record under id 1 opens, no restart.
	write("replica", fmt.Sprintf("0 %s\n1 %s\n", oldKey, newKey))
	before.lastRead.Store(0)
	if got, err := before.Open(subj, sealed1); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after the key file changed: %v", err)
	}

	// A record under an id no file holds is refused, naming it.
	forged := bytes.Clone(sealed1)
	binary.BigEndian.PutUint32(forged[4:], 7)
	if _, err := rotated.Open(subj, forged); !errors.Is(err, ErrUnknownRecordKey) || !strings.Contains(err.Error(), "key id 7") {
		t.Fatalf("a record under key id 7: %v", err)
	}
	// A record under a known id but another key (a relabelled id) does not open.
	relabelled := bytes.Clone(sealed1)
	binary.BigEndian.PutUint32(relabelled[4:], 0)
	if _, err := rotated.Open(subj, relabelled); err == nil || errors.Is(err, ErrUnknownRecordKey) {
		t.Fatalf("a record relabelled to key id 0: %v", err)
	}

	// Two-phase rollout: the new key distributed, sealing still under the old one.
	staged, err := ReadRecordKey(write("staged", fmt.Sprintf("0 %s\n1 %s\ncurrent 0\n", oldKey, newKey)))
	if err != nil || staged.CurrentKeyID() != 0 {
		t.Fatalf("current 0: %v, id %d", err, staged.CurrentKeyID())
	}
	if got, err := before.Open(subj, staged.Seal(subj, data)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("a staged rotation's record: %v", err)
	}

	// The registrar's own file is rotated under it (the operator removes "current 0"): its
	// next record is sealed under key 1 without a restart, and a malformed file met on the
	// way leaves the keys it holds.
	registrarFile := write("running", fmt.Sprintf("0 %s\n1 %s\ncurrent 0\n", oldKey, newKey))
	running, err := ReadRecordKey(registrarFile)
	if err != nil {
		t.Fatal(err)
	}
	if id := binary.BigEndian.Uint32(running.Seal(subj, data)[4:]); id != 0 {
		t.Fatalf("staged: sealed under key id %d, want 0", id)
	}
	write("running", "0 abcd\n")
	running.lastRead.Store(0) // as if its last read were a second ago or more
	if id := binary.BigEndian.Uint32(running.Seal(subj, data)[4:]); id != 0 {
		t.Fatalf("after a malformed file: sealed under key id %d, want 0 (the keys kept)", id)
	}
	write("running", fmt.Sprintf("0 %s\n1 %s\n", oldKey, newKey))
	running.lastRead.Store(0)
	promoted := running.Seal(subj, data)
	if id := binary.BigEndian.Uint32(promoted[4:]); id != 1 || running.CurrentKeyID() != 1 {
		t.Fatalf("after the promotion: sealed under key id %d, want 1", id)
	}
	if _, err := (mustSeal(t, newKey)).Open(subj, promoted); err != nil {
		t.Fatalf("the promoted record does not open under the new key alone: %v", err)
	}

	for name, content := range map[string]string{
		"empty":           "# nothing\n",
		"short key":       "0 abcd\n",
		"duplicate id":    fmt.Sprintf("1 %s\n1 %s\n", oldKey, newKey),
		"current unknown": fmt.Sprintf("0 %s\ncurrent 3\n", oldKey),
		"bad id":          fmt.Sprintf("x %s\n", oldKey),
		"three fields":    fmt.Sprintf("0 %s extra\n", oldKey),
	} {
		_, err := ReadRecordKey(write("bad", content))
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), string(oldKey)) {
			t.Errorf("%s: the error quotes the key", name)
		}
	}
}

func mustSeal(t *testing.T, hexKey []byte) *RecordSeal {
	t.Helper()
	key, err := hex.DecodeString(string(hexKey))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewRecordSeal(key)
	if err != nil {
		t.Fatal(err)
	}
	// NewRecordSeal's key is id 0; relabel it 1 to open records of key id 1.
	k := s.keys.Load()
	k.aead[1], k.current = k.aead[0], 1
	delete(k.aead, 0)
	return s
}

// sealLRS1 seals data as the registrar did before key ids: "LRS1" ‖ nonce ‖ AES-256-GCM.
func sealLRS1(t *testing.T, hexKey []byte, subject string, data []byte) []byte {
	t.Helper()
	key, err := hex.DecodeString(string(hexKey))
	if err != nil {
		t.Fatal(err)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	a, err := cipher.NewGCM(b)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(recordMagic)+a.NonceSize())
	copy(out, recordMagic)
	if _, err := rand.Read(out[len(recordMagic):]); err != nil {
		t.Fatal(err)
	}
	return a.Seal(out, out[len(recordMagic):], data, []byte(subject))
}
