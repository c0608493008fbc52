package keys

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzDecode: a key read from Vault or a Secret decodes to exactly Size bytes or fails, and the
// error never shows the input.
func FuzzDecode(f *testing.F) {
	f.Add(bytes.Repeat([]byte{7}, Size))
	f.Add([]byte(strings.Repeat("ab", Size)))
	f.Add([]byte("c2VjcmV0LWtleS1tYXRlcmlhbC0zMi1ieXRlcyEhISE=\n"))
	f.Add([]byte("not a key"))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := Decode(b)
		if err != nil {
			if len(b) >= 8 && strings.Contains(err.Error(), string(b)) {
				t.Fatalf("error shows the input: %v", err)
			}
			return
		}
		if len(k) != Size {
			t.Fatalf("decoded %d bytes", len(k))
		}
		if len(b) == Size && !bytes.Equal(k, b) {
			t.Fatal("a Size-byte input is not taken raw")
		}
	})
}

// FuzzEpochName: the names of a key ring (Secret keys, Vault secret names) parse only in their
// canonical form, so one epoch never has two names.
func FuzzEpochName(f *testing.F) {
	for _, s := range []string{"epoch-0.key", "epoch-12.key", "epoch-012.key", "epoch-2147483648.key", "epoch-7", "private.key", "epoch-.key"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if n, ok := ParseEpochFileName(name); ok && EpochFileName(n) != name {
			t.Fatalf("%q parsed as epoch %d, whose file is %q", name, n, EpochFileName(n))
		}
		if n, ok := parseEpochName(name); ok && name != EpochFileName(n) && name+".key" != EpochFileName(n) {
			t.Fatalf("%q parsed as epoch %d, not a name of it", name, n)
		}
	})
}
