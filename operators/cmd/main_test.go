package main

import (
	"strings"
	"testing"
	"time"
)

// TestKeyActivationDelayFlag: --key-activation-delay is empty (the services' default), 0, or a
// duration of at least a second; anything else stops the operator at start with the flag named.
func TestKeyActivationDelayFlag(t *testing.T) {
	base := Config{MetricsAddr: ":8080", ProbeAddr: ":8081", ImagePullPolicy: "IfNotPresent"}
	if err := base.validate(); err != nil {
		t.Fatalf("the base configuration is invalid: %v", err)
	}
	for in, want := range map[string]time.Duration{"": 0, "0": 0, "45s": 45 * time.Second, "3m": 3 * time.Minute} {
		c := base
		c.KeyActivationDelay = in
		if err := c.validate(); err != nil {
			t.Errorf("%q: %v", in, err)
		}
		if d, _ := c.keyActivationDelay(); d != want {
			t.Errorf("%q parsed as %v, want %v", in, d, want)
		}
	}
	for _, in := range []string{"500ms", "soon", "-1m"} {
		c := base
		c.KeyActivationDelay = in
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), "--key-activation-delay") {
			t.Errorf("%q: %v, want an error naming --key-activation-delay", in, err)
		}
	}
}

// TestNATSReplicasFlag: --nats-replicas is empty or 1 (the services' default), 3 or 5; anything
// else stops the operator at start with the flag named.
func TestNATSReplicasFlag(t *testing.T) {
	base := Config{MetricsAddr: ":8080", ProbeAddr: ":8081", ImagePullPolicy: "IfNotPresent"}
	for in, want := range map[string]int{"": 1, "1": 1, "3": 3, "5": 5} {
		c := base
		c.NATSReplicas = in
		if err := c.validate(); err != nil {
			t.Errorf("%q: %v", in, err)
		}
		if n, _ := c.natsReplicas(); n != want {
			t.Errorf("%q parsed as %d, want %d", in, n, want)
		}
	}
	for _, in := range []string{"0", "2", "7", "three"} {
		c := base
		c.NATSReplicas = in
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), "--nats-replicas") {
			t.Errorf("%q: %v, want an error naming --nats-replicas", in, err)
		}
	}
}

// TestTopologySpreadFlag: --topology-spread is ScheduleAnyway (also when empty: the default),
// DoNotSchedule or none (no constraint); anything else stops the operator at start with the flag
// named.
func TestTopologySpreadFlag(t *testing.T) {
	base := Config{MetricsAddr: ":8080", ProbeAddr: ":8081", ImagePullPolicy: "IfNotPresent"}
	for in, want := range map[string]string{"": "ScheduleAnyway", "ScheduleAnyway": "ScheduleAnyway", "DoNotSchedule": "DoNotSchedule", "none": ""} {
		c := base
		c.TopologySpread = in
		if err := c.validate(); err != nil {
			t.Errorf("%q: %v", in, err)
		}
		if v, _ := c.topologySpread(); string(v) != want {
			t.Errorf("%q parsed as %q, want %q", in, v, want)
		}
	}
	for _, in := range []string{"scheduleanyway", "always", "None"} {
		c := base
		c.TopologySpread = in
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), "--topology-spread") {
			t.Errorf("%q: %v, want an error naming --topology-spread", in, err)
		}
	}
}
