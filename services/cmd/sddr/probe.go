package main

import "github.com/obscura-iot/obscura/services/pkg/daemon"

func init() {
	register("probe", daemon.RunProbe, "Kubernetes exec probe: GET <path> on the address in OBSCURA_ADDR_FILE (hostNetwork)")
}
