package lois

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A DVT snapshot lets a CI or SI restart without replaying every epoch record (spec D-30).
// It holds keystreams: a role must wrap it (Vault Transit) before it leaves memory.
//
//	magic "LOISDVT1" | flags u8 (1 fp16, 2 count-only, 4 dedup) | key [16] |
//	capacity u32 | grace i64 | tables u32 |
//	per table: count u32 | inserted u32 | consumed u32 | maxExpiry i64 |
//	           count × (slot u32 | f u16 | sid u16 | [id u64, exact mode] | ks [16])
//
// Integers are big-endian; slots ascend strictly within a table. The table geometry is not
// stored: it follows from the capacity (sizeGeometry), as it does on every replica.

const snapshotMagic = "LOISDVT1"

// ErrBadSnapshot is returned for any snapshot UnmarshalDVT refuses.
var ErrBadSnapshot = errors.New("lois: bad DVT snapshot")

// MarshalBinary encodes the tables (the DVF is rebuilt on load).
func (d *DVT) MarshalBinary() ([]byte, error) {
	var flags byte
	if d.cfg.Fingerprint16 {
		flags |= 1
	}
	if d.cfg.CountOnly {
		flags |= 2
	}
	if d.cfg.Dedup {
		flags |= 4
	}
	b := append([]byte(snapshotMagic), flags)
	b = append(b, d.cfg.Key[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(d.cfg.TableCapacity))
	b = binary.BigEndian.AppendUint64(b, uint64(d.cfg.Grace))
	b = binary.BigEndian.AppendUint32(b, uint32(len(d.tables)))
	for _, t := range d.tables {
		b = binary.BigEndian.AppendUint32(b, uint32(t.count))
		b = binary.BigEndian.AppendUint32(b, uint32(t.inserted))
		b = binary.BigEndian.AppendUint32(b, uint32(t.consumed))
		b = binary.BigEndian.AppendUint64(b, uint64(t.maxExpiry))
		for s := range uint32(t.slots()) {
			if !t.occupied(s) {
				continue
			}
			b = binary.BigEndian.AppendUint32(b, s)
			b = binary.BigEndian.AppendUint16(b, t.fpAt(s))
			b = binary.BigEndian.AppendUint16(b, t.val[s].sid)
			if t.id != nil {
				b = binary.BigEndian.AppendUint64(b, t.id[s])
			}
			b = append(b, t.val[s].ks[:]...)
		}
	}
	return b, nil
}

// UnmarshalDVT decodes a snapshot, refusing one whose tables together are sized for more than
// maxEntries (the input is untrusted: capacity × tables decides the memory taken).
func UnmarshalDVT(b []byte, maxEntries int) (*DVT, error) {
	bad := func(what string) (*DVT, error) { return nil, fmt.Errorf("%w: %s", ErrBadSnapshot, what) }
	const hdr = 8 + 1 + 16 + 4 + 8 + 4
	if len(b) < hdr || string(b[:8]) != snapshotMagic {
		return bad("header")
	}
	flags := b[8]
	if flags&^7 != 0 {
		return bad("flags")
	}
	cfg := DVTConfig{Fingerprint16: flags&1 != 0, CountOnly: flags&2 != 0, Dedup: flags&4 != 0}
	copy(cfg.Key[:], b[9:25])
	if cfg.Key == ([16]byte{}) {
		return bad("zero key")
	}
	capacity := binary.BigEndian.Uint32(b[25:])
	if capacity < 1 || int64(capacity) > int64(maxEntries) {
		return bad("capacity")
	}
	cfg.TableCapacity = int(capacity)
	cfg.Grace = int64(binary.BigEndian.Uint64(b[29:]))
	ntab := binary.BigEndian.Uint32(b[37:])
	b = b[hdr:]
	const tabHdr = 4 + 4 + 4 + 8
	if ntab < 1 || uint64(ntab)*tabHdr > uint64(len(b)) || uint64(ntab)*uint64(capacity) > uint64(maxEntries) {
		return bad("table count")
	}
	d, err := NewDVT(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	d.tables, d.filters = nil, nil
	entry := 4 + 2 + 2 + 16
	if !cfg.Fingerprint16 {
		entry += 8
	}
	slots := d.g.m * slotsPerBucket
	for range ntab {
		if len(b) < tabHdr {
			return bad("truncated table header")
		}
		count := binary.BigEndian.Uint32(b)
		d.link()
		t := d.tables[len(d.tables)-1]
		t.inserted = int(binary.BigEndian.Uint32(b[4:]))
		t.consumed = int(binary.BigEndian.Uint32(b[8:]))
		t.maxExpiry = int64(binary.BigEndian.Uint64(b[12:]))
		b = b[tabHdr:]
		if count > slots || uint64(count)*uint64(entry) > uint64(len(b)) {
			return bad("entry count")
		}
		prev := int64(-1)
		for range count {
			s := binary.BigEndian.Uint32(b)
			f := binary.BigEndian.Uint16(b[4:])
			if int64(s) <= prev || s >= slots || f == 0 {
				return bad("slot")
			}
			prev = int64(s)
			it := item{f: f, sid: binary.BigEndian.Uint16(b[6:])}
			o := 8
			if !cfg.Fingerprint16 {
				it.id = binary.BigEndian.Uint64(b[8:])
				o += 8
				b1, b2, f2 := d.hash(it.id)
				if bk := s / slotsPerBucket; it.id == 0 || f2 != f || (bk != b1 && bk != b2) {
					return bad("entry not at its hash")
				}
			}
			copy(it.ks[:], b[o:o+16])
			b = b[entry:]
			t.put(s, it)
			t.count++
			if cfg.Dedup {
				if err := d.filterInsert(len(d.tables)-1, &it.ks); err != nil {
					return bad("keystream filter")
				}
			}
		}
	}
	if len(b) != 0 {
		return bad("trailing bytes")
	}
	return d, nil
}
