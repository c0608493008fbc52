package sddr

import (
	"crypto/ecdh"
	"errors"
	"fmt"

	"github.com/obscura-iot/obscura/services/pkg/sddr/bloom"
)

// Reasons a frame is dropped (Alg. 5 step 1–2); callers count rejections by these.
var (
	ErrFrameLength = errors.New("sddr: frame is not 240 bytes")
	ErrHeader      = errors.New("sddr: frame header is not EF FF")
	ErrVersion     = errors.New("sddr: unsupported beacon version")
	ErrCount       = errors.New("sddr: beacon count out of range")
	ErrPublicKey   = errors.New("sddr: invalid public key")
)

// Beacon is one decoded frame: (pk, count, BF) of GenBeacon with the §4.5 counter extension.
// Its encoding is a deterministic function of these fields only (INV-6).
type Beacon struct {
	Flags     uint8 // low nibble of byte 2; FlagInfrastructure
	Count     uint8 // beacon number within the sender's epoch, 0..254
	PublicKey [PublicKeySize]byte
	Filter    [FilterBytes]byte
}

// Frame is the fixed-size wire form.
type Frame [FrameSize]byte

// Marshal writes the SDDR-v1 frame: EF FF, version<<4|flags, count, pk, filter (§3.11).
func (b *Beacon) Marshal() Frame {
	var f Frame
	f[0], f[1] = eirLen, eirType
	f[2] = Version<<4 | b.Flags&0x0F
	f[3] = b.Count
	copy(f[headerSize:], b.PublicKey[:])
	copy(f[headerSize+PublicKeySize:], b.Filter[:])
	return f
}

// filter is a Bloom view over the beacon's filter bytes.
func (b *Beacon) filter() bloom.Filter { return bloom.View(BloomParams, b.Filter[:]) }

// ParseBeacon decodes and validates one frame. Any other length, header, version, a count of
// 255 or an X25519 key that cannot be used is an error, never a panic (T11).
func ParseBeacon(frame []byte) (Beacon, error) {
	var b Beacon
	if len(frame) != FrameSize {
		return b, fmt.Errorf("%w: got %d", ErrFrameLength, len(frame))
	}
	if frame[0] != eirLen || frame[1] != eirType {
		return b, ErrHeader
	}
	if frame[2]>>4 != Version || frame[2]&0x0E != 0 {
		return b, fmt.Errorf("%w: byte 0x%02x", ErrVersion, frame[2])
	}
	if frame[3] == 0xFF {
		return b, ErrCount
	}
	b.Flags, b.Count = frame[2]&0x0F, frame[3]
	copy(b.PublicKey[:], frame[headerSize:])
	if err := checkPublicKey(&b.PublicKey); err != nil {
		return b, err
	}
	copy(b.Filter[:], frame[headerSize+PublicKeySize:])
	return b, nil
}

// lowOrder lists the X25519 u-coordinates of small order (and their non-canonical aliases
// below 2^255): ECDH with any of them yields the all-zero secret, which crypto/ecdh refuses.
// Rejecting them at parse time keeps such frames out of the peer table (T11).
var lowOrder = [][PublicKeySize]byte{
	{0},
	{1},
	{0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4, 0x6a, 0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16, 0x5f, 0x49, 0xb8, 0x00},
	{0x5f, 0x9c, 0x95, 0xbc, 0xa3, 0x50, 0x8c, 0x24, 0xb1, 0xd0, 0xb1, 0x55, 0x9c, 0x83, 0xef, 0x5b, 0x04, 0x44, 0x5c, 0xc4, 0x58, 0x1c, 0x8e, 0x86, 0xd8, 0x22, 0x4e, 0xdd, 0xd0, 0x9f, 0x11, 0x57},
	{0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
	{0xed, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
	{0xee, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
}

func checkPublicKey(pk *[PublicKeySize]byte) error {
	masked := *pk
	masked[31] &= 0x7f // RFC 7748: the top bit is ignored
	for i := range lowOrder {
		if masked == lowOrder[i] {
			return fmt.Errorf("%w: small-order point", ErrPublicKey)
		}
	}
	if _, err := ecdh.X25519().NewPublicKey(pk[:]); err != nil {
		return fmt.Errorf("%w: %v", ErrPublicKey, err)
	}
	return nil
}

// BLE 5 extended-advertising profile (§3.11): the 240-byte frame is itself a well-formed AD
// structure (length 0xEF, type 0xFF manufacturer-specific), so it travels unchanged as the
// AdvData of one AUX_ADV_IND PDU. Like [R]'s EIR layout it carries no Bluetooth company
// identifier: bytes 2–3 (version/flags, count) sit where one would be.
const (
	// MaxExtAdvDataPerPDU is the AdvData room of one AUX_ADV_IND (255-byte payload minus a
	// 10-byte extended header with AdvA and ADI): the frame fits without chaining.
	MaxExtAdvDataPerPDU = 245
)

var ErrNoBeacon = errors.New("sddr: advertising data holds no SDDR beacon")

// AdvertisingData is the BLE 5 extended-advertising payload for a frame: the frame alone.
func AdvertisingData(f *Frame) []byte { return f[:] }

// ParseAdvertisingData walks the AD structures of a BLE advertising payload (length, type,
// data; a zero length ends the significant part) and returns the first SDDR beacon found,
// so the frame may share the PDU with other AD structures such as Flags.
func ParseAdvertisingData(ad []byte) (Beacon, error) {
	for i := 0; i < len(ad); {
		n := int(ad[i])
		if n == 0 {
			break
		}
		if i+1+n > len(ad) {
			return Beacon{}, fmt.Errorf("%w: AD structure at %d overruns the payload", ErrFrameLength, i)
		}
		if n == eirLen && ad[i+1] == eirType {
			return ParseBeacon(ad[i : i+1+n])
		}
		i += 1 + n
	}
	return Beacon{}, ErrNoBeacon
}
