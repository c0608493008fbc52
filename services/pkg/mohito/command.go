package mohito

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/salsa20"
)

// Command is the end-to-end command plaintext (spec O5 with the G1 keys):
// cmd_id(16) ‖ ts(8) ‖ k_I^resp(32) ‖ k_V*^resp(32) ‖ len(2) ‖ payload ‖ zero
// padding to L_c. The device needs both response keys to build its reply.
type Command struct {
	ID                [16]byte
	Timestamp         time.Time // Unix nanoseconds on the wire
	IntegratorRespKey [KeySize]byte
	ShufflerRespKey   [KeySize]byte
	Payload           []byte
}

func (c *Command) marshal(size int) ([]byte, error) {
	if len(c.Payload) > size-CommandHeaderSize {
		return nil, fmt.Errorf("%w: %d > %d", ErrPayloadTooLarge, len(c.Payload), size-CommandHeaderSize)
	}
	b := make([]byte, size)
	copy(b, c.ID[:])
	binary.BigEndian.PutUint64(b[16:], uint64(c.Timestamp.UnixNano()))
	copy(b[24:], c.IntegratorRespKey[:])
	copy(b[56:], c.ShufflerRespKey[:])
	binary.BigEndian.PutUint16(b[88:], uint16(len(c.Payload)))
	copy(b[CommandHeaderSize:], c.Payload)
	return b, nil
}

func parseCommand(b []byte) (*Command, error) {
	if len(b) < CommandHeaderSize {
		return nil, ErrSize
	}
	c := &Command{}
	copy(c.ID[:], b)
	c.Timestamp = time.Unix(0, int64(binary.BigEndian.Uint64(b[16:])))
	copy(c.IntegratorRespKey[:], b[24:])
	copy(c.ShufflerRespKey[:], b[56:])
	n := int(binary.BigEndian.Uint16(b[88:]))
	if n > len(b)-CommandHeaderSize {
		return nil, fmt.Errorf("%w: payload length %d", ErrNonCanonical, n)
	}
	if !allZero(b[CommandHeaderSize+n:]) {
		return nil, fmt.Errorf("%w: non-zero padding", ErrNonCanonical)
	}
	c.Payload = append([]byte(nil), b[CommandHeaderSize:CommandHeaderSize+n]...)
	return c, nil
}

// marshalResponse builds cmd_id(16) ‖ len(2) ‖ payload ‖ zero padding to L_r.
func marshalResponse(id *[16]byte, payload []byte, size int) ([]byte, error) {
	if len(payload) > size-ResponseHeaderSize {
		return nil, fmt.Errorf("%w: response %d > %d", ErrPayloadTooLarge, len(payload), size-ResponseHeaderSize)
	}
	b := make([]byte, size)
	copy(b, id[:])
	binary.BigEndian.PutUint16(b[16:], uint16(len(payload)))
	copy(b[ResponseHeaderSize:], payload)
	return b, nil
}

func parseResponse(b []byte) (id [16]byte, payload []byte, err error) {
	copy(id[:], b)
	n := int(binary.BigEndian.Uint16(b[16:]))
	if n > len(b)-ResponseHeaderSize || !allZero(b[ResponseHeaderSize+n:]) {
		return id, nil, fmt.Errorf("%w: response padding", ErrNonCanonical)
	}
	return id, append([]byte(nil), b[ResponseHeaderSize:ResponseHeaderSize+n]...), nil
}

func allZero(b []byte) bool {
	var acc byte
	for _, x := range b {
		acc |= x
	}
	return acc == 0
}

// Device AEAD labels: the associated data binds a ciphertext to its direction
// and to the slot's ephemeral id, so a command replayed into another round or
// slot (different z) fails to open at the device.
const (
	aadCommand  = "mohito/v1/cmd"
	aadResponse = "mohito/v1/resp"
)

func deviceAAD(label string, z *EphemeralID) []byte {
	aad := make([]byte, 0, len(label)+EphemeralIDSize)
	return append(append(aad, label...), z[:]...)
}

// sealDevice is XChaCha20-Poly1305 under k_D^ae with a random 24-byte nonce
// sent in front (overhead 40 B, like the paper's secretbox).
func sealDevice(key *[KeySize]byte, label string, z *EphemeralID, pt []byte, rand io.Reader) ([]byte, error) {
	aead, err := chacha20poly1305.NewX(key[:])
	if err != nil {
		return nil, err
	}
	out := make([]byte, chacha20poly1305.NonceSizeX, chacha20poly1305.NonceSizeX+len(pt)+aeadTagSize)
	if _, err := io.ReadFull(rand, out); err != nil {
		return nil, fmt.Errorf("sample device nonce: %w", err)
	}
	return aead.Seal(out, out, pt, deviceAAD(label, z)), nil
}

func openDevice(key *[KeySize]byte, label string, z *EphemeralID, ct []byte) ([]byte, error) {
	aead, err := chacha20poly1305.NewX(key[:])
	if err != nil {
		return nil, err
	}
	if len(ct) < DeviceAEOverhead {
		return nil, ErrDecrypt
	}
	pt, err := aead.Open(nil, ct[:chacha20poly1305.NonceSizeX], ct[chacha20poly1305.NonceSizeX:], deviceAAD(label, z))
	if err != nil {
		return nil, ErrDecrypt
	}
	return pt, nil
}

// Response-path server layers (spec G1 fix): unauthenticated XSalsa20
// keystreams under one-time keys chosen by the user. Removing a layer is an
// XOR that cannot fail, so the integrator behaves identically at fake and real
// positions. The nonces only separate the two roles; each key is used once.
var (
	nonceRespIntegrator = [24]byte{'m', 'o', 'h', 'i', 't', 'o', '/', 'r', 'e', 's', 'p', '/', 'I'}
	nonceRespShuffler   = [24]byte{'m', 'o', 'h', 'i', 't', 'o', '/', 'r', 'e', 's', 'p', '/', 'V'}
)

// xorRespLayer XORs the role's keystream into b in place.
func xorRespLayer(b []byte, key *[KeySize]byte, nonce *[24]byte) {
	salsa20.XORKeyStream(b, b, nonce[:], key)
}
