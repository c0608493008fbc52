// Package netns runs code inside a network namespace the test made (ip netns add), for the
// e2e tests that build their own namespaces (e2e/lois, the cluster's LOIS phase). Linux, root.
package netns

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs f on an OS thread moved into the named namespace: sockets f creates belong to it.
// The thread is moved back afterwards; if that fails it stays locked and exits with the
// goroutine. (A thread must not simply exit: children started from it by testenv die with
// it, through their parent-death signal.)
func Do(name string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(self)
		fd, err := unix.Open("/var/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		errc <- f()
		if unix.Setns(self, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	return <-errc
}
