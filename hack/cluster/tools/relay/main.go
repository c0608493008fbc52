// Command relay forwards TCP connections from one address to another. The local cluster's
// multi-node mode (docs/cluster.md "Multi-node") runs one on the host side of the node bridge,
// -listen 10.99.0.1:6443 -to 127.0.0.1:6443, so that the kubelets, kube-proxies and pods in the
// node namespaces reach the API server, which listens on loopback only.
//
//	relay -listen 10.99.0.1:6443 -to 127.0.0.1:6443 [-tag NAME]
//
// -tag is ignored; the cluster script passes its state directory there so that it can recognise
// its own process by its command line.
package main

import (
	"flag"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	listen := flag.String("listen", "", "address to listen on")
	to := flag.String("to", "", "address to forward to")
	flag.String("tag", "", "ignored (identifies the process)")
	flag.Parse()
	if *listen == "" || *to == "" {
		flag.Usage()
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("relay: %v", err)
	}
	log.Printf("relay: %s -> %s", *listen, *to)
	go func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		<-sigs
		ln.Close()
		os.Exit(0)
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatalf("relay: accept: %v", err)
		}
		go forward(c, *to)
	}
}

func forward(c net.Conn, to string) {
	defer c.Close()
	u, err := net.Dial("tcp", to)
	if err != nil {
		log.Printf("relay: %v", err)
		return
	}
	defer u.Close()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		io.Copy(dst, src) //nolint:errcheck // the other direction ends the pair
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite() //nolint:errcheck
		}
		done <- struct{}{}
	}
	go cp(u, c)
	go cp(c, u)
	<-done
	<-done
}
