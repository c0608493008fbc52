package pda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
	"golang.org/x/text/unicode/norm"
)

// KeyType is the type byte of a canonical key (spec U6).
type KeyType uint8

const (
	KeyIPv4   KeyType = 1 // 4 bytes
	KeyIPv6   KeyType = 2 // 16 bytes, never an IPv4-mapped address
	KeyDomain KeyType = 3 // lowercased A-label, no trailing dot
	KeyURL    KeyType = 4 // absolute URL normalised per RFC 3986 §6.2.2–6.2.3
	KeyOpaque KeyType = 5 // arbitrary bytes; free strings are NFC-normalised UTF-8
)

const (
	// canonHeaderSize is type (1) + length (2) in canon(k).
	canonHeaderSize = 3
	// MaxKeyBytes bounds a key's payload so canon(k) always fits the 2-byte length prefix of
	// the E_PRX padding (spec §3.9.3).
	MaxKeyBytes  = 1<<16 - 1 - canonHeaderSize - 2
	maxDomainLen = 253
)

// Key is a canonicalised key: the only form the protocol ever hashes or encrypts, so that
// "10.0.0.1", the bytes 0a000001 and "::ffff:10.0.0.1" are one key (spec U6, T-FUN-10).
// Its String method deliberately prints only the type and length, so a key that ends up
// in a log line leaks nothing (STYLE: logs never contain keys).
type Key struct {
	typ KeyType
	b   []byte
}

// Type returns the key's type byte.
func (k Key) Type() KeyType { return k.typ }

// Bytes returns a copy of the key's payload (without type and length).
func (k Key) Bytes() []byte { return bytes.Clone(k.b) }

// Canonical returns canon(k) = I2OSP(type,1) || I2OSP(len,2) || bytes.
func (k Key) Canonical() []byte { return k.appendCanonical(nil) }

func (k Key) appendCanonical(dst []byte) []byte {
	dst = append(dst, byte(k.typ))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(k.b)))
	return append(dst, k.b...)
}

// Equal reports whether two keys are the same canonical key.
func (k Key) Equal(o Key) bool { return k.typ == o.typ && bytes.Equal(k.b, o.b) }

// IsZero reports whether k is the zero Key (no type).
func (k Key) IsZero() bool { return k.typ == 0 }

// String never prints the key itself.
func (k Key) String() string { return fmt.Sprintf("pda.Key{type=%d, len=%d}", k.typ, len(k.b)) }

// Text returns a human-readable form for publication of revealed keys (dotted or colon IP,
// domain, URL, or the opaque bytes as a Go-quoted string).
func (k Key) Text() string {
	switch k.typ {
	case KeyIPv4:
		return netip.AddrFrom4([4]byte(k.b)).String()
	case KeyIPv6:
		return netip.AddrFrom16([16]byte(k.b)).String()
	case KeyDomain, KeyURL:
		return string(k.b)
	}
	return strconv.Quote(string(k.b))
}

// IPKey canonicalises an address: IPv4 and IPv4-mapped IPv6 become KeyIPv4, other IPv6
// addresses KeyIPv6. Zones are rejected: they are local to a host and never aggregate.
func IPKey(a netip.Addr) (Key, error) {
	if !a.IsValid() || a.Zone() != "" {
		return Key{}, fmt.Errorf("%w: invalid or zoned address", ErrInvalidKey)
	}
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		return Key{KeyIPv4, b[:]}, nil
	}
	b := a.As16()
	return Key{KeyIPv6, b[:]}, nil
}

// ParseIPKey parses a textual IPv4 or IPv6 address ("10.0.0.1", "::ffff:10.0.0.1").
func ParseIPKey(s string) (Key, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return Key{}, fmt.Errorf("%w: %v", ErrInvalidKey, err)
	}
	return IPKey(a)
}

// IPKeyFromBytes canonicalises a 4- or 16-byte binary address.
func IPKeyFromBytes(b []byte) (Key, error) {
	a, ok := netip.AddrFromSlice(b)
	if !ok {
		return Key{}, fmt.Errorf("%w: address of %d bytes", ErrInvalidKey, len(b))
	}
	return IPKey(a)
}

// DomainKey canonicalises a DNS name to its lowercased A-label form (UTS #46 lookup
// profile) without the trailing dot.
func DomainKey(s string) (Key, error) {
	s = strings.TrimSuffix(s, ".")
	if !utf8.ValidString(s) {
		return Key{}, fmt.Errorf("%w: domain name is not UTF-8", ErrInvalidKey)
	}
	a, err := idna.Lookup.ToASCII(s)
	if err != nil || a == "" || len(a) > maxDomainLen {
		return Key{}, fmt.Errorf("%w: domain name", ErrInvalidKey)
	}
	a = strings.ToLower(a)
	if strings.HasPrefix(a, ".") || strings.HasSuffix(a, ".") || strings.Contains(a, "..") {
		return Key{}, fmt.Errorf("%w: empty domain label", ErrInvalidKey)
	}
	// The canonical form must be a fixed point, or the oracle's ParseCanonicalKey would
	// reject a key participants produced.
	if again, err := idna.Lookup.ToASCII(a); err != nil || again != a {
		return Key{}, fmt.Errorf("%w: domain name has no stable A-label", ErrInvalidKey)
	}
	return Key{KeyDomain, []byte(a)}, nil
}

// OpaqueKey wraps arbitrary bytes.
func OpaqueKey(b []byte) (Key, error) {
	if len(b) > MaxKeyBytes {
		return Key{}, fmt.Errorf("%w: %d bytes", ErrKeyTooLong, len(b))
	}
	return Key{KeyOpaque, bytes.Clone(b)}, nil
}

// StringKey canonicalises a free-form string: valid UTF-8 in Unicode normalisation form C,
// carried as an opaque key, so visually identical strings typed on different systems agree.
func StringKey(s string) (Key, error) {
	if !utf8.ValidString(s) {
		return Key{}, fmt.Errorf("%w: string is not UTF-8", ErrInvalidKey)
	}
	return OpaqueKey([]byte(norm.NFC.String(s)))
}

var defaultPorts = map[string]string{"http": "80", "https": "443", "ws": "80", "wss": "443", "ftp": "21"}

// URLKey normalises an absolute URL per RFC 3986 §6.2.2 (case, percent-encoding and
// dot-segment normalisation) and §6.2.3 (default port, empty path as "/"), with the host
// canonicalised like DomainKey or IPKey. [R] The fragment is dropped (it never reaches the
// server, so it does not name a different resource) and URLs with user information are
// rejected (they may carry credentials, which must never become a key).
func URLKey(s string) (Key, error) {
	c, err := canonicalURL(s)
	if err != nil {
		return Key{}, fmt.Errorf("%w: url: %v", ErrInvalidKey, err)
	}
	if len(c) > MaxKeyBytes {
		return Key{}, fmt.Errorf("%w: url of %d bytes", ErrKeyTooLong, len(c))
	}
	return Key{KeyURL, []byte(c)}, nil
}

func canonicalURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if u.Scheme == "" || u.Opaque != "" || u.Host == "" {
		return "", fmt.Errorf("not an absolute hierarchical URL")
	}
	if u.User != nil {
		return "", fmt.Errorf("user information not allowed")
	}
	scheme := strings.ToLower(u.Scheme)
	host, port := u.Hostname(), u.Port()
	var b strings.Builder
	b.WriteString(scheme)
	b.WriteString("://")
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", fmt.Errorf("zoned address")
		}
		a = a.Unmap()
		if a.Is4() {
			b.WriteString(a.String())
		} else {
			b.WriteString("[" + a.String() + "]")
		}
	} else {
		if strings.ContainsAny(host, "[]%") {
			return "", fmt.Errorf("bad host")
		}
		d, err := DomainKey(host)
		if err != nil {
			return "", err
		}
		b.Write(d.b)
	}
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return "", fmt.Errorf("bad port")
		}
		port = strconv.FormatUint(n, 10)
		if port != defaultPorts[scheme] {
			b.WriteString(":" + port)
		}
	}
	path, err := normalizePercent(u.EscapedPath())
	if err != nil {
		return "", err
	}
	path = removeDotSegments(path)
	if path == "" {
		path = "/"
	}
	b.WriteString(path)
	if u.RawQuery != "" {
		q, err := normalizePercent(u.RawQuery)
		if err != nil {
			return "", err
		}
		b.WriteString("?" + q)
	}
	return b.String(), nil
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// mustEscape reports bytes that may not appear raw in a path or query (RFC 3986 §2).
func mustEscape(c byte) bool {
	return c <= 0x20 || c >= 0x7f || strings.IndexByte("\"<>\\^`{|}#", c) >= 0
}

const upperHex = "0123456789ABCDEF"

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// normalizePercent decodes percent-encoded unreserved characters, upper-cases the hex of
// the remaining triplets and escapes raw bytes that are not allowed (RFC 3986 §6.2.2.2).
func normalizePercent(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' {
			if i+2 >= len(s) {
				return "", fmt.Errorf("truncated percent-encoding")
			}
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if !ok1 || !ok2 {
				return "", fmt.Errorf("bad percent-encoding")
			}
			v := hi<<4 | lo
			if isUnreserved(v) {
				b.WriteByte(v)
			} else {
				b.WriteByte('%')
				b.WriteByte(upperHex[v>>4])
				b.WriteByte(upperHex[v&15])
			}
			i += 2
			continue
		}
		if mustEscape(c) {
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

// removeDotSegments is RFC 3986 §5.2.4.
func removeDotSegments(in string) string {
	var out []string
	for len(in) > 0 {
		switch {
		case strings.HasPrefix(in, "../"):
			in = in[3:]
		case strings.HasPrefix(in, "./"):
			in = in[2:]
		case strings.HasPrefix(in, "/./"):
			in = in[2:]
		case in == "/.":
			in = "/"
		case strings.HasPrefix(in, "/../"):
			in = in[3:]
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		case in == "/..":
			in = "/"
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		case in == "." || in == "..":
			in = ""
		default:
			j := strings.IndexByte(in[1:], '/')
			if j < 0 {
				out = append(out, in)
				in = ""
			} else {
				out = append(out, in[:j+1])
				in = in[j+1:]
			}
		}
	}
	return strings.Join(out, "")
}

// ParseCanonicalKey parses canon(k) bytes (for example a key the oracle decrypted) and
// checks that they are in canonical form for their type, so two encodings of one key can
// never both be accepted.
func ParseCanonicalKey(b []byte) (Key, error) {
	if len(b) < canonHeaderSize {
		return Key{}, fmt.Errorf("%w: canonical key of %d bytes", ErrMalformed, len(b))
	}
	typ := KeyType(b[0])
	n := int(binary.BigEndian.Uint16(b[1:3]))
	if len(b) != canonHeaderSize+n {
		return Key{}, fmt.Errorf("%w: canonical key length", ErrMalformed)
	}
	p := b[canonHeaderSize:]
	var k Key
	var err error
	switch typ {
	case KeyIPv4:
		if n != 4 {
			return Key{}, fmt.Errorf("%w: IPv4 key of %d bytes", ErrMalformed, n)
		}
		k, err = IPKeyFromBytes(p)
	case KeyIPv6:
		if n != 16 {
			return Key{}, fmt.Errorf("%w: IPv6 key of %d bytes", ErrMalformed, n)
		}
		k, err = IPKeyFromBytes(p)
	case KeyDomain:
		k, err = DomainKey(string(p))
	case KeyURL:
		k, err = URLKey(string(p))
	case KeyOpaque:
		k, err = OpaqueKey(p)
	default:
		return Key{}, fmt.Errorf("%w: key type %d", ErrMalformed, typ)
	}
	if err != nil {
		return Key{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if k.typ != typ || !bytes.Equal(k.b, p) {
		return Key{}, fmt.Errorf("%w: key not in canonical form", ErrMalformed)
	}
	return k, nil
}
