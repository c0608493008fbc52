package mohito

import "syscall"

// childAttr kills a role process when the test binary dies without cleanup.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
