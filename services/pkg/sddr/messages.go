package sddr

import (
	"errors"
	"fmt"
)

// Network messages outside the beacon. All have a fixed length and a leading type byte; the
// decoders return ErrMessage for anything else.
var ErrMessage = errors.New("sddr: malformed message")

const (
	msgConfirm = 0x01
	msgVerify  = 0x02

	// ConfirmSize is type ‖ encounter id ‖ role ‖ tag.
	ConfirmSize = 1 + EncounterIDSize + 1 + 32
	// VerifySize is type ‖ encounter id ‖ nonce ‖ tag.
	VerifySize = 1 + EncounterIDSize + NonceSize + 32
)

// Confirm is the explicit key-confirmation message (§3.9 [REC]): it proves the sender derived
// the encounter key behind ID. Around an epoch boundary the two sides may hold different keys
// (§3.3); a Confirm then names an encounter the receiver does not have, and both retry with a
// record from a later discovery.
type Confirm struct {
	ID   EncounterID
	Role byte // 0: sender holds the smaller public key; 1: the larger
	Tag  [32]byte
}

// Marshal encodes the message.
func (c *Confirm) Marshal() []byte {
	b := make([]byte, 0, ConfirmSize)
	b = append(b, msgConfirm)
	b = append(b, c.ID[:]...)
	b = append(b, c.Role)
	return append(b, c.Tag[:]...)
}

// ParseConfirm decodes a Confirm.
func ParseConfirm(b []byte) (Confirm, error) {
	var c Confirm
	if len(b) != ConfirmSize || b[0] != msgConfirm {
		return c, fmt.Errorf("%w: confirm of %d bytes", ErrMessage, len(b))
	}
	if b[1+EncounterIDSize] > 1 {
		return c, fmt.Errorf("%w: confirm role %d", ErrMessage, b[1+EncounterIDSize])
	}
	copy(c.ID[:], b[1:])
	c.Role = b[1+EncounterIDSize]
	copy(c.Tag[:], b[2+EncounterIDSize:])
	return c, nil
}

// Verify is the optional mutual-authentication message of Alg. 7 with the §3.8 hardening:
// it proves knowledge of a shared link value, bound to this encounter's DH secret and
// direction, and so resolves a Bloom false positive.
type Verify struct {
	ID    EncounterID
	Nonce [NonceSize]byte
	Tag   [32]byte
}

// Marshal encodes the message.
func (v *Verify) Marshal() []byte {
	b := make([]byte, 0, VerifySize)
	b = append(b, msgVerify)
	b = append(b, v.ID[:]...)
	b = append(b, v.Nonce[:]...)
	return append(b, v.Tag[:]...)
}

// ParseVerify decodes a Verify.
func ParseVerify(b []byte) (Verify, error) {
	var v Verify
	if len(b) != VerifySize || b[0] != msgVerify {
		return v, fmt.Errorf("%w: verify of %d bytes", ErrMessage, len(b))
	}
	copy(v.ID[:], b[1:])
	copy(v.Nonce[:], b[1+EncounterIDSize:])
	copy(v.Tag[:], b[1+EncounterIDSize+NonceSize:])
	return v, nil
}

// Transport envelope for the simulated medium and UDP loopback (§3.11): it emulates an inquiry
// and its EIR responses and is not part of SDDR. A response carries no stable node identity,
// only the per-epoch address.
const (
	inquiryMagic  = "SDDRINQ1"
	responseMagic = "SDDRRSP1"
	InquirySize   = 8 + 8
	ResponseSize  = 8 + 8 + 6 + 1 + FrameSize // 263
)

// Address is the per-epoch random radio address (the simulated MAC).
type Address [6]byte

// Inquiry asks every device in range for its installed frame.
type Inquiry struct{ ID uint64 }

// Response answers an inquiry with the frame installed at that moment.
type Response struct {
	InquiryID uint64
	Addr      Address
	RSSI      int8
	Frame     Frame
}

func putU64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (56 - 8*i))
	}
}

func u64(b []byte) uint64 {
	var v uint64
	for i := range 8 {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// Marshal encodes the inquiry datagram.
func (q Inquiry) Marshal() []byte {
	b := make([]byte, InquirySize)
	copy(b, inquiryMagic)
	putU64(b[8:], q.ID)
	return b
}

// ParseInquiry decodes an inquiry datagram.
func ParseInquiry(b []byte) (Inquiry, error) {
	if len(b) != InquirySize || string(b[:8]) != inquiryMagic {
		return Inquiry{}, fmt.Errorf("%w: inquiry of %d bytes", ErrMessage, len(b))
	}
	return Inquiry{ID: u64(b[8:])}, nil
}

// Marshal encodes the response datagram.
func (r *Response) Marshal() []byte {
	b := make([]byte, ResponseSize)
	copy(b, responseMagic)
	putU64(b[8:], r.InquiryID)
	copy(b[16:], r.Addr[:])
	b[22] = byte(r.RSSI)
	copy(b[23:], r.Frame[:])
	return b
}

// ParseResponse decodes a response datagram; the frame inside is validated separately by
// ParseBeacon (or Device.OnBeacon).
func ParseResponse(b []byte) (Response, error) {
	var r Response
	if len(b) != ResponseSize || string(b[:8]) != responseMagic {
		return r, fmt.Errorf("%w: response of %d bytes", ErrMessage, len(b))
	}
	r.InquiryID = u64(b[8:])
	copy(r.Addr[:], b[16:])
	r.RSSI = int8(b[22])
	copy(r.Frame[:], b[23:])
	return r, nil
}
