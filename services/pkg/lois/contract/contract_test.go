package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/lois"
)

func sample() *Keys {
	s := lois.Stream{Dir: lois.Down, SID: 8080, Epoch: 1, N: 16, Dup: []uint32{3}, Expiry: 1_800_000_000}
	s.Key[0] = 1
	return &Keys{Version: KeysVersion, Session: "00112233445566778899aabbccddeeff", DeviceIP: "10.99.0.2",
		DeviceWire: "10.0.1.2:7401", Replicas: 2, Replica: 1, Streams: []Stream{FromCore(&s)}}
}

// TestKeysRoundTrip: a keys file written and read back gives the same streams; every
// field the roles depend on is checked by Validate.
func TestKeysRoundTrip(t *testing.T) {
	path := t.TempDir() + "/k.json"
	if err := WriteKeys(path, sample()); err != nil {
		t.Fatal(err)
	}
	k, err := ReadKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := k.Streams[0].Core()
	if err != nil || s.Dir != lois.Down || s.SID != 8080 || s.Key[0] != 1 || len(s.Dup) != 1 {
		t.Fatalf("stream %+v, %v", s, err)
	}
	for name, mut := range map[string]func(*Keys){
		"version":  func(k *Keys) { k.Version = 2 },
		"session":  func(k *Keys) { k.Session = "zz" },
		"device":   func(k *Keys) { k.DeviceIP = "nope" },
		"wire":     func(k *Keys) { k.DeviceWire = "10.0.0.1" },
		"replica":  func(k *Keys) { k.Replica = 2 },
		"key":      func(k *Keys) { k.Streams[0].Key = "00" },
		"dir":      func(k *Keys) { k.Streams[0].Dir = "sideways" },
		"dup sort": func(k *Keys) { k.Streams[0].Dup = []uint32{5, 1} },
	} {
		k := sample()
		mut(k)
		b, _ := json.Marshal(k)
		if _, err := ParseKeys(b); err == nil {
			t.Errorf("%s: invalid keys accepted", name)
		}
	}
}

// FuzzParseKeys: session records arrive from JetStream; any input gives an error or keys
// whose every stream converts, and accepted keys re-encode to an equivalent record.
func FuzzParseKeys(f *testing.F) {
	b, _ := json.Marshal(sample())
	f.Add(b)
	f.Add([]byte(`{"version":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := ParseKeys(data)
		if err != nil {
			return
		}
		for i := range k.Streams {
			if _, err := k.Streams[i].Core(); err != nil {
				t.Fatalf("validated keys with a bad stream: %v", err)
			}
		}
		again, err := json.Marshal(k)
		if err != nil {
			t.Fatal(err)
		}
		k2, err := ParseKeys(again)
		if err != nil {
			t.Fatalf("re-encoded keys refused: %v", err)
		}
		again2, _ := json.Marshal(k2)
		if !bytes.Equal(again, again2) {
			t.Fatal("re-encoding is not stable")
		}
	})
}

// TestLowWaterSubject: an SI's low-water subject decodes to its session and service; any
// other shape is refused.
func TestLowWaterSubject(t *testing.T) {
	const sess = "00112233445566778899aabbccddeeff"
	s, sid, err := ParseLowWater("c1", SubjectLowWater("c1", sess, 8080))
	if err != nil || s != sess || sid != 8080 {
		t.Fatalf("got %q %d %v", s, sid, err)
	}
	for _, bad := range []string{"lois.c2.lowwater." + sess + ".1", "lois.c1.lowwater." + sess,
		"lois.c1.lowwater." + sess + ".65536", "lois.c1.lowwater." + sess + ".01", "lois.c1.lowwater.zz.1",
		"lois.c1.lowwater." + sess + ".1.2", "lois.c1.lowwater.00112233445566778899AABBCCDDEEFF.1"} {
		if _, _, err := ParseLowWater("c1", bad); err != ErrBadLowWater {
			t.Errorf("%q: %v, want ErrBadLowWater", bad, err)
		}
	}
}

// FuzzParseLowWater: low-water subjects come from the network (NATS); the decoder never
// panics, and what it accepts re-encodes to the same subject.
func FuzzParseLowWater(f *testing.F) {
	f.Add(SubjectLowWater("c1", "00112233445566778899aabbccddeeff", 443))
	f.Add("lois.c1.lowwater..")
	f.Fuzz(func(t *testing.T, subj string) {
		s, sid, err := ParseLowWater("c1", subj)
		if err != nil {
			if err != ErrBadLowWater {
				t.Fatalf("error %v", err)
			}
			return
		}
		if SubjectLowWater("c1", s, sid) != subj {
			t.Fatalf("%q accepted as %q %d", subj, s, sid)
		}
	})
}

// TestSealBindsKindAndSession: a sealed control body opens only under its key, kind and
// session, and not once altered.
func TestSealBindsKindAndSession(t *testing.T) {
	key, other := make([]byte, ControlKeySize), make([]byte, ControlKeySize)
	other[0] = 1
	s, err := Seal(key, SealGrant, "s1", []byte("keys"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := Open(key, SealGrant, "s1", s); err != nil || string(b) != "keys" {
		t.Fatalf("open: %q %v", b, err)
	}
	bad := append([]byte{}, s...)
	bad[len(bad)-1] ^= 1
	for name, f := range map[string]func() ([]byte, error){
		"other key":     func() ([]byte, error) { return Open(other, SealGrant, "s1", s) },
		"other kind":    func() ([]byte, error) { return Open(key, SealEpoch, "s1", s) },
		"other session": func() ([]byte, error) { return Open(key, SealGrant, "s2", s) },
		"altered":       func() ([]byte, error) { return Open(key, SealGrant, "s1", bad) },
		"short":         func() ([]byte, error) { return Open(key, SealGrant, "s1", s[:10]) },
	} {
		if _, err := f(); !errors.Is(err, ErrSealed) {
			t.Errorf("%s: %v, want ErrSealed", name, err)
		}
	}
}
