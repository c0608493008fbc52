// Command pause is the pod sandbox ("pause") container of the local cluster: PID 1 of every pod's
// sandbox. It holds the pod's namespaces, reaps zombie children and exits on SIGTERM/SIGINT.
// Built statically (CGO_ENABLED=0) and packaged by mkimage, so no image is ever pulled.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		os.Stdout.WriteString("pause (obscura hack/cluster)\n")
		return
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
