//go:build !linux

package mohito

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
