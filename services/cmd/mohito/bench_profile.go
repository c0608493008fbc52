package main

import (
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

// A process started by `mohito bench --cpuprofile-dir` gets MOHITO_CPUPROFILE=<file>: it
// starts a CPU profile on SIGUSR1 (the start of the measured window) and writes it on
// SIGUSR2 (its end). Without the variable nothing listens for the signals.
func init() {
	path := os.Getenv("MOHITO_CPUPROFILE")
	if path == "" {
		return
	}
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		var f *os.File
		for s := range ch {
			switch {
			case s == syscall.SIGUSR1 && f == nil:
				var err error
				if f, err = os.Create(path); err == nil && pprof.StartCPUProfile(f) != nil {
					f.Close()
					f = nil
				}
			case s == syscall.SIGUSR2 && f != nil:
				pprof.StopCPUProfile()
				f.Close()
				f = nil
			}
		}
	}()
}
