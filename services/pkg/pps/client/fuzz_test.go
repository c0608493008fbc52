package client

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
)

// fuzzFeed is a feed holding epoch 0 of a function from round 0, without a connection.
func fuzzFeed(t testing.TB, f *dsl.Function) *Feed {
	s := &Subscriber{opt: SubscriberOptions{RegrantWait: time.Millisecond}, done: make(chan struct{})}
	feed := &Feed{fn: f, sub: s, keyring: pps.NewSubscription(4), regrants: make(chan struct{}), seen: map[string]bool{}}
	g := pps.Grant{Round: 0, Epoch: 0}
	if err := feed.keyring.Accept(&g); err != nil {
		t.Fatal(err)
	}
	return feed
}

// FuzzFeedOpen: whatever the broker puts on a function's output topic, the subscriber's
// decoding and unmasking returns an output, a skip or an epoch error — never a panic — and
// an output it returns has exactly the schema's values.
func FuzzFeedOpen(f *testing.F) {
	fn, err := dsl.Compile(`(begin (define a (val "a")) (define b (val "b")) (start-building) (list (+ a b) (< a b)))`)
	if err != nil {
		f.Fatal(err)
	}
	ok, _ := json.Marshal(&contract.Output{V: 1, Fn: fn.ID, Exec: "00112233445566778899aabbccddeeff", Round: 3, Bits: fn.OutputBits(),
		Masked: make([]byte, pps.OutputBytes(fn.OutputBits())), Status: contract.StatusOK, Valid: 2})
	bottom, _ := json.Marshal(&contract.Output{V: 1, Fn: fn.ID, Exec: "00112233445566778899aabbccddeeff", Status: contract.StatusInsufficient})
	newer, _ := json.Marshal(&contract.Output{V: 1, Fn: fn.ID, Exec: "ffeeddccbbaa99887766554433221100", Epoch: 9, Bits: fn.OutputBits(),
		Masked: make([]byte, pps.OutputBytes(fn.OutputBits())), Status: contract.StatusOK})
	for _, seed := range [][]byte{ok, bottom, newer, []byte(`{}`), []byte(`{"v":1,"status":"ok"}`)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		feed := fuzzFeed(t, fn)
		o, err := feed.open(context.Background(), b)
		switch {
		case err == nil:
			if !o.Insufficient && len(o.Values) != len(fn.Outputs) {
				t.Fatalf("%d values for a schema of %d", len(o.Values), len(fn.Outputs))
			}
		case errors.Is(err, errSkip), errors.Is(err, pps.ErrEpoch):
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}

// FuzzDecodeState: a persisted state that does not decode is ErrState, never a panic.
func FuzzDecodeState(f *testing.F) {
	pk := make(ed25519.PublicKey, ed25519.PublicKeySize)
	good := append([]byte(stateMagic), stateVersion)
	good = append(good, pk...)
	good = append(good, make([]byte, 8+pps.SeedSize)...)
	f.Add(good)
	f.Add([]byte(stateMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, _, err := decodeState(b, pk); err != nil && !errors.Is(err, ErrState) {
			t.Fatalf("error %v does not wrap ErrState", err)
		}
	})
}

// FuzzRegrant: a regrant message the subscriber did not get from the pinned garbler over
// its own handshake is refused.
func FuzzRegrant(f *testing.F) {
	fn := "0123456789abcdef0123456789abcdef"
	_, sk, _ := ed25519.GenerateKey(nil)
	_, gsk, _ := ed25519.GenerateKey(nil)
	d := &Device{Key: sk, Garbler: gsk.Public().(ed25519.PublicKey)}
	hs, err := newHandshake(d, contract.TypeSub, fn, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"v":1,"type":"regrant","fn":"` + fn + `","grant":"AAAA","sig":""}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dn, err := contract.DecodeDown(b)
		if err != nil || dn.Ack == nil {
			return
		}
		feed := &Feed{sub: &Subscriber{dev: *d}, hello: hs.hello, keyring: pps.NewSubscription(1), regrants: make(chan struct{})}
		feed.fn = &dsl.Function{ID: fn}
		if err := feed.regrant(dn.Ack); err == nil {
			t.Fatal("a regrant not signed by the garbler was accepted")
		}
	})
}
