package contract

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// Message types (the "type" field).
const (
	TypeHello      = "hello"      // publisher setup, device → garbler (relayed)
	TypeHelloAck   = "hello-ack"  // garbler → device (relayed)
	TypeSub        = "sub"        // subscriber setup for one function, device → garbler
	TypeSubAck     = "sub-ack"    // garbler → device: the sealed function key grant
	TypeRegistered = "registered" // broker → publisher: its publishing topic
	TypeRefused    = "refused"    // broker or garbler → device: setup refused, with a reason
	TypeRegrant    = "regrant"    // garbler → subscriber: a new key epoch after a revocation (D14)
)

// RolePublisher is the only role of a hello.
const RolePublisher = "pub"

// Sizes of the fields of the setup messages.
const (
	KeySize   = 32 // Ed25519 and X25519 public keys
	NonceSize = 32
	SigSize   = ed25519.SignatureSize
	// MaxPolicyFns bounds the functions a publisher's policy names.
	MaxPolicyFns = 256
	// MaxReason bounds a refusal's reason.
	MaxReason = 256
)

// Policy is a publisher's signed policy (D13): the functions allowed to read its values and
// an optional floor on minInputs for them. The broker enforces it; the garbler checks it too.
type Policy struct {
	Fns       []string `json:"fns"`
	MinInputs int      `json:"min_inputs,omitempty"`
}

// Allows reports whether the policy lets function fn with minInputs min read the values.
func (p *Policy) Allows(fn string, min int) bool {
	return p != nil && slices.Contains(p.Fns, fn) && min >= p.MinInputs
}

func (p *Policy) validate() error {
	if p == nil {
		return fmt.Errorf("hello without a policy: %w", ErrMalformed)
	}
	if len(p.Fns) > MaxPolicyFns {
		return fmt.Errorf("policy names %d functions, at most %d: %w", len(p.Fns), MaxPolicyFns, ErrMalformed)
	}
	if p.MinInputs < 0 {
		return fmt.Errorf("policy min_inputs %d is negative: %w", p.MinInputs, ErrMalformed)
	}
	seen := make(map[string]bool, len(p.Fns))
	for _, fn := range p.Fns {
		if err := ValidFnID(fn); err != nil {
			return fmt.Errorf("policy: %w", err)
		}
		if seen[fn] {
			return fmt.Errorf("policy names function %s twice: %w", fn, ErrMalformed)
		}
		seen[fn] = true
	}
	return nil
}

// Hello is a device's setup request (spec §8.9): a publisher's "hello" (with its policy) or a
// subscriber's "sub" (with the function). The broker relays it to the garbler byte for byte;
// the signature covers every field, so a broker that changes one is caught (§10 #11).
type Hello struct {
	V      int     `json:"v"`
	Type   string  `json:"type"`
	Role   string  `json:"role,omitempty"`
	Fn     string  `json:"fn,omitempty"`
	EdPK   []byte  `json:"ed_pk"`
	XEphPK []byte  `json:"x_eph_pk"`
	Nonce  []byte  `json:"nonce"`
	Policy *Policy `json:"policy,omitempty"`
	Sig    []byte  `json:"sig"`
}

// DeviceID is the id of the device that signed the hello.
func (h *Hello) DeviceID() string { return DeviceID(h.EdPK) }

// SigningBytes is what the device signs: a domain tag, then every field length-prefixed.
func (h *Hello) SigningBytes() []byte {
	var w signer
	w.str("pps/v1/" + h.Type)
	w.u64(uint64(h.V))
	w.str(h.Role)
	w.str(h.Fn)
	w.bytes(h.EdPK)
	w.bytes(h.XEphPK)
	w.bytes(h.Nonce)
	if h.Policy != nil {
		w.u64(uint64(len(h.Policy.Fns)))
		for _, fn := range h.Policy.Fns {
			w.str(fn)
		}
		w.u64(uint64(h.Policy.MinInputs))
	}
	return w.b
}

// Sign fills Sig with the device's signature.
func (h *Hello) Sign(key ed25519.PrivateKey) { h.Sig = ed25519.Sign(key, h.SigningBytes()) }

// Transcript is the hash the garbler's acknowledgement signs and a grant's AD binds: SHA-256
// of the hello's signed bytes and its signature.
func (h *Hello) Transcript() [32]byte {
	s := sha256.New()
	s.Write(h.SigningBytes())
	s.Write(h.Sig)
	var t [32]byte
	s.Sum(t[:0])
	return t
}

// Validate checks the fields' shapes and the signature.
func (h *Hello) Validate() error {
	if h.V != Version {
		return fmt.Errorf("%s: version %d, want %d: %w", h.Type, h.V, Version, ErrMalformed)
	}
	switch h.Type {
	case TypeHello:
		if h.Role != RolePublisher || h.Fn != "" {
			return fmt.Errorf("hello: role %.40q fn %.40q, want role %q and no fn: %w", h.Role, h.Fn, RolePublisher, ErrMalformed)
		}
		if err := h.Policy.validate(); err != nil {
			return err
		}
	case TypeSub:
		if h.Role != "" || h.Policy != nil {
			return fmt.Errorf("sub: carries a role or a policy: %w", ErrMalformed)
		}
		if err := ValidFnID(h.Fn); err != nil {
			return fmt.Errorf("sub: %w", err)
		}
	default:
		return fmt.Errorf("setup message type %.40q, want %q or %q: %w", h.Type, TypeHello, TypeSub, ErrMalformed)
	}
	if err := sizes(h.Type, field{"ed_pk", h.EdPK, KeySize}, field{"x_eph_pk", h.XEphPK, KeySize},
		field{"nonce", h.Nonce, NonceSize}, field{"sig", h.Sig, SigSize}); err != nil {
		return err
	}
	if !ed25519.Verify(h.EdPK, h.SigningBytes(), h.Sig) {
		return fmt.Errorf("%s from %s: bad signature: %w", h.Type, h.DeviceID(), ErrMalformed)
	}
	return nil
}

// DecodeHello decodes and validates a device's setup request.
func DecodeHello(b []byte) (*Hello, error) {
	var h Hello
	if err := decodeStrict(b, &h); err != nil {
		return nil, err
	}
	if err := h.Validate(); err != nil {
		return nil, err
	}
	return &h, nil
}

// Ack is the garbler's answer to a Hello: "hello-ack" for a publisher, "sub-ack" (with the
// sealed grant, pps.SealGrant) for a subscriber, or "regrant" (a new key epoch after a
// revocation, sealed under the same session). The garbler signs it with its identity key over
// the hello's transcript, so a device with the garbler's key pinned (D20) detects a broker
// that substitutes its own key exchange.
type Ack struct {
	V      int    `json:"v"`
	Type   string `json:"type"`
	Fn     string `json:"fn,omitempty"`
	XEphPK []byte `json:"x_eph_pk,omitempty"`
	Nonce  []byte `json:"nonce,omitempty"`
	Grant  []byte `json:"grant,omitempty"`
	Sig    []byte `json:"sig"`
}

// SigningBytes is what the garbler signs: the hello's transcript and every field of the ack.
func (a *Ack) SigningBytes(transcript [32]byte) []byte {
	var w signer
	w.str("pps/v1/" + a.Type)
	w.bytes(transcript[:])
	w.u64(uint64(a.V))
	w.str(a.Fn)
	w.bytes(a.XEphPK)
	w.bytes(a.Nonce)
	w.bytes(a.Grant)
	return w.b
}

// GrantAD is the associated data a function key grant is sealed with (spec §8.9):
// fn || ed_pk || transcript.
func GrantAD(fn string, edPK []byte, transcript [32]byte) []byte {
	return slices.Concat([]byte(fn), edPK, transcript[:])
}

// Validate checks the ack's shape against the hello it answers and its signature under the
// garbler's pinned key.
func (a *Ack) Validate(h *Hello, garbler ed25519.PublicKey) error {
	if a.V != Version {
		return fmt.Errorf("%s: version %d, want %d: %w", a.Type, a.V, Version, ErrMalformed)
	}
	switch {
	case h.Type == TypeHello && a.Type == TypeHelloAck:
		if a.Fn != "" || a.Grant != nil {
			return fmt.Errorf("hello-ack carries a function or a grant: %w", ErrMalformed)
		}
		if err := sizes(a.Type, field{"x_eph_pk", a.XEphPK, KeySize}, field{"nonce", a.Nonce, NonceSize}); err != nil {
			return err
		}
	case h.Type == TypeSub && (a.Type == TypeSubAck || a.Type == TypeRegrant):
		if a.Fn != h.Fn {
			return fmt.Errorf("%s for function %.40q, asked for %s: %w", a.Type, a.Fn, h.Fn, ErrMalformed)
		}
		if a.Type == TypeSubAck {
			if err := sizes(a.Type, field{"x_eph_pk", a.XEphPK, KeySize}, field{"nonce", a.Nonce, NonceSize}); err != nil {
				return err
			}
		}
		if len(a.Grant) == 0 || len(a.Grant) > 256 {
			return fmt.Errorf("%s: grant of %d bytes: %w", a.Type, len(a.Grant), ErrMalformed)
		}
	default:
		return fmt.Errorf("%.40q does not answer a %s: %w", a.Type, h.Type, ErrMalformed)
	}
	if err := sizes(a.Type, field{"sig", a.Sig, SigSize}); err != nil {
		return err
	}
	if !ed25519.Verify(garbler, a.SigningBytes(h.Transcript()), a.Sig) {
		return fmt.Errorf("%s: not signed by the pinned garbler key: %w", a.Type, ErrMalformed)
	}
	return nil
}

// Notice is a broker's (or a refusing garbler's) message to a device: "registered" with the
// publishing topic, or "refused" with a reason.
type Notice struct {
	V      int    `json:"v"`
	Type   string `json:"type"`
	PubID  string `json:"pubid,omitempty"`
	Topic  string `json:"topic,omitempty"`
	Fn     string `json:"fn,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Down is any message on a device's down topic, decoded by its type: exactly one of Ack and
// Notice is set.
type Down struct {
	Ack    *Ack
	Notice *Notice
}

// DecodeDown decodes a message from the device's down topic. It checks shapes only; the
// device validates an Ack against its Hello with Ack.Validate.
func DecodeDown(b []byte) (*Down, error) {
	var peek struct {
		Type string `json:"type"`
	}
	if len(b) > MaxDeviceMessage {
		return nil, fmt.Errorf("down message of %d bytes, at most %d: %w", len(b), MaxDeviceMessage, ErrMalformed)
	}
	if err := json.Unmarshal(b, &peek); err != nil {
		return nil, fmt.Errorf("down message: %v: %w", err, ErrMalformed)
	}
	switch peek.Type {
	case TypeHelloAck, TypeSubAck, TypeRegrant:
		var a Ack
		if err := decodeStrict(b, &a); err != nil {
			return nil, err
		}
		return &Down{Ack: &a}, nil
	case TypeRegistered, TypeRefused:
		var n Notice
		if err := decodeStrict(b, &n); err != nil {
			return nil, err
		}
		if n.V != Version {
			return nil, fmt.Errorf("%s: version %d, want %d: %w", n.Type, n.V, Version, ErrMalformed)
		}
		if n.Type == TypeRegistered {
			if err := ValidDeviceID(n.PubID); err != nil {
				return nil, err
			}
			if n.Topic != Topic(PubSubject(n.PubID)) {
				return nil, fmt.Errorf("registered: topic %.80q is not the publisher's: %w", n.Topic, ErrMalformed)
			}
		}
		if len(n.Reason) > MaxReason {
			return nil, fmt.Errorf("refused: reason of %d bytes: %w", len(n.Reason), ErrMalformed)
		}
		return &Down{Notice: &n}, nil
	}
	return nil, fmt.Errorf("down message type %.40q: %w", peek.Type, ErrMalformed)
}

// Publish is a publisher's message on pps/pub/<pubid> (spec §8.3): its round and, in faithful
// mode, one label per value bit (pps.PublishLabels: 32 × 16 bytes per value); in the hardened
// mode H1 (D21), y = x ⊕ m, 4 bytes per value. A publisher whose functions use both modes
// sends both.
type Publish struct {
	V      int    `json:"v"`
	Round  uint64 `json:"round"`
	Labels []byte `json:"labels,omitempty"`
	Masked []byte `json:"masked,omitempty"`
}

// LabelBytesPerValue is the faithful-mode payload of one value: 32 labels of 16 bytes.
const LabelBytesPerValue = 32 * 16

// Values is the number of values the message carries.
func (p *Publish) Values() int {
	if len(p.Labels) > 0 {
		return len(p.Labels) / LabelBytesPerValue
	}
	return len(p.Masked) / 4
}

// DecodePublish decodes and checks a publish message.
func DecodePublish(b []byte) (*Publish, error) {
	var p Publish
	if err := decodeStrict(b, &p); err != nil {
		return nil, err
	}
	if p.V != Version {
		return nil, fmt.Errorf("publish: version %d, want %d: %w", p.V, Version, ErrMalformed)
	}
	if len(p.Labels) == 0 && len(p.Masked) == 0 {
		return nil, fmt.Errorf("publish: neither labels nor masked values: %w", ErrMalformed)
	}
	if len(p.Labels)%LabelBytesPerValue != 0 || len(p.Masked)%4 != 0 {
		return nil, fmt.Errorf("publish: %d label bytes, %d masked bytes: not whole values: %w", len(p.Labels), len(p.Masked), ErrMalformed)
	}
	if len(p.Labels) > 0 && len(p.Masked) > 0 && len(p.Labels)/LabelBytesPerValue != len(p.Masked)/4 {
		return nil, fmt.Errorf("publish: labels and masked values disagree on the value count: %w", ErrMalformed)
	}
	if n := p.Values(); n > MaxPublishValues {
		return nil, fmt.Errorf("publish: %d values, at most %d: %w", n, MaxPublishValues, ErrMalformed)
	}
	return &p, nil
}

// Output statuses (spec §8.6).
const (
	StatusOK           = "ok"
	StatusInsufficient = "insufficient" // fewer valid inputs than minInputs: the ideal F's ⊥
)

// Output is one execution's result on pps/fn/<fnid>/out (spec §8.6): o ⊕ r, which only a
// subscriber holding the function key of the epoch can unmask at round ρ. It never names a
// nullified publisher; Valid is the number of valid slots.
type Output struct {
	V      int    `json:"v"`
	Fn     string `json:"fn"`
	Exec   string `json:"exec"`
	Round  uint64 `json:"round"`
	Epoch  uint64 `json:"epoch"`
	Masked []byte `json:"masked,omitempty"`
	Bits   int    `json:"bits,omitempty"`
	Valid  int    `json:"valid"`
	Status string `json:"status"`
}

// DecodeOutput decodes and checks a function output.
func DecodeOutput(b []byte) (*Output, error) {
	var o Output
	if err := decodeStrict(b, &o); err != nil {
		return nil, err
	}
	if o.V != Version {
		return nil, fmt.Errorf("output: version %d, want %d: %w", o.V, Version, ErrMalformed)
	}
	if err := ValidFnID(o.Fn); err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	if err := validHex(o.Exec, 32, "execution id"); err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	if o.Valid < 0 {
		return nil, fmt.Errorf("output: valid %d: %w", o.Valid, ErrMalformed)
	}
	switch o.Status {
	case StatusOK:
		if o.Bits <= 0 || len(o.Masked) != (o.Bits+7)/8 {
			return nil, fmt.Errorf("output: %d masked bytes for %d bits: %w", len(o.Masked), o.Bits, ErrMalformed)
		}
	case StatusInsufficient:
		if len(o.Masked) != 0 || o.Bits != 0 {
			return nil, fmt.Errorf("output: insufficient with a masked value: %w", ErrMalformed)
		}
	default:
		return nil, fmt.Errorf("output: status %.40q: %w", o.Status, ErrMalformed)
	}
	return &o, nil
}

// ExecIDString formats a 16-byte execution id for an Output.
func ExecIDString(exec [16]byte) string { return hex.EncodeToString(exec[:]) }

// decodeStrict is json.Unmarshal that refuses unknown fields, trailing data and messages
// above MaxDeviceMessage.
func decodeStrict(b []byte, v any) error {
	if len(b) > MaxDeviceMessage {
		return fmt.Errorf("device message of %d bytes, at most %d: %w", len(b), MaxDeviceMessage, ErrMalformed)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("device message: %v: %w", err, ErrMalformed)
	}
	if _, err := d.Token(); err != io.EOF {
		return fmt.Errorf("device message: trailing data: %w", ErrMalformed)
	}
	return nil
}

type field struct {
	name string
	b    []byte
	n    int
}

func sizes(what string, fs ...field) error {
	for _, f := range fs {
		if len(f.b) != f.n {
			return fmt.Errorf("%s: %s of %d bytes, want %d: %w", what, f.name, len(f.b), f.n, ErrMalformed)
		}
	}
	return nil
}

// signer builds signed bytes: fixed-width integers and length-prefixed strings, so no two
// different messages have the same encoding.
type signer struct{ b []byte }

func (w *signer) u64(v uint64)   { w.b = binary.BigEndian.AppendUint64(w.b, v) }
func (w *signer) bytes(p []byte) { w.u64(uint64(len(p))); w.b = append(w.b, p...) }
func (w *signer) str(s string)   { w.bytes([]byte(s)) }
