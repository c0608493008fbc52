package lois

import (
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/keys"
)

// SessionStreamMaxAge is how long the session stream keeps a record: the registrar daemon's
// --store-ttl default (the operator does not set it), which it gives the stream as MaxAge.
// A superseded record key stays in its Secret this long, plus RecordKeySlack, after the
// rotation that superseded it.
const SessionStreamMaxAge = 26 * time.Hour

// RecordKeySlack covers the registrar sealing under the old key until its mounted Secret
// shows the rotation (the kubelet's sync period) and the clocks of the pods.
const RecordKeySlack = time.Hour

// recordKeyLen is a record key's length in bytes (lois/roles RecordKeyLen: AES-256-GCM).
const recordKeyLen = 32

// RecordKeys is the content of a record key file (services/pkg/lois/roles RecordSeal): keys by
// id as hex, the current one, and whether a "current <id>" line names it (a staged rotation).
type RecordKeys struct {
	Keys    map[uint32]string
	Current uint32
	Staged  bool
}

// ParseRecordKeys reads a record key file as the services do (keys.ParseIDFile).
// Errors never quote a key.
func ParseRecordKeys(b []byte) (*RecordKeys, error) {
	k := &RecordKeys{Keys: map[uint32]string{}}
	f, err := keys.ParseIDFile(b, recordKeyLen, func(id uint32, key []byte) error {
		k.Keys[id] = hex.EncodeToString(key)
		return nil
	})
	if err != nil {
		return nil, err
	}
	k.Current, k.Staged = f.Current, f.Named && f.Current != slices.Max(f.IDs)
	return k, nil
}

// IDs are the key ids in ascending order.
func (k *RecordKeys) IDs() []uint32 {
	return slices.Sorted(maps.Keys(k.Keys))
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
