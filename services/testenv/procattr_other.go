//go:build !linux

package testenv

import "syscall"

// childAttr has no parent-death signal outside Linux; servers are stopped by t.Cleanup only.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
