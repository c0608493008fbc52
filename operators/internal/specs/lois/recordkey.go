package lois

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SessionStreamMaxAge is how long the session stream keeps a record: the registrar daemon's
// --store-ttl default (the operator does not set it), which it gives the stream as MaxAge.
// A superseded record key stays in its Secret this long, plus RecordKeySlack, after the
// rotation that superseded it.
const SessionStreamMaxAge = 26 * time.Hour

// RecordKeySlack covers the registrar sealing under the old key until its mounted Secret
// shows the rotation (the kubelet's sync period) and the clocks of the pods.
const RecordKeySlack = time.Hour

// RecordKeys is the content of a record key file (services/pkg/lois/roles RecordSeal): keys by
// id as hex, the current one, and whether a "current <id>" line names it (a staged rotation).
type RecordKeys struct {
	Keys    map[uint32]string
	Current uint32
	Staged  bool
}

// ParseRecordKeys reads a record key file as the services do: a bare line of 64 hex digits is
// key id 0, "<id> <64 hex digits>" a key with an id, "current <id>" the key records are
// sealed under (default: the highest id); blank lines and # comments are ignored. Errors never
// quote a key.
func ParseRecordKeys(b []byte) (*RecordKeys, error) {
	k := &RecordKeys{Keys: map[uint32]string{}}
	current, hasCurrent := uint32(0), false
	for i, line := range bytes.Split(b, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) == 0 || f[0][0] == '#' {
			continue
		}
		id, key := uint64(0), f[0]
		switch {
		case len(f) == 1:
		case len(f) == 2 && f[0] == "current":
			c, err := strconv.ParseUint(f[1], 10, 32)
			if err != nil || hasCurrent {
				return nil, fmt.Errorf("line %d: want one \"current <id>\"", i+1)
			}
			current, hasCurrent = uint32(c), true
			continue
		case len(f) == 2:
			var err error
			if id, err = strconv.ParseUint(f[0], 10, 32); err != nil {
				return nil, fmt.Errorf("line %d: key id: want a decimal of 32 bits", i+1)
			}
			key = f[1]
		default:
			return nil, fmt.Errorf("line %d: want \"<id> <64 hex digits>\"", i+1)
		}
		if b, err := hex.DecodeString(key); err != nil || len(b) != 32 {
			return nil, fmt.Errorf("line %d: want 64 hex digits", i+1)
		}
		if _, dup := k.Keys[uint32(id)]; dup {
			return nil, fmt.Errorf("line %d: key id %d twice", i+1, id)
		}
		k.Keys[uint32(id)] = strings.ToLower(key)
		k.Current = max(k.Current, uint32(id))
	}
	if len(k.Keys) == 0 {
		return nil, fmt.Errorf("no key")
	}
	if hasCurrent {
		if _, ok := k.Keys[current]; !ok {
			return nil, fmt.Errorf("current key id %d is not in the file", current)
		}
		k.Staged = current != k.Current
		k.Current = current
	}
	return k, nil
}

// IDs are the key ids in ascending order.
func (k *RecordKeys) IDs() []uint32 {
	ids := make([]uint32, 0, len(k.Keys))
	for id := range k.Keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Highest is the highest key id.
func (k *RecordKeys) Highest() uint32 { return slices.Max(k.IDs()) }

// Render is the file's content: "<id> <hex>" lines in id order, and "current <id>" when the
// current key is not the highest (a staged rotation).
func (k *RecordKeys) Render() []byte {
	var b strings.Builder
	b.WriteString("# LOIS session record keys; written by the HeaderGateway operator (record key rotation)\n")
	for _, id := range k.IDs() {
		fmt.Fprintf(&b, "%d %s\n", id, k.Keys[id])
	}
	if k.Current != k.Highest() {
		fmt.Fprintf(&b, "current %d\n", k.Current)
	}
	return []byte(b.String())
}
