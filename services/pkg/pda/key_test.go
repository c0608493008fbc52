package pda

import (
	"errors"
	"testing"
)

func TestCanonicalKeys(t *testing.T) {
	same := [][]func() (Key, error){
		{ // T-FUN-10
			func() (Key, error) { return ParseIPKey("10.0.0.1") },
			func() (Key, error) { return IPKeyFromBytes([]byte{10, 0, 0, 1}) },
			func() (Key, error) { return ParseIPKey("::ffff:10.0.0.1") },
			func() (Key, error) {
				return IPKeyFromBytes([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1})
			},
		},
		{
			func() (Key, error) { return ParseIPKey("2001:DB8::1") },
			func() (Key, error) { return ParseIPKey("2001:0db8:0:0:0:0:0:1") },
		},
		{
			func() (Key, error) { return DomainKey("Bücher.Example.") },
			func() (Key, error) { return DomainKey("xn--bcher-kva.example") },
		},
		{
			func() (Key, error) { return URLKey("HTTPS://User-Less.Example.COM:443/%7Ea/b/./c/../d?q=%2f#x") },
			func() (Key, error) { return URLKey("https://user-less.example.com/~a/b/d?q=%2F") },
		},
		{
			func() (Key, error) { return URLKey("http://example.com") },
			func() (Key, error) { return URLKey("http://example.com:80/") },
		},
		{
			func() (Key, error) { return StringKey("caf\u00e9") },
			func() (Key, error) { return StringKey("cafe\u0301") },
		},
	}
	for i, group := range same {
		var first Key
		for j, mk := range group {
			k, err := mk()
			if err != nil {
				t.Fatalf("group %d form %d: %v", i, j, err)
			}
			if j == 0 {
				first = k
			} else if !k.Equal(first) {
				t.Errorf("group %d form %d: %q differs from %q", i, j, k.Text(), first.Text())
			}
			if p, err := ParseCanonicalKey(k.Canonical()); err != nil || !p.Equal(k) {
				t.Errorf("group %d form %d: canonical round trip: %v", i, j, err)
			}
		}
	}
	k, _ := ParseIPKey("10.0.0.1")
	if k.String() != "pda.Key{type=1, len=4}" || k.Text() != "10.0.0.1" {
		t.Errorf("String must not print the key: %s", k)
	}
	for _, bad := range []func() (Key, error){
		func() (Key, error) { return ParseIPKey("10.0.0.256") },
		func() (Key, error) { return ParseIPKey("fe80::1%eth0") },
		func() (Key, error) { return IPKeyFromBytes([]byte{1, 2, 3}) },
		func() (Key, error) { return DomainKey("a..b") },
		func() (Key, error) { return URLKey("https://user:pw@example.com/") },
		func() (Key, error) { return URLKey("/relative") },
		func() (Key, error) { return URLKey("http://example.com/%zz") },
		func() (Key, error) { return StringKey("\xff") },
	} {
		if _, err := bad(); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("accepted an invalid key: %v", err)
		}
	}
	// Non-canonical encodings of valid keys are rejected by the oracle-side parser.
	for _, b := range [][]byte{
		{1, 0, 4, 10, 0, 0}, // truncated
		{2, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}, // mapped IPv4 as IPv6
		append([]byte{3, 0, 11}, "Example.COM"...),                        // upper case domain
		append([]byte{4, 0, 18}, "http://example.com"...),                 // missing "/"
		{9, 0, 0},
	} {
		if _, err := ParseCanonicalKey(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("accepted non-canonical %x", b)
		}
	}
}
