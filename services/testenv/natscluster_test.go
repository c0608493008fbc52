package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestNATSClusterKillRestart: three nats-server processes form one JetStream cluster; an R3
// stream keeps every acknowledged message when its leader's process is killed (a new leader is
// elected and takes publishes), and the restarted node rejoins with the same name and catches
// up: every node holds every message.
func TestNATSClusterKillRestart(t *testing.T) {
	t.Parallel()
	c := StartNATSCluster(t, 3, "")
	js := c.JetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatalf("create R3 stream: %v", err)
	}
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			id := fmt.Sprintf("m%d", i)
			for {
				// One attempt at a time: a request sent to the node just killed gets no answer.
				pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := js.Publish(pctx, "r3.x", []byte(id), jetstream.WithMsgID(id))
				pcancel()
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("publish %s: %v\n%s", id, err, c.logs())
				}
				time.Sleep(50 * time.Millisecond) // an election in progress
			}
		}
	}
	publish(0, 50)
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		t.Fatalf("stream info: %+v, %v", info, err)
	}
	leader := c.Index(info.Cluster.Leader)
	if leader < 0 || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream cluster info %+v: want a leader among %s and two replicas", info.Cluster, c.URLs())
	}
	pid := c.Pid(leader)
	c.Kill(t, leader)
	if c.Pid(leader) != 0 {
		t.Fatal("a killed node still has a pid")
	}
	publish(50, 100)
	c.Restart(t, leader)
	if c.Pid(leader) == 0 || c.Pid(leader) == pid {
		t.Fatalf("restarted node pid %d (was %d)", c.Pid(leader), pid)
	}
	// The restarted node is back among the replicas, current, and the stream holds every message.
	Eventually(t, 30*time.Second, "the restarted node current with every message", func() error {
		si, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if si.State.Msgs != 100 {
			return fmt.Errorf("%d messages", si.State.Msgs)
		}
		if si.Cluster == nil || len(si.Cluster.Replicas) != 2 {
			return fmt.Errorf("cluster %+v", si.Cluster)
		}
		back := si.Cluster.Leader == c.ServerName(leader)
		for _, r := range si.Cluster.Replicas {
			if !r.Current {
				return fmt.Errorf("replica %s not current", r.Name)
			}
			back = back || r.Name == c.ServerName(leader)
		}
		if !back {
			return fmt.Errorf("%s is not among the stream's peers: %+v", c.ServerName(leader), si.Cluster)
		}
		return nil
	})
}
