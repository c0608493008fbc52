package sim

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestDemo: the device's HTTP GET crosses DI → CI → SI and the reply comes back; the wire
// shows none of the header fields the endpoints used, and each endpoint sees the other's
// real header.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	s, err := RunDemo(context.Background(), DefaultDemoOptions(), &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if s.Packets != 5 || !s.WireClean || !s.ServerSawDevice || s.Response != "HTTP/1.1 200 OK" {
		t.Fatalf("summary %+v\n%s", s, out.String())
	}
	if !strings.Contains(out.String(), "198.18.0.1:443") {
		t.Fatalf("the wire column does not show the unified port:\n%s", out.String())
	}
	t.Log("\n" + out.String())
}
