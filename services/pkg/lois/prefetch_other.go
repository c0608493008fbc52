//go:build !amd64

package lois

func prefetch(addr uintptr) {}
