package daemon

import (
	"fmt"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// RunProbe is `<binary> probe [flags] <path>`, the Kubernetes exec probe of a role whose
// health server may listen on port 0 (hostNetwork): it reads the health= line of the role's
// address file (OBSCURA_ADDR_FILE, inherited from the container's environment) — or,
// without one, takes --health-addr — and GETs path: exit 0 on 200, 1 otherwise with one line
// of reason on stderr.
func RunProbe(args []string) error {
	f := NewFlags("probe")
	var addrFile, healthAddr string
	var timeout time.Duration
	f.String(&addrFile, "addr-file", "", "address file the role writes (health= line)")
	f.String(&healthAddr, "health-addr", DefaultHealthAddr, "health address when there is no address file")
	f.Duration(&timeout, "timeout", telemetry.ProbeTimeout, "request timeout", "OBSCURA_PROBE_TIMEOUT")
	if err := f.Parse(args); err != nil {
		return ConfigError(err)
	}
	if len(f.Args()) != 1 {
		return ConfigError(fmt.Errorf("want exactly one path (/healthz or /readyz), got %q", f.Args()))
	}
	return telemetry.ProbeRole(addrFile, healthAddr, f.Args()[0], timeout)
}
