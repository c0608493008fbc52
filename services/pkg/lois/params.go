package lois

import "errors"

// Sizes fixed by the paper (spec §2.2, §5).
const (
	IDSize          = 8  // keystream identifier, sent in clear in the LOIS TCP option
	KeystreamSize   = 16 // one-time keystream XORed into the header
	SegmentSize     = IDSize + KeystreamSize
	SeedSize        = 32
	StreamKeySize   = 32
	NonceSize       = 8  // r_d and r_c
	CloudSecretSize = 32 // k_c
)

// Wire constants of the LOIS option (spec §3.8, D-9) and the header rules (D-10, D-11, D-25).
const (
	OptionKind  = 253 // RFC 4727 shared experimental option
	OptionLen   = 12  // kind, len, ExID (2), id (8): three words, no padding
	DefaultExID = 0x4C53
	// Headroom is the free space a caller leaves before a packet that a hiding transform will
	// grow by OptionLen: the 40-byte IPv4+TCP fixed header moves left instead of the payload
	// moving right, so the cost does not depend on the packet size.
	Headroom           = OptionLen
	DefaultUnifiedPort = 443
	NormalTTL          = 64
	// MaxOrigOptions is the most option bytes a packet may carry and still take the LOIS
	// option inside TCP's 40-byte option space.
	MaxOrigOptions = 40 - OptionLen
	// PadMarker is the decrypted flags pattern of a cover packet (spec §4, D-26): SYN, FIN
	// and RST together, which no valid segment carries. It sits inside the encrypted flags, so
	// only SI (upload) and DI (download) see it.
	PadMarker = 0x07
)

// Flag masks for the encrypted flags byte (spec §3.8).
const (
	FlagMaskPaper    = 0x3F // URG ACK PSH RST SYN FIN
	FlagMaskHardened = 0xFF // also CWR and ECE
)

// Dir is the direction of a keystream stream.
type Dir uint8

const (
	Up   Dir = 0 // device → cloud
	Down Dir = 1 // server → device
)

func (d Dir) String() string {
	if d == Up {
		return "up"
	}
	return "down"
}

// Errors a role branches on (and counts by reason, spec §10 lois_packets_total).
var (
	ErrMalformed   = errors.New("lois: malformed packet")
	ErrNotLOIS     = errors.New("lois: packet is not addressed to a LOIS cloud")
	ErrNoOption    = errors.New("lois: no LOIS option")
	ErrUnknownID   = errors.New("lois: unknown, consumed or expired keystream id")
	ErrExhausted   = errors.New("lois: keystream pool exhausted")
	ErrNoRoom      = errors.New("lois: no room for the LOIS option")
	ErrNoHeadroom  = errors.New("lois: buffer has no headroom for the LOIS option")
	ErrPad         = errors.New("lois: cover packet")
	ErrUnknownSID  = errors.New("lois: unknown service id")
	ErrTableFull   = errors.New("lois: table full")
	ErrDuplicateID = errors.New("lois: duplicate keystream id")
	ErrDuplicateKS = errors.New("lois: duplicate keystream")
)
