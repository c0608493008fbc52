package sddr

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
)

// LinkValue is a high-entropy secret shared by two users (§3.7): the L of a confirmed encounter
// or 32 CSPRNG bytes exchanged out of band. The salted-hash construction is only a secure PSI
// substitute for such values (§2.3), so user-chosen ones are refused (§7 item 8).
type LinkValue [LinkValueSize]byte

// ErrWeakLinkValue rejects a value that cannot be uniformly random.
var ErrWeakLinkValue = errors.New("sddr: link value is not high-entropy")

// NewLinkValue draws a fresh link value from r (crypto/rand when r is nil).
func NewLinkValue(r io.Reader) (LinkValue, error) {
	if r == nil {
		r = rand.Reader
	}
	var v LinkValue
	if _, err := io.ReadFull(r, v[:]); err != nil {
		return v, fmt.Errorf("draw link value: %w", err)
	}
	return v, nil
}

// ParseLinkValue accepts exactly 32 bytes that look uniformly random. Uniform bytes are all
// printable ASCII with probability (95/256)³² < 2⁻⁴⁵ and show fewer than 12 distinct values with
// probability below 2⁻⁶⁰, so passwords, counters and repeated patterns are caught.
func ParseLinkValue(b []byte) (LinkValue, error) {
	var v LinkValue
	if len(b) != LinkValueSize {
		return v, fmt.Errorf("%w: %d bytes, want %d", ErrWeakLinkValue, len(b), LinkValueSize)
	}
	var seen [256]bool
	distinct, printable := 0, 0
	for _, c := range b {
		if c >= 0x20 && c < 0x7f {
			printable++
		}
		if !seen[c] {
			seen[c] = true
			distinct++
		}
	}
	if distinct < 12 || printable == len(b) {
		return v, fmt.Errorf("%w: %d distinct bytes", ErrWeakLinkValue, distinct)
	}
	copy(v[:], b)
	return v, nil
}

// Direction says how a link is used (§3.7): advertise lets the friend recognise us, listen
// lets us recognise the friend. The two are independent (INV-9).
type Direction uint8

const (
	Advertise Direction = 1 << iota
	Listen
)
