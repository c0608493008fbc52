package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// directResponses has two listeners, each answering every request itself.
const directResponses = `
admin:
  address: {socket_address: {address: "{{.Host}}", port_value: {{.AdminPort}}}}
static_resources:
  listeners:
{{- range $i, $port := .ListenerPorts}}
  - name: edge{{$i}}
    address: {socket_address: {address: "{{$.Host}}", port_value: {{$port}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: edge{{$i}}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                direct_response: {status: 200, body: {inline_string: "obscura edge {{$i}}"}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
{{- end}}
`

func TestEnvoy(t *testing.T) {
	t.Parallel()
	e := StartEnvoy(t, directResponses, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	if code, body, err := adminGet(ctx, e.AdminAddr(), "/ready"); err != nil || code != 200 || strings.TrimSpace(string(body)) != "LIVE" {
		t.Fatalf("admin /ready = %d %q, %v; want 200 LIVE", code, body, err)
	}
	for i := range 2 {
		code, body, err := adminGet(ctx, e.ListenerAddr(i), "/mohito/round")
		if want := fmt.Sprintf("obscura edge %d", i); err != nil || code != 200 || string(body) != want {
			t.Errorf("GET via listener %d (%s) = %d %q, %v; want 200 %q", i, e.ListenerAddr(i), code, body, err, want)
		}
	}
}

func TestEnvoyStartFailureShowsLog(t *testing.T) {
	t.Parallel()
	const bad = directResponses + `
  clusters:
  - name: broken
    type: NO_SUCH_TYPE
`
	msg := startFailure(t, func(tb testing.TB) { StartEnvoy(tb, bad, 1) })
	t.Log(msg)
	requireContains(t, msg, "envoy", "is not LIVE", "exited", "NO_SUCH_TYPE")
}
