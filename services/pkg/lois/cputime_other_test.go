//go:build !linux

package lois

import "testing"

type cpuClock struct{}

func startCPU() *cpuClock             { return &cpuClock{} }
func (*cpuClock) pause()              {}
func (*cpuClock) resume()             {}
func (*cpuClock) report(_ *testing.B) {}
