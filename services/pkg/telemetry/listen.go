package telemetry

import (
	"context"
	"fmt"
	"net"
	"syscall"
)

// Listen opens a TCP listener on addr. With reusePort the socket sets
// SO_REUSEPORT before it binds, so several processes on one node (gateway
// replicas with hostNetwork) can listen on the same address and the kernel
// spreads new connections across them.
func Listen(ctx context.Context, addr string, reusePort bool) (net.Listener, error) {
	var lc net.ListenConfig
	if reusePort {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) { serr = setReusePort(fd) }); err != nil {
				return err
			}
			if serr != nil {
				return fmt.Errorf("set SO_REUSEPORT: %w", serr)
			}
			return nil
		}
	}
	return lc.Listen(ctx, "tcp", addr)
}
