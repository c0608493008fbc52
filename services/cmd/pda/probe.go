package main

import (
	"fmt"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// runProbe is `pda probe [flags] <path>`, the Kubernetes exec probe of a
// role whose observability server may listen on port 0 (hostNetwork): it
// reads the health= line of the address file (OBSCURA_PDA_ADDR_FILE or
// OBSCURA_ADDR_FILE, from the container's environment) — or, without one,
// takes --metrics-addr, which also serves /healthz and /readyz — and GETs
// path: exit 0 on 200, 1 otherwise with one line of reason.
func runProbe(args []string) error {
	f := newFlags("probe")
	var addrFile, metricsAddr string
	var timeout time.Duration
	f.String(&addrFile, "addr-file", "", "address file the role writes (health= line)", "OBSCURA_PDA_ADDR_FILE", "OBSCURA_ADDR_FILE")
	f.String(&metricsAddr, "metrics-addr", ":9090", "the role's observability address when there is no address file")
	f.Duration(&timeout, "timeout", telemetry.ProbeTimeout, "request timeout", "OBSCURA_PDA_PROBE_TIMEOUT")
	if err := f.Parse(args); err != nil {
		return configErr(err)
	}
	if len(f.Args()) != 1 {
		return configErr(fmt.Errorf("want exactly one path (/healthz or /readyz), got %q", f.Args()))
	}
	return telemetry.ProbeRole(addrFile, metricsAddr, f.Args()[0], timeout)
}
