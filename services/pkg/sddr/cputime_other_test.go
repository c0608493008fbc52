//go:build !linux

package sddr

import "testing"

type cpuClock struct{}

func startCPU() *cpuClock                        { return &cpuClock{} }
func (*cpuClock) report(*testing.B, int, string) {}
