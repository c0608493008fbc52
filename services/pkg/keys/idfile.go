package keys

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strconv"
)

// IDFile is what a key file with key ids names besides its keys: their ids in file order and
// the current one (the id a "current <id>" line names — Named — or else the highest).
type IDFile struct {
	IDs     []uint32
	Current uint32
	Named   bool
}

// ParseIDFile reads a key file with key ids of keyLen bytes each — the LOIS session record key
// file, read by the registrar and cloud interfaces and rotated by the HeaderGateway operator: a
// bare line of 2·keyLen hex digits is key id 0, "<id> <hex>" a key with an id, "current <id>"
// the key in use; blank lines and # comments are ignored. Each key goes to add with its id, in
// a buffer wiped after add returns (add copies what it keeps). Errors never quote a key.
func ParseIDFile(b []byte, keyLen int, add func(id uint32, key []byte) error) (IDFile, error) {
	var f IDFile
	seen := map[uint32]bool{}
	current, named := uint32(0), false
	key := make([]byte, keyLen)
	defer clear(key)
	for i, line := range bytes.Split(b, []byte("\n")) {
		w := bytes.Fields(line)
		if len(w) == 0 || w[0][0] == '#' {
			continue
		}
		id, hexKey := uint64(0), w[0]
		switch {
		case len(w) == 1:
		case len(w) == 2 && string(w[0]) == "current":
			c, err := strconv.ParseUint(string(w[1]), 10, 32)
			if err != nil || named {
				return f, fmt.Errorf("line %d: want one \"current <id>\"", i+1)
			}
			current, named = uint32(c), true
			continue
		case len(w) == 2:
			var err error
			if id, err = strconv.ParseUint(string(w[0]), 10, 32); err != nil {
				return f, fmt.Errorf("line %d: key id: want a decimal of 32 bits", i+1)
			}
			hexKey = w[1]
		default:
			return f, fmt.Errorf("line %d: want \"<id> <%d hex digits>\"", i+1, 2*keyLen)
		}
		if len(hexKey) != 2*keyLen {
			return f, fmt.Errorf("line %d: want %d hex digits", i+1, 2*keyLen)
		}
		if _, err := hex.Decode(key, hexKey); err != nil {
			return f, fmt.Errorf("line %d: want %d hex digits", i+1, 2*keyLen)
		}
		if seen[uint32(id)] {
			return f, fmt.Errorf("line %d: key id %d twice", i+1, id)
		}
		if err := add(uint32(id), key); err != nil {
			return f, fmt.Errorf("line %d: %w", i+1, err)
		}
		seen[uint32(id)] = true
		f.IDs = append(f.IDs, uint32(id))
		f.Current = max(f.Current, uint32(id))
	}
	if len(f.IDs) == 0 {
		return f, fmt.Errorf("no key (want %d hex digits, or \"<id> <hex>\" lines)", 2*keyLen)
	}
	if named {
		if !seen[current] {
			return f, fmt.Errorf("current key id %d is not in the file", current)
		}
		f.Current, f.Named = current, true
	}
	return f, nil
}
