package mohito

import (
	"encoding/binary"
	"fmt"
)

// Fixed sizes of protocol values.
const (
	// EphemeralIDSize is the width of z = HMAC-SHA256(k_prf, j ‖ t), kept at the
	// full 32 bytes everywhere (spec §3.1).
	EphemeralIDSize = 32
	// KeySize is the size of every symmetric key (device keys, response keys).
	KeySize = 32
	// SeedSize is the size of a PRG seed (x₁ compression, spec O8; check seed).
	SeedSize = 32
	// DeviceAEOverhead is the user–device AEAD expansion: 24-byte
	// XChaCha20-Poly1305 nonce + 16-byte tag (same as the paper's secretbox).
	DeviceAEOverhead = 24 + 16
	// CommandHeaderSize is cmd_id(16) ‖ ts(8) ‖ k_I^resp(32) ‖ k_V*^resp(32) ‖
	// len(2), the fixed prefix of the command plaintext (spec O5 with G1 keys).
	CommandHeaderSize = 16 + 8 + 2*KeySize + 2
	// ResponseHeaderSize is cmd_id(16) ‖ len(2) in the response plaintext.
	ResponseHeaderSize = 16 + 2
	// MaxVendors bounds |𝒱|; it keeps every envelope size well inside an int.
	MaxVendors = 1 << 16
	// MaxQ bounds q (spec §5: configurable ≤ 4).
	MaxQ = 4
	// NoVendor marks a shuffled position whose inner layer did not open (a
	// malformed message from a malicious user).
	NoVendor = ^uint32(0)
)

// Params are the public per-deployment parameters that fix every message size.
type Params struct {
	Vendors      int   // |𝒱|
	Q            int   // commands per user per round and slots per device (spec O1)
	CommandSize  int   // L_c, padded command plaintext
	ResponseSize int   // L_r, padded response plaintext
	Suite        Suite // HPKE suite of both public-key layers
	// ResponseMode selects the response path's server layers. The zero value
	// is ResponseHardened (G1). ResponsePaperLiteral leaks the real
	// per-vendor counts to the integrator and exists for benchmarks only.
	ResponseMode ResponseMode
}

// ResponseMode selects how the response path's server layers are built.
type ResponseMode uint8

const (
	// ResponseHardened is the default and the only production mode (spec
	// §8.1 G1 fix): the server layers are XSalsa20 keystreams under one-time
	// keys chosen by the user; removing them cannot fail, so the integrator
	// processes fake and real positions identically.
	ResponseHardened ResponseMode = 0

	// ResponsePaperLiteral reproduces the paper's response path (Fig. 3,
	// spec §3.7) for benchmarks ONLY: the device sends
	// Enc_pkI(Enc_pkV*(⟨r⟩_D)) with authenticated HPKE, and the integrator
	// opens its layer at every shuffled position.
	//
	// WARNING — NEVER USE IN PRODUCTION. Opening fails exactly at the fake
	// positions (their z is in no response table), so the integrator learns
	// which positions are fake and hence the real per-vendor counts A_v in
	// every round (spec §8.1 G1): the very information the cover traffic
	// exists to hide, which re-enables the intersection attacks of §5.1. The
	// mode is kept only so benchmarks can compare the hardened path with the
	// paper's. RoundInfo.MarshalBinary refuses it, so no deployment can
	// publish such a round, and asynchronous responses reject it.
	ResponsePaperLiteral ResponseMode = 1
)

// DefaultParams are the paper's evaluation settings (L_c = 1 KB, q = 1).
func DefaultParams(vendors int) Params {
	return Params{Vendors: vendors, Q: 1, CommandSize: 1024, ResponseSize: 1024, Suite: SuiteX25519}
}

// Validate checks the parameters.
func (p Params) Validate() error {
	switch {
	case p.Vendors < 1 || p.Vendors > MaxVendors:
		return fmt.Errorf("%w: vendors = %d", ErrParams, p.Vendors)
	case p.Q < 1 || p.Q > MaxQ:
		return fmt.Errorf("%w: q = %d", ErrParams, p.Q)
	case p.CommandSize < CommandHeaderSize || p.CommandSize+DeviceAEOverhead > 4096:
		// 4096 is the OKVS value-size limit.
		return fmt.Errorf("%w: command size %d", ErrParams, p.CommandSize)
	case p.ResponseSize < ResponseHeaderSize || p.ResponseSize+DeviceAEOverhead > 4096:
		return fmt.Errorf("%w: response size %d", ErrParams, p.ResponseSize)
	case !p.Suite.Valid():
		return fmt.Errorf("%w: suite %d", ErrParams, p.Suite)
	case p.ResponseMode != ResponseHardened && p.ResponseMode != ResponsePaperLiteral:
		return fmt.Errorf("%w: response mode %d", ErrParams, p.ResponseMode)
	case p.ResponseMode == ResponsePaperLiteral && p.ResponseSize+DeviceAEOverhead+2*p.Suite.Overhead() > 4096:
		return fmt.Errorf("%w: response size %d with public-key layers", ErrParams, p.ResponseSize)
	}
	return nil
}

// MaxCommandPayload is the largest command payload that fits L_c.
func (p Params) MaxCommandPayload() int { return p.CommandSize - CommandHeaderSize }

// MaxResponsePayload is the largest response payload that fits L_r.
func (p Params) MaxResponsePayload() int { return p.ResponseSize - ResponseHeaderSize }

// DeviceCiphertextSize is |⟨cmd⟩_D|, the OKVS value size of command tables.
func (p Params) DeviceCiphertextSize() int { return p.CommandSize + DeviceAEOverhead }

// ResponseValueSize is |⟨r⟩_D|; the G1 server layers are XOR keystreams and do
// not expand it, so it is also the response OKVS value size.
func (p Params) ResponseValueSize() int { return p.ResponseSize + DeviceAEOverhead }

// ResponseTableValueSize is the value size of the response OKVS (M7 records,
// M8): ResponseValueSize in the hardened mode; ⟨⟨⟨r⟩_D⟩_V*⟩_I, two HPKE
// overheads more, in ResponsePaperLiteral.
func (p Params) ResponseTableValueSize() int {
	if p.ResponseMode == ResponsePaperLiteral {
		return p.ResponseValueSize() + 2*p.Suite.Overhead()
	}
	return p.ResponseValueSize()
}

// ResponseLayerSize is |r′|, one record of M9: ResponseValueSize in the
// hardened mode; ⟨⟨r⟩_D⟩_V* in ResponsePaperLiteral.
func (p Params) ResponseLayerSize() int {
	if p.ResponseMode == ResponsePaperLiteral {
		return p.ResponseValueSize() + p.Suite.Overhead()
	}
	return p.ResponseValueSize()
}

// innerPlainSize: m = z ‖ v ‖ ⟨cmd⟩_D ‖ k_I^resp.
func (p Params) innerPlainSize() int {
	return EphemeralIDSize + 4 + p.DeviceCiphertextSize() + KeySize
}

// InnerSize is |⟨m⟩_I|, one entry of the shuffler's output list (M4).
func (p Params) InnerSize() int { return p.innerPlainSize() + p.Suite.Overhead() }

// ShufflerShareSize is x₂ ‖ a₂ ‖ c₂.
func (p Params) ShufflerShareSize() int { return ElemSize * (p.Vendors + 2) }

// outerPlainSize: ⟨m⟩_I ‖ x₂ ‖ a₂ ‖ c₂ ‖ k_V*^resp.
func (p Params) outerPlainSize() int {
	return p.InnerSize() + p.ShufflerShareSize() + KeySize
}

// OuterSize is |⟨⟨m⟩_I, x₂, …⟩_V*|.
func (p Params) OuterSize() int { return p.outerPlainSize() + p.Suite.Overhead() }

// Envelope header: version ‖ kind ‖ round t.
const (
	wireVersion = 1
	headerSize  = 2 + 8
)

// Kind tags every envelope.
type Kind uint8

// Envelope kinds, one per message of spec §3.6–3.7 (M0–M11) plus the G2 check.
const (
	KindRoundInfo      Kind = 0x01 // M0
	KindSubmission     Kind = 0x02 // M1  U → I
	KindForward        Kind = 0x03 // M2  I → V*
	KindClose          Kind = 0x04 // M3a I → V* (k)
	KindCheckChallenge Kind = 0x05 // G2  V* → I
	KindCheckReply     Kind = 0x06 // G2  I → V*
	KindCheckVerdict   Kind = 0x07 // G2  V* → I
	KindFinish         Kind = 0x08 // M3b I → V* (Y)
	KindShuffled       Kind = 0x09 // M4  V* → I, a batch of ⟨m⟩_I in π order
	KindShuffleSummary Kind = 0x0a // M4 end marker (N, S)
	KindDelivery       Kind = 0x0b // M6  V → D
	KindDeviceResponse Kind = 0x0c // M7  D → V
	KindResponseLayer  Kind = 0x0d // M9  I → V*, a batch of r′
	KindResponseOut    Kind = 0x0e // M10 V* → I, a batch of r
	KindUserResponse   Kind = 0x0f // M11 I → U
	KindCommandTable   Kind = 0x10 // M5  I → V
	KindResponseTable  Kind = 0x11 // M8  V → I

	// Asynchronous responses (spec App. A, O15), sent every round for each of
	// the W pending rounds whatever the traffic.
	KindLateDeviceResponse Kind = 0x12 // M7L  D → V, W·q late slots
	KindLateResponseTable  Kind = 0x13 // M8L  V → I, one table over W·q·|𝒟_a| pairs
	KindLateResponseLayer  Kind = 0x14 // M9L  I → V* of the pending round
	KindLateResponseOut    Kind = 0x15 // M10L V* of the pending round → I
	KindLateUserResponse   Kind = 0x16 // M11L I → every user of the pending round
)

func putHeader(b []byte, k Kind, t uint64) {
	b[0] = wireVersion
	b[1] = byte(k)
	binary.BigEndian.PutUint64(b[2:], t)
}

// EnvelopeRound is the round an envelope's header names, for routing before the envelope is
// parsed: it checks only that a header is there. Every parser still checks version, kind,
// round and size before a byte of the body is used.
func EnvelopeRound(b []byte) (uint64, bool) {
	if len(b) < headerSize {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[2:]), true
}

// BatchStart is the first position of a batch envelope (M4, M9, M10), for routing a batch to
// the owner of its position range before it is parsed.
func BatchStart(b []byte) (int, bool) {
	if len(b) < batchHeader {
		return 0, false
	}
	return int(binary.BigEndian.Uint32(b[headerSize:])), true
}

// parseHeader checks version, kind and exact length; it returns the round.
func parseHeader(b []byte, k Kind, size int) (uint64, error) {
	if len(b) < headerSize {
		return 0, fmt.Errorf("%w: %d bytes", ErrSize, len(b))
	}
	if b[0] != wireVersion || Kind(b[1]) != k {
		return 0, fmt.Errorf("%w: got %d/%#x want %d/%#x", ErrKind, b[0], b[1], wireVersion, byte(k))
	}
	if len(b) != size {
		return 0, fmt.Errorf("%w: kind %#x has %d bytes, want %d", ErrSize, byte(k), len(b), size)
	}
	return binary.BigEndian.Uint64(b[2:]), nil
}

// expectRound wraps ErrRound.
func expectRound(got, want uint64) error {
	if got != want {
		return fmt.Errorf("%w: envelope for round %d, current %d", ErrRound, got, want)
	}
	return nil
}
