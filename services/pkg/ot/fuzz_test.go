package ot

import (
	"bytes"
	"encoding"
	"testing"
)

// One fuzz target per decoder of network input: decoding never panics, and whatever decodes
// re-encodes to the same bytes (the encoding is canonical).
func fuzzDecoder[T any, PT interface {
	*T
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
}](f *testing.F, name string) {
	f.Add(validMessages(f)[name])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m := PT(new(T))
		if err := m.UnmarshalBinary(b); err != nil {
			return
		}
		out, err := m.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded message does not encode: %v", err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b, out)
		}
	})
}

func FuzzSetup(f *testing.F)           { fuzzDecoder[Setup](f, "setup") }
func FuzzSetupReply(f *testing.F)      { fuzzDecoder[SetupReply](f, "setup-reply") }
func FuzzExtendRequest(f *testing.F)   { fuzzDecoder[ExtendRequest](f, "extend") }
func FuzzCorrelatedReply(f *testing.F) { fuzzDecoder[CorrelatedReply](f, "correlated") }
func FuzzChosenReply(f *testing.F)     { fuzzDecoder[ChosenReply](f, "chosen") }
