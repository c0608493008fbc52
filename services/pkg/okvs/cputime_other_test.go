//go:build !linux

package okvs_test

import "testing"

type cpuClock struct{}

func startCPU() cpuClock                                     { return cpuClock{} }
func (cpuClock) report(b *testing.B, perOp int, unit string) {}
