package mohito

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"
	"io"

	"github.com/obscura-iot/obscura/services/pkg/okvs"
)

// bulkRandom returns a fast CSPRNG (AES-256-CTR) keyed from rnd, for the
// megabytes of padding and OKVS fill a round needs. Padding values must be
// indistinguishable from ciphertexts (spec §4.2: only pseudorandom values may
// be encoded), never zeros.
func bulkRandom(rnd io.Reader) (io.Reader, error) {
	if rnd == nil {
		rnd = rand.Reader
	}
	var key [32 + aes.BlockSize]byte
	if _, err := io.ReadFull(rnd, key[:]); err != nil {
		return nil, fmt.Errorf("seed bulk random: %w", err)
	}
	block, err := aes.NewCipher(key[:32])
	if err != nil {
		return nil, err
	}
	return &cipher.StreamReader{S: cipher.NewCTR(block, key[32:]), R: zeroReader{}}, nil
}

type zeroReader struct{}

func (zeroReader) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// EncodeCommandTable is the OKVS-encoder stage for one vendor (spec §3.6 C5,
// §4.5 Stage C): it encodes (z → ⟨cmd⟩_D) for the vendor's entries, replaces
// duplicate keys by random ones so the size is unchanged (O6), and pads with
// random pairs to the public capacity (G3b, from CommandCapacity). It returns
// the table, the response slots of the entries and the number of duplicates.
func EncodeCommandTable(p Params, cmds []ShuffledCommand, capacity int, rnd io.Reader) (*okvs.Table, []ResponseSlot, int, error) {
	if len(cmds) > capacity {
		return nil, nil, 0, fmt.Errorf("%w: %d entries over capacity %d", ErrParams, len(cmds), capacity)
	}
	br, err := bulkRandom(rnd)
	if err != nil {
		return nil, nil, 0, err
	}
	vs := p.DeviceCiphertextSize()
	keys := make([][]byte, capacity)
	values := make([][]byte, capacity)
	slots := make([]ResponseSlot, len(cmds))
	seen := make(map[EphemeralID]struct{}, len(cmds))
	dupes := 0
	keyBuf := make([]byte, capacity*EphemeralIDSize)
	for i := range cmds {
		c := &cmds[i]
		if len(c.DeviceCiphertext) != vs {
			return nil, nil, 0, fmt.Errorf("%w: device ciphertext of %d bytes", ErrSize, len(c.DeviceCiphertext))
		}
		key := c.Z
		if _, dup := seen[key]; dup {
			// O6: keep the first, give the duplicate a random key (its
			// response is then random too).
			dupes++
			if _, err := io.ReadFull(br, key[:]); err != nil {
				return nil, nil, 0, err
			}
		}
		seen[key] = struct{}{}
		k := keyBuf[i*EphemeralIDSize : (i+1)*EphemeralIDSize]
		copy(k, key[:])
		keys[i], values[i] = k, c.DeviceCiphertext
		slots[i] = ResponseSlot{Pos: c.Pos, Vendor: c.Vendor, Key: key, RespKey: c.RespKey}
	}
	if err := padPairs(keys, values, keyBuf, len(cmds), vs, br); err != nil {
		return nil, nil, 0, err
	}
	t, err := okvs.EncodeWithSize(keys, values, vs, br)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("encode command table: %w", err)
	}
	return t, slots, dupes, nil
}

// padPairs fills keys[from:], values[from:] with random pairs.
func padPairs(keys, values [][]byte, keyBuf []byte, from, valueSize int, br io.Reader) error {
	n := len(keys) - from
	if n == 0 {
		return nil
	}
	if _, err := io.ReadFull(br, keyBuf[from*EphemeralIDSize:]); err != nil {
		return err
	}
	valBuf := make([]byte, n*valueSize)
	if _, err := io.ReadFull(br, valBuf); err != nil {
		return err
	}
	for i := range n {
		keys[from+i] = keyBuf[(from+i)*EphemeralIDSize : (from+i+1)*EphemeralIDSize]
		values[from+i] = valBuf[i*valueSize : (i+1)*valueSize]
	}
	return nil
}

// ParseTable decodes an OKVS from the network and checks that it has exactly
// the public shape expected for its role: capacity pairs of valueSize bytes.
// The bytes are checked against okvs.EncodedSize before anything is parsed.
func ParseTable(b []byte, capacity, valueSize int) (*okvs.Table, error) {
	if want := okvs.EncodedSize(capacity, valueSize); want < 0 || len(b) != want {
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrTableShape, len(b), okvs.EncodedSize(capacity, valueSize))
	}
	t := new(okvs.Table)
	if err := t.UnmarshalBinary(b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTableShape, err)
	}
	if t.ValueSize() != valueSize {
		return nil, fmt.Errorf("%w: value size %d", ErrTableShape, t.ValueSize())
	}
	return t, nil
}

// DecodeResponseLayer is the response-decoder stage for one vendor (spec
// §3.7 R3 with the G1 fix): for each slot it decodes the vendor's response
// table at the slot's key and XORs off the keystream of k_I^resp. There is no
// failure and no branch on validity: fake and real positions take exactly the
// same path and yield values of the same length and distribution (§9.2 #13).
// out[i] receives slot i's r′ (ResponseValueSize bytes).
func DecodeResponseLayer(p Params, table *okvs.Table, slots []ResponseSlot, out [][]byte) error {
	return decodeResponseLayer(p, table, slots, &nonceRespIntegrator, out)
}

// decodeResponseLayer decodes table at every slot key and removes the
// integrator's keystream under nonce (the synchronous nonce or a late one).
func decodeResponseLayer(p Params, table *okvs.Table, slots []ResponseSlot, nonce *[24]byte, out [][]byte) error {
	if p.ResponseMode != ResponseHardened {
		return fmt.Errorf("%w: paper-literal tables need Integrator.DecodeResponseLayerPaperLiteral", ErrParams)
	}
	vs := p.ResponseValueSize()
	if table.ValueSize() != vs {
		return fmt.Errorf("%w: value size %d, want %d", ErrTableShape, table.ValueSize(), vs)
	}
	keys := make([][]byte, len(slots))
	for i := range slots {
		keys[i] = slots[i].Key[:]
	}
	buf := table.DecodeBatch(make([]byte, 0, len(slots)*vs), keys)
	for i := range slots {
		v := buf[i*vs : (i+1)*vs : (i+1)*vs]
		xorRespLayer(v, &slots[i].RespKey, nonce)
		out[i] = v
	}
	return nil
}

// VoidResponseLayer produces r′ for a position whose inner layer did not open:
// random bytes of the same size (such a position has no vendor table).
func VoidResponseLayer(p Params, rnd io.Reader) ([]byte, error) {
	if rnd == nil {
		rnd = rand.Reader
	}
	b := make([]byte, p.ResponseLayerSize())
	_, err := io.ReadFull(rnd, b)
	return b, err
}
