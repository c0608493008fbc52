package main

import (
	"fmt"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// runProbe is `mohito probe [flags] <path>`: a Kubernetes exec probe for a
// role whose health server may listen on port 0 (hostNetwork). It reads the
// health= line of the role's address file (OBSCURA_ADDR_FILE, inherited from
// the container's environment) — or, without one, takes --health-addr — and
// does GET http://<addr><path>: exit 0 on 200, 1 otherwise with one line of
// reason on stderr.
func runProbe(args []string) error {
	f := newFlags("probe")
	var addrFile, healthAddr string
	var timeout time.Duration
	f.String(&addrFile, "addr-file", "", "address file the role writes (health= line)")
	f.String(&healthAddr, "health-addr", ":8081", "health address when there is no address file")
	f.Duration(&timeout, "timeout", telemetry.ProbeTimeout, "request timeout", "OBSCURA_PROBE_TIMEOUT")
	if err := f.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errConfig, err)
	}
	if len(f.Args()) != 1 {
		return fmt.Errorf("%w: want exactly one path (/healthz or /readyz), got %q", errConfig, f.Args())
	}
	return telemetry.ProbeRole(addrFile, healthAddr, f.Args()[0], timeout)
}
