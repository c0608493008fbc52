// Command netcheck is the local cluster's network probe (image localhost/obscura/netcheck:v1,
// docs/cluster.md "Multi-node"):
//
//	netcheck listen PORT...          accept TCP connections on every PORT, answer "ok\n", forever
//	netcheck dial HOST:PORT [SECS]   connect (timeout SECS, default 3); print "open" and exit 0 when
//	                                 the connection is accepted, else print "closed: <error>" and exit 1
//
// The policy matrix test (e2e/cluster/policy_matrix_test.go) runs listeners with the labels and
// ports of the chart's workloads and dials them from pods of the other trust domains.
package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: netcheck listen PORT... | dial HOST:PORT [SECS]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "listen":
		for _, p := range os.Args[2:] {
			ln, err := net.Listen("tcp", ":"+p)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			go serve(ln)
		}
		fmt.Println("listening")
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		<-sigs
	case "dial":
		secs := 3
		if len(os.Args) > 3 {
			n, err := strconv.Atoi(os.Args[3])
			if err != nil {
				fmt.Fprintln(os.Stderr, "SECS:", err)
				os.Exit(2)
			}
			secs = n
		}
		c, err := net.DialTimeout("tcp", os.Args[2], time.Duration(secs)*time.Second)
		if err != nil {
			fmt.Println("closed:", err)
			os.Exit(1)
		}
		c.Close()
		fmt.Println("open")
	default:
		fmt.Fprintln(os.Stderr, "usage: netcheck listen PORT... | dial HOST:PORT [SECS]")
		os.Exit(2)
	}
}

func serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Write([]byte("ok\n")) //nolint:errcheck
		c.Close()
	}
}
