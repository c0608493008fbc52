//go:build !linux

package lois

import "unsafe"

func adviseHuge(p unsafe.Pointer, size uintptr) {}
