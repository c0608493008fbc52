package client

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
)

var (
	// ErrRefused: the broker or the garbler refused the setup (contract.Notice "refused");
	// the error carries its reason.
	ErrRefused = errors.New("pps client: setup refused")
	// ErrTampered: an answer to the setup was not signed by the pinned garbler key over this
	// hello, or its grant did not open: the relay changed it or substituted its own key
	// exchange (spec §10 #11). The setup is abandoned; nothing derived from it is kept.
	ErrTampered = errors.New("pps client: setup answer not from the pinned garbler")
)

// downQueue is the size of a device's queue of messages from its down topic. The broker
// sends a handful per setup; a flood beyond it is dropped and counted.
const downQueue = 64

// downInbox receives the device's down topic.
type downInbox struct {
	ch chan []byte
	// Dropped counts down messages dropped because the queue was full.
	dropped atomic.Uint64
}

func newDownInbox() *downInbox { return &downInbox{ch: make(chan []byte, downQueue)} }

func (in *downInbox) put(b []byte) {
	select {
	case in.ch <- append([]byte(nil), b...):
	default:
		in.dropped.Add(1)
	}
}

// handshake is one device side of a setup exchange (spec §8.9): an ephemeral X25519 key,
// a signed hello and, once the garbler's acknowledgement validates under the pinned key,
// the session keys.
type handshake struct {
	eph   *ecdh.PrivateKey
	hello *contract.Hello
	raw   []byte
}

func newHandshake(d *Device, typ, fn string, policy *contract.Policy) (*handshake, error) {
	eph, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ephemeral key: %w", err)
	}
	h := &contract.Hello{V: contract.Version, Type: typ, Fn: fn, EdPK: []byte(d.Key.Public().(ed25519.PublicKey)),
		XEphPK: eph.PublicKey().Bytes(), Nonce: make([]byte, contract.NonceSize), Policy: policy}
	if typ == contract.TypeHello {
		h.Role = contract.RolePublisher
	}
	if _, err := rand.Read(h.Nonce); err != nil {
		return nil, fmt.Errorf("hello nonce: %w", err)
	}
	h.Sign(d.Key)
	// The device checks its own hello with the decoder the garbler uses, so a policy the
	// garbler would refuse fails here with the reason instead of after a round trip.
	if err := h.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", typ, err)
	}
	raw, err := marshal(h)
	if err != nil {
		return nil, err
	}
	return &handshake{eph: eph, hello: h, raw: raw}, nil
}

// keys validates the garbler's acknowledgement and derives the session keys. An ack that
// does not validate is ErrTampered.
func (hs *handshake) keys(a *contract.Ack, garbler []byte) (pps.SessionKeys, error) {
	if err := a.Validate(hs.hello, garbler); err != nil {
		return pps.SessionKeys{}, fmt.Errorf("%s: %v: %w", a.Type, err, ErrTampered)
	}
	k, err := pps.ClientSessionKeys(hs.eph, a.XEphPK)
	if err != nil {
		return pps.SessionKeys{}, fmt.Errorf("%s: %v: %w", a.Type, err, ErrTampered)
	}
	return k, nil
}

// refused turns a "refused" notice into ErrRefused; the reason is the broker's text, bounded
// by the decoder.
func refused(n *contract.Notice) error {
	return fmt.Errorf("%w: %q", ErrRefused, n.Reason)
}

func marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode device message: %w", err)
	}
	return b, nil
}
