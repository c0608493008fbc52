package lois

import (
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// Handshake inputs (spec §3.2, §7.3). The handshake runs over an already authenticated and
// encrypted channel (mTLS with Vault PKI certificates, D-24): r_d and r_c come from the two
// ends, k_c is a 32-byte secret CI adds because the nonces alone carry only 128 bits and, with
// Envoy terminating TLS, no TLS exporter reaches from DI to CI (D-2).
type Handshake struct {
	DeviceNonce uint64   // r_d
	CloudNonce  uint64   // r_c
	CloudSecret []byte   // k_c: CloudSecretSize bytes, or empty in paper-compat mode
	SessionID   [16]byte // chosen by the registrar, unique per session
}

// Seed derives the session seed: HKDF-SHA256(IKM = r_d ‖ r_c ‖ k_c, salt "LOIS/v1/seed",
// info = session_id, L = 32) (spec §3.3, D-2). The session id in info binds the seed to the
// session the registrar records, so two sessions with equal nonces still differ.
func (h Handshake) Seed() ([SeedSize]byte, error) {
	var out [SeedSize]byte
	if len(h.CloudSecret) != 0 && len(h.CloudSecret) != CloudSecretSize {
		return out, fmt.Errorf("lois seed: k_c is %d bytes, want 0 or %d", len(h.CloudSecret), CloudSecretSize)
	}
	ikm := make([]byte, 0, 16+CloudSecretSize)
	ikm = binary.BigEndian.AppendUint64(ikm, h.DeviceNonce)
	ikm = binary.BigEndian.AppendUint64(ikm, h.CloudNonce)
	ikm = append(ikm, h.CloudSecret...)
	k, err := hkdf.Key(sha256.New, ikm, []byte("LOIS/v1/seed"), string(h.SessionID[:]), SeedSize)
	if err != nil {
		return out, fmt.Errorf("lois seed: %w", err)
	}
	copy(out[:], k)
	return out, nil
}

// StreamKey derives the ChaCha20 key of one (direction, service, epoch) stream:
// HKDF-Expand(seed, "LOIS/v1/stream" ‖ dir ‖ SID (BE16) ‖ epoch (BE32), 32) (spec §3.3).
// CI hands SIs these keys, never the seed (least privilege, D-6).
func StreamKey(seed [SeedSize]byte, d Dir, sid uint16, epoch uint32) [StreamKeySize]byte {
	info := make([]byte, 0, 21)
	info = append(info, "LOIS/v1/stream"...)
	info = append(info, byte(d))
	info = binary.BigEndian.AppendUint16(info, sid)
	info = binary.BigEndian.AppendUint32(info, epoch)
	k, err := hkdf.Expand(sha256.New, seed[:], string(info), StreamKeySize)
	if err != nil {
		panic(err) // 32 bytes of SHA-256 output can always be expanded
	}
	var out [StreamKeySize]byte
	copy(out[:], k)
	return out
}
