package contract

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func newHello(t testing.TB, typ string) (*Hello, ed25519.PrivateKey) {
	t.Helper()
	pk, sk, _ := ed25519.GenerateKey(rand.Reader)
	h := &Hello{V: Version, Type: typ, EdPK: pk, XEphPK: make([]byte, KeySize), Nonce: make([]byte, NonceSize)}
	rand.Read(h.XEphPK)
	rand.Read(h.Nonce)
	fn := strings.Repeat("ab", FnIDLen/2)
	if typ == TypeHello {
		h.Role = RolePublisher
		h.Policy = &Policy{Fns: []string{fn}, MinInputs: 3}
	} else {
		h.Fn = fn
	}
	h.Sign(sk)
	return h, sk
}

func TestHelloRoundTripsAndAnyChangedFieldBreaksTheSignature(t *testing.T) {
	for _, typ := range []string{TypeHello, TypeSub} {
		h, _ := newHello(t, typ)
		b, _ := json.Marshal(h)
		got, err := DecodeHello(b)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if got.DeviceID() != DeviceID(h.EdPK) || got.Transcript() != h.Transcript() {
			t.Fatalf("%s: decoded hello differs", typ)
		}
		// A relaying broker that changes any byte is caught (spec §10 #11).
		mutations := []func(*Hello){
			func(h *Hello) { h.XEphPK[0] ^= 1 },
			func(h *Hello) { h.Nonce[5] ^= 1 },
			func(h *Hello) {
				if h.Policy != nil {
					h.Policy.MinInputs = 0
				} else {
					h.Fn = strings.Repeat("cd", FnIDLen/2)
				}
			},
		}
		for i, m := range mutations {
			c, _ := DecodeHello(b)
			m(c)
			cb, _ := json.Marshal(c)
			if _, err := DecodeHello(cb); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "signature") {
				t.Errorf("%s mutation %d: got %v, want a signature failure", typ, i, err)
			}
		}
	}
}

func TestAckVerifiesOnlyUnderThePinnedGarblerKey(t *testing.T) {
	h, _ := newHello(t, TypeSub)
	gpk, gsk, _ := ed25519.GenerateKey(rand.Reader)
	_, evil, _ := ed25519.GenerateKey(rand.Reader)
	a := &Ack{V: Version, Type: TypeSubAck, Fn: h.Fn, XEphPK: make([]byte, KeySize), Nonce: make([]byte, NonceSize), Grant: []byte("sealed-grant")}
	a.Sig = ed25519.Sign(gsk, a.SigningBytes(h.Transcript()))
	b, _ := json.Marshal(a)
	d, err := DecodeDown(b)
	if err != nil || d.Ack == nil {
		t.Fatalf("decode: %v", err)
	}
	if err := d.Ack.Validate(h, gpk); err != nil {
		t.Fatal(err)
	}
	forged := *a
	forged.Sig = ed25519.Sign(evil, a.SigningBytes(h.Transcript()))
	if err := forged.Validate(h, gpk); !errors.Is(err, ErrMalformed) {
		t.Fatalf("an ack signed by another key validated: %v", err)
	}
	other, _ := newHello(t, TypeSub)
	if err := a.Validate(other, gpk); err == nil {
		t.Fatal("an ack validated against another hello's transcript")
	}
}

func TestSubjectsAndTopicsMapOneToOne(t *testing.T) {
	id := strings.Repeat("0f", IDLen/2)
	for _, s := range []string{DevUpSubject(id), DevDownSubject(id), PubSubject(id), OutSubject(id[:FnIDLen])} {
		got, err := Subject(Topic(s))
		if err != nil || got != s {
			t.Errorf("%s → %s → %s, %v", s, Topic(s), got, err)
		}
	}
	if got, err := ParsePubSubject(PubSubject(id)); err != nil || got != id {
		t.Errorf("ParsePubSubject: %s %v", got, err)
	}
	if got, err := ParseDevUpSubject(DevUpSubject(id)); err != nil || got != id {
		t.Errorf("ParseDevUpSubject: %s %v", got, err)
	}
	// Topics with '.', wildcards or empty levels are refused, never escaped (spec §10 #15).
	for _, bad := range []string{"pps/pub/a.b", "pps/pub/+", "pps/pub/#", "pps//x", "other/x", "pps/pub/a b"} {
		if _, err := Subject(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("Subject(%q) = %v, want refused", bad, err)
		}
	}
	for _, bad := range []string{"pps.pub." + strings.ToUpper(id), "pps.pub.x", "pps.pub." + id + ".y"} {
		if _, err := ParsePubSubject(bad); err == nil {
			t.Errorf("ParsePubSubject(%q) accepted", bad)
		}
	}
}

func TestDecodersRefuseMalformedMessages(t *testing.T) {
	cases := map[string]func([]byte) error{
		"publish": func(b []byte) error { _, err := DecodePublish(b); return err },
		"output":  func(b []byte) error { _, err := DecodeOutput(b); return err },
		"hello":   func(b []byte) error { _, err := DecodeHello(b); return err },
		"down":    func(b []byte) error { _, err := DecodeDown(b); return err },
	}
	bad := []string{``, `{}`, `[]`, `{"v":2}`, `{"v":1,"round":1,"labels":"AAAA"}`, `{"v":1,"round":1,"masked":"AAAAAA=="}{}`,
		`{"v":1,"round":1,"masked":"AAAAAA==","extra":1}`, `{"v":1,"type":"hello"}`, `{"v":1,"type":"registered","pubid":"x"}`}
	for name, decode := range cases {
		for _, b := range bad {
			if err := decode([]byte(b)); !errors.Is(err, ErrMalformed) {
				t.Errorf("%s(%s) = %v, want ErrMalformed", name, b, err)
			}
		}
	}
	if _, err := DecodePublish([]byte(`{"v":1,"round":7,"masked":"AAAAAA=="}`)); err != nil {
		t.Errorf("a valid H1 publish was refused: %v", err)
	}
	o := Output{V: Version, Fn: strings.Repeat("a", FnIDLen), Exec: strings.Repeat("b", 32), Round: 3, Masked: []byte{1, 2, 3, 4}, Bits: 32, Valid: 9, Status: StatusOK}
	b, _ := json.Marshal(o)
	if got, err := DecodeOutput(b); err != nil || got.Round != 3 {
		t.Errorf("a valid output was refused: %v", err)
	}
}

func TestDevicePermissionsNameOnlyTheDevicesOwnSubjects(t *testing.T) {
	id := strings.Repeat("0f", IDLen/2)
	pub, sub := DevicePermissions(id, []string{strings.Repeat("a", FnIDLen)})
	for _, s := range append(pub, sub...) {
		if strings.Contains(s, "*") || s == "pps.>" || s == PubSubjects || s == OutSubjects {
			t.Errorf("permission %q reaches other devices' subjects", s)
		}
	}
}

func FuzzDecodePublish(f *testing.F) {
	f.Add([]byte(`{"v":1,"round":7,"masked":"AAAAAA=="}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePublish(b)
		if err == nil && (p.Values() == 0 || p.Values() > MaxPublishValues) {
			t.Fatalf("accepted %d values", p.Values())
		}
	})
}

func FuzzDecodeHello(f *testing.F) {
	h, _ := newHello(f, TypeHello)
	b, _ := json.Marshal(h)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := DecodeHello(b); err == nil && !ed25519.Verify(h.EdPK, h.SigningBytes(), h.Sig) {
			t.Fatal("accepted an unsigned hello")
		}
	})
}

func FuzzDecodeDown(f *testing.F) {
	f.Add([]byte(`{"v":1,"type":"refused","reason":"no"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if d, err := DecodeDown(b); err == nil && (d.Ack == nil) == (d.Notice == nil) {
			t.Fatal("decoded to neither or both")
		}
	})
}

func FuzzDecodeOutput(f *testing.F) {
	f.Add([]byte(`{"v":1,"fn":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","exec":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","round":1,"epoch":0,"valid":0,"status":"insufficient"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if o, err := DecodeOutput(b); err == nil && o.Status == StatusOK && len(o.Masked)*8 < o.Bits {
			t.Fatal("accepted a short masked value")
		}
	})
}
