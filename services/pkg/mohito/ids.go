package mohito

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"io"
)

// DeviceSecret is the 256-bit secret a device generates at setup (spec §3.4,
// G4: never a MAC address). The device shares it with its user over the local
// setup channel only. Two keys are derived from it (spec §3.0 notation clash):
// the PRF key k_D^prf, which is also given to the vendor, and the AEAD key
// k_D^ae, which only the user and the device know. The vendor receives k_prf,
// never the secret, so it cannot derive k_ae.
type DeviceSecret [32]byte

// NewDeviceSecret samples a device secret.
func NewDeviceSecret(rand io.Reader) (DeviceSecret, error) {
	var s DeviceSecret
	_, err := io.ReadFull(rand, s[:])
	return s, err
}

// DeviceKeys are the keys derived from a device secret.
type DeviceKeys struct {
	PRF [KeySize]byte // k_D^prf: ephemeral ids; known to user, device and vendor
	AE  [KeySize]byte // k_D^ae: command/response AEAD; known to user and device only
}

// Keys derives k_D^prf and k_D^ae with HKDF-SHA256 under separate labels.
func (s *DeviceSecret) Keys() DeviceKeys {
	var k DeviceKeys
	prf, err := hkdf.Key(sha256.New, s[:], nil, "mohito/v1/prf", KeySize)
	if err != nil {
		panic(err) // unreachable: fixed lengths
	}
	ae, err := hkdf.Key(sha256.New, s[:], nil, "mohito/v1/ae", KeySize)
	if err != nil {
		panic(err)
	}
	copy(k.PRF[:], prf)
	copy(k.AE[:], ae)
	return k
}

// EphemeralID is z = HMAC-SHA256(k_D^prf, j ‖ t), the per-round, per-slot OKVS
// key of a device (spec §3.6 C1). Only the user and the vendor can compute it.
type EphemeralID [EphemeralIDSize]byte

// IDDeriver computes ephemeral ids for one device. It keeps one keyed HMAC
// and resets it per id (≈3× cheaper than hmac.New per call). Not safe for
// concurrent use.
type IDDeriver struct {
	mac hash.Hash
	buf [12]byte
	sum []byte
}

// NewIDDeriver returns a deriver for PRF key kprf.
func NewIDDeriver(kprf *[KeySize]byte) *IDDeriver {
	return &IDDeriver{mac: hmac.New(sha256.New, kprf[:]), sum: make([]byte, 0, sha256.Size)}
}

// Derive returns z for slot j (1 ≤ j ≤ q) of round t. The input is the fixed
// 12-byte encoding uint32(j) ‖ uint64(t), big-endian (spec §3.1).
func (d *IDDeriver) Derive(j uint32, t uint64) EphemeralID {
	binary.BigEndian.PutUint32(d.buf[0:], j)
	binary.BigEndian.PutUint64(d.buf[4:], t)
	d.mac.Reset()
	d.mac.Write(d.buf[:])
	var z EphemeralID
	copy(z[:], d.mac.Sum(d.sum[:0]))
	return z
}

// DeriveEphemeralID is the one-shot form of IDDeriver.Derive.
func DeriveEphemeralID(kprf *[KeySize]byte, j uint32, t uint64) EphemeralID {
	return NewIDDeriver(kprf).Derive(j, t)
}
