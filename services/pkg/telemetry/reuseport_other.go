//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package telemetry

import "errors"

func setReusePort(uintptr) error { return errors.New("SO_REUSEPORT is not supported on this platform") }
