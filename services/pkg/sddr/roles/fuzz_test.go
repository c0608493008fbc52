package roles

import (
	"net/http"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/sddr/client"
)

// FuzzDecodePut: the POST decoder (path and body) never panics, and what it accepts is a
// mailbox address and a body of a sealed message's shape.
func FuzzDecodePut(f *testing.F) {
	f.Add("/v1/mailboxes/"+client.Address{}.String(), make([]byte, client.Overhead+client.PadBlock))
	f.Add("/v1/mailboxes/xyz", []byte{1})
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		req, reason, err := DecodePut(path, body)
		if err != nil {
			if reason == "" {
				t.Fatal("rejection without a reason")
			}
			return
		}
		if req.Address.String() != path[len("/v1/mailboxes/"):] || len(body) > client.MaxSealed || body[0] != client.Version {
			t.Fatalf("accepted %q (%d bytes)", path, len(body))
		}
	})
}

// FuzzDecodeGet: the GET decoder (the path) never panics and round-trips what it accepts.
func FuzzDecodeGet(f *testing.F) {
	f.Add("/v1/mailboxes/" + client.Address{}.String())
	f.Add("/v1/mailboxes/")
	f.Fuzz(func(t *testing.T, path string) {
		a, err := DecodeAddress(path)
		if err == nil && "/v1/mailboxes/"+a.String() != path {
			t.Fatalf("accepted %q as %s", path, a)
		}
	})
}

// FuzzClientKey: the client-identifying header decoder never panics; tokens map to 16 bytes.
func FuzzClientKey(f *testing.F) {
	f.Add("Bearer abc")
	f.Add("")
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{}
		h.Set("Authorization", v)
		if k, ok := ClientKey(h); ok && len(k) != 16 {
			t.Fatalf("key of %d bytes", len(k))
		}
	})
}
