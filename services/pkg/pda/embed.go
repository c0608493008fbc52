package pda

import (
	"encoding/binary"
	"fmt"
)

// Embedding keys into G (spec §3.9.3) so that E_PRX(k) is an ElGamal ciphertext that the
// proxy and the DB can re-randomise. A hybrid KEM+AEAD would leave a symmetric part the
// participant chooses, i.e. a subliminal channel; this is why the spec forbids it.
//
// P-256 (spec): x = 0x00 || chunk(30) || ctr, decompress 0x02 || x; ≈ 1/2 per try.
// ristretto255 [R]: the 32-byte encoding ctrLo || chunk(30) || ctrHi with ctrLo even (a
// canonical encoding is non-negative) and ctrHi ≤ 0x7e (so the field element is < p);
// each try decodes with probability ≈ 1/4, and 128 × 127 tries make failure impossible in
// practice. Both decodings read the chunk back from the element's canonical encoding.

func (g *Group) embedChunk(chunk []byte) (Element, error) {
	var buf [33]byte
	switch g.id {
	case P256:
		buf[0], buf[1] = 0x02, 0x00
		copy(buf[2:32], chunk)
		for ctr := range 256 {
			buf[32] = byte(ctr)
			if e, err := g.DecodeElement(buf[:33]); err == nil {
				return e, nil
			}
		}
	case Ristretto255:
		copy(buf[1:31], chunk)
		for hi := range 0x7f {
			buf[31] = byte(hi)
			for lo := 0; lo < 256; lo += 2 {
				buf[0] = byte(lo)
				if e, err := g.DecodeElement(buf[:32]); err == nil {
					return e, nil
				}
			}
		}
	}
	return nil, ErrEmbedding
}

// extractChunk reads the 30 chunk bytes back from an embedded element. A point that is not
// an embedding (garbage from a malicious participant) still yields 30 bytes or an error;
// the caller's padding and canonical-key checks then reject it.
func (g *Group) extractChunk(dst []byte, e Element) ([]byte, error) {
	enc := g.encodeElement(e)
	if enc == nil {
		return dst, fmt.Errorf("%w: identity is not an embedding", ErrMalformed)
	}
	switch g.id {
	case P256:
		if enc[1] != 0x00 {
			return dst, fmt.Errorf("%w: not an embedded chunk", ErrMalformed)
		}
		return append(dst, enc[2:32]...), nil
	default:
		return append(dst, enc[1:31]...), nil
	}
}

// padKey returns I2OSP(len,2) || canon(k) || 0x00… of exactly payloadSize bytes.
func (s *Suite) padKey(k Key) ([]byte, error) {
	canon := k.Canonical()
	if len(canon) > s.MaxCanonicalKeySize() {
		return nil, fmt.Errorf("%w: canonical key of %d bytes, at most %d", ErrKeyTooLong, len(canon), s.MaxCanonicalKeySize())
	}
	p := make([]byte, s.payloadSize())
	binary.BigEndian.PutUint16(p, uint16(len(canon)))
	copy(p[2:], canon)
	return p, nil
}

// unpadKey inverts padKey strictly: the padding must be zero and the key canonical.
func (s *Suite) unpadKey(p []byte) (Key, error) {
	if len(p) != s.payloadSize() {
		return Key{}, fmt.Errorf("%w: payload length", ErrMalformed)
	}
	n := int(binary.BigEndian.Uint16(p))
	if n > len(p)-2 {
		return Key{}, fmt.Errorf("%w: payload key length", ErrMalformed)
	}
	for _, c := range p[2+n:] {
		if c != 0 {
			return Key{}, fmt.Errorf("%w: non-zero padding", ErrMalformed)
		}
	}
	return ParseCanonicalKey(p[2 : 2+n])
}

// embedKey pads k and embeds each chunk.
func (s *Suite) embedKey(k Key) ([]Element, error) {
	p, err := s.padKey(k)
	if err != nil {
		return nil, err
	}
	out := make([]Element, s.params.Chunks)
	for i := range out {
		if out[i], err = s.g.embedChunk(p[i*ChunkSize : (i+1)*ChunkSize]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// decodeKey extracts and unpads the chunks of a decrypted E_PRX(k).
func (s *Suite) decodeKey(chunks []Element) (Key, error) {
	p := make([]byte, 0, s.payloadSize())
	var err error
	for _, c := range chunks {
		if p, err = s.g.extractChunk(p, c); err != nil {
			return Key{}, err
		}
	}
	return s.unpadKey(p)
}
