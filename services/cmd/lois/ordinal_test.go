package main

import "testing"

// TestOrdinalPorts: with --ordinal-ports a StatefulSet replica's ordinal (the end of its
// --replica-name) moves its wire and metrics ports, so replicas on one host network do not
// collide; without the flag nothing moves, and a name without an ordinal is refused.
func TestOrdinalPorts(t *testing.T) {
	b := base{wireListen: "127.0.0.1:7400", metricsAddr: "127.0.0.1:8400", ordinalPorts: true}
	if err := b.applyOrdinal("edge-lois-ci-3"); err != nil {
		t.Fatal(err)
	}
	if b.wireListen != "127.0.0.1:7403" || b.metricsAddr != "127.0.0.1:8403" {
		t.Fatalf("wire %s metrics %s", b.wireListen, b.metricsAddr)
	}
	off := base{wireListen: "127.0.0.1:7400", metricsAddr: ":9090"}
	if err := off.applyOrdinal("edge-lois-ci-3"); err != nil || off.wireListen != "127.0.0.1:7400" || off.metricsAddr != ":9090" {
		t.Fatalf("without the flag: %v %s %s", err, off.wireListen, off.metricsAddr)
	}
	for _, name := range []string{"ci", "edge-lois-ci-x", ""} {
		bad := base{wireListen: "127.0.0.1:7400", metricsAddr: "127.0.0.1:8400", ordinalPorts: true}
		if err := bad.applyOrdinal(name); err == nil {
			t.Errorf("--replica-name %q accepted", name)
		}
	}
	zero := base{wireListen: "127.0.0.1:7400", metricsAddr: "127.0.0.1:0", ordinalPorts: true}
	if err := zero.applyOrdinal("ci-1"); err == nil {
		t.Error("a dynamic metrics port accepted with --ordinal-ports")
	}
}

// TestSharedWireForServerReplicas: server interface replicas sharing serverWire
// (--wire-reuse-port) move only their metrics port with --ordinal-ports, and two of them bind
// the same wire address; without the flag the second bind is refused.
func TestSharedWireForServerReplicas(t *testing.T) {
	b := base{wireListen: "127.0.0.1:7402", metricsAddr: "127.0.0.1:8402", ordinalPorts: true, wireReusePort: true}
	if err := b.applyOrdinal("si-8080-2"); err != nil {
		t.Fatal(err)
	}
	if b.wireListen != "127.0.0.1:7402" || b.metricsAddr != "127.0.0.1:8404" {
		t.Fatalf("wire %s metrics %s", b.wireListen, b.metricsAddr)
	}
	a, err := listenWireShared("127.0.0.1:0", true)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	addr := a.LocalAddr().String()
	c, err := listenWireShared(addr, true)
	if err != nil {
		t.Fatalf("a second replica could not share %s: %v", addr, err)
	}
	c.Close()
	if d, err := listenWire(addr); err == nil {
		d.Close()
		t.Errorf("%s bound twice without SO_REUSEPORT", addr)
	}
}
