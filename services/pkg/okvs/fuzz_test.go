package okvs_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/okvs"
)

// fuzzTables returns small real tables (with their pairs) for fuzz seeds.
func fuzzTables(f *testing.F) ([]*okvs.Table, [][][2][]byte) {
	var tabs []*okvs.Table
	var pairs [][][2][]byte
	for _, s := range [][2]int{{0, 16}, {1, 16}, {3, 16}, {20, 32}} {
		keys, values := katPairs(s[0], s[1])
		tab, err := okvs.EncodeWithSize(keys, values, s[1], detRand(uint64(s[0])))
		if err != nil {
			f.Fatal(err)
		}
		var kv [][2][]byte
		for i := range keys {
			kv = append(kv, [2][]byte{keys[i], values[i]})
		}
		tabs, pairs = append(tabs, tab), append(pairs, kv)
	}
	return tabs, pairs
}

// FuzzUnmarshal feeds network input to UnmarshalBinary: it must never panic, must reject with
// ErrMalformed, and whatever it accepts must decode and re-marshal to the same bytes.
func FuzzUnmarshal(f *testing.F) {
	tabs, _ := fuzzTables(f)
	for _, tab := range tabs {
		b, _ := tab.MarshalBinary()
		f.Add(b)
		f.Add(b[:len(b)-1])
		f.Add(b[:32])
	}
	f.Add([]byte{})
	f.Add([]byte("OKVS"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var tab okvs.Table
		if err := tab.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, okvs.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		again, err := tab.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("accepted input does not re-marshal to itself (err %v)", err)
		}
		if got := tab.Decode(nil, b[:min(len(b), 40)]); len(got) != tab.ValueSize() {
			t.Fatalf("Decode returned %d bytes, want %d", len(got), tab.ValueSize())
		}
	})
}

// FuzzDecode decodes arbitrary keys in unmarshalled tables: the result always has ValueSize
// bytes, DecodeBatch agrees with Decode, and encoded keys still decode to their values.
func FuzzDecode(f *testing.F) {
	tabs, pairs := fuzzTables(f)
	var parsed []*okvs.Table
	for _, tab := range tabs {
		b, _ := tab.MarshalBinary()
		var p okvs.Table
		if err := p.UnmarshalBinary(b); err != nil {
			f.Fatal(err)
		}
		parsed = append(parsed, &p)
	}
	f.Add(uint8(0), []byte("key-0"))
	f.Add(uint8(1), []byte("key-0"))
	f.Add(uint8(2), []byte("key-2"))
	f.Add(uint8(3), []byte("key-19"))
	f.Add(uint8(3), []byte(""))
	f.Add(uint8(3), bytes.Repeat([]byte{0xff}, 300))
	f.Fuzz(func(t *testing.T, which uint8, key []byte) {
		i := int(which) % len(parsed)
		tab := parsed[i]
		got := tab.Decode([]byte("x"), key)
		if len(got) != 1+tab.ValueSize() || got[0] != 'x' {
			t.Fatalf("Decode appended %d bytes, want %d", len(got)-1, tab.ValueSize())
		}
		batch := tab.DecodeBatch(nil, [][]byte{key, key})
		if !bytes.Equal(batch[:tab.ValueSize()], got[1:]) || !bytes.Equal(batch[tab.ValueSize():], got[1:]) {
			t.Fatal("DecodeBatch disagrees with Decode")
		}
		for _, kv := range pairs[i] {
			if bytes.Equal(kv[0], key) && !bytes.Equal(got[1:], kv[1]) {
				t.Fatal("encoded key decodes to the wrong value")
			}
		}
	})
}
