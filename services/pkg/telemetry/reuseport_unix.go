//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package telemetry

import "golang.org/x/sys/unix"

func setReusePort(fd uintptr) error {
	return unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
}
