package manifests

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/obscura-iot/obscura/services/testenv"
)

// TestChartNATSClusterRuns renders the chart's NATS as a three-node cluster on the node's network
// (values-local.yaml, nats.cluster.replicas 3, nats.jetstream.replicas 3) and runs the three
// rendered configurations, with the chart's bootstrap accounts file, as real nats-server
// processes on 127.0.0.1: they form one JetStream cluster through the rendered routes (and
// their route password), every node takes its own ports (base + ordinal), the operator's
// --nats-url lists every node and a client of it reaches the cluster, an R3 stream gets three
// peers, MQTT accepts a session on every node (a cluster's MQTT needs server_name and
// replicated session streams), and with one node killed the stream still takes and keeps
// messages.
func TestChartNATSClusterRuns(t *testing.T) {
	bin, err := testenv.Bin("nats-server")
	if err != nil {
		t.Fatal(err)
	}
	client, mqtt, monitor, route := basePorts(t, 3), basePorts(t, 3), basePorts(t, 3), basePorts(t, 3)
	_, objs := renderChart(t, chartCase{namespace: localNamespace, args: []string{"-f", "charts/obscura/values-local.yaml",
		"--set", "nats.cluster.replicas=3", "--set", "nats.jetstream.replicas=3",
		"--set", fmt.Sprintf("nats.ports.client=%d,nats.ports.mqtt=%d,nats.ports.monitor=%d,nats.cluster.port=%d", client, mqtt, monitor, route)}})
	var confs map[string]any
	var accounts, natsURL string
	for _, u := range objs {
		switch u.GetKind() + "/" + u.GetName() {
		case "Secret/obscura-nats-config":
			confs, _, _ = unstructured.NestedMap(u.Object, "stringData")
		case "Secret/obscura-nats-accounts":
			accounts, _, _ = unstructured.NestedString(u.Object, "stringData", "accounts.conf")
		case "StatefulSet/obscura-nats":
			var s appsv1.StatefulSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &s); err != nil {
				t.Fatal(err)
			}
			if *s.Spec.Replicas != 3 || s.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
				t.Errorf("StatefulSet: %d replicas, %q; want 3, Parallel", *s.Spec.Replicas, s.Spec.PodManagementPolicy)
			}
			for _, c := range s.Spec.Template.Spec.Containers {
				if len(c.Ports) > 0 {
					t.Errorf("container %s declares ports %v on the node's network (each a host port, the same for every pod)", c.Name, c.Ports)
				}
			}
		case "Deployment/obscura-operator":
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
				t.Fatal(err)
			}
			for _, a := range d.Spec.Template.Spec.Containers[0].Args {
				if v, ok := strings.CutPrefix(a, "--nats-url="); ok {
					natsURL = v
				}
			}
		}
	}
	if want := fmt.Sprintf("nats://127.0.0.1:%d,nats://127.0.0.1:%d,nats://127.0.0.1:%d", client, client+1, client+2); natsURL != want {
		t.Fatalf("operator --nats-url=%q; want every node: %q", natsURL, want)
	}
	if len(confs) != 1+2*3 || accounts == "" {
		t.Fatalf("config Secret keys %d (want route-password and <pod>.conf, <pod>.addr for 3 pods), accounts %d bytes", len(confs), len(accounts))
	}

	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "accounts"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "accounts", "accounts.conf"), []byte(accounts), 0o600); err != nil {
		t.Fatal(err)
	}
	procs := make([]*exec.Cmd, 3)
	start := func(i int) {
		pod := fmt.Sprintf("obscura-nats-%d", i)
		conf, _ := confs[pod+".conf"].(string)
		if addr, _ := confs[pod+".addr"].(string); strings.TrimSpace(addr) != fmt.Sprintf("health=127.0.0.1:%d", monitor+i) {
			t.Fatalf("%s.addr = %q; want its monitor port %d", pod, addr, monitor+i)
		}
		for _, want := range []string{fmt.Sprintf("server_name: %q", pod), fmt.Sprintf("port: %d", mqtt+i), "stream_replicas: 3", "password:"} {
			if !strings.Contains(conf, want) {
				t.Fatalf("%s.conf lacks %q:\n%s", pod, want, conf)
			}
		}
		store := filepath.Join(dir, pod, "jetstream")
		conf = strings.ReplaceAll(conf, `"/data/jetstream"`, strconv.Quote(store))
		path := filepath.Join(dir, pod+".conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		log, err := os.Create(filepath.Join(dir, pod+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-c", path)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = cmd
	}
	t.Cleanup(func() {
		for _, p := range procs {
			if p != nil && p.ProcessState == nil {
				_ = p.Process.Kill()
				_ = p.Wait()
			}
		}
	})
	logs := func() string {
		var b strings.Builder
		for i := range 3 {
			l, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("obscura-nats-%d.log", i)))
			fmt.Fprintf(&b, "--- obscura-nats-%d\n%s", i, tail(string(l), 3000))
		}
		return b.String()
	}
	for i := range 3 {
		start(i)
	}
	healthy := func(i int) error {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", monitor+i))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("node %d: /healthz %d", i, resp.StatusCode)
		}
		return nil
	}
	testenv.Eventually(t, 60*time.Second, "three rendered nodes form a healthy JetStream cluster", func() error {
		for i := range 3 {
			if err := healthy(i); err != nil {
				return err
			}
		}
		return nil
	})
	if t.Failed() {
		t.Fatal(logs())
	}

	// The operator's user, through the URL the operator gets.
	pw := operatorPassword(t, objs)
	nc, err := nats.Connect(natsURL, nats.UserInfo("obscura-operator", pw), nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
	if err != nil {
		t.Fatalf("connect %s: %v\n%s", natsURL, err, logs())
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3})
	if err != nil {
		t.Fatalf("R3 stream: %v\n%s", err, logs())
	}
	si, err := s.Info(ctx)
	if err != nil || si.Cluster == nil || len(si.Cluster.Replicas) != 2 {
		t.Fatalf("R3 stream: %v, cluster %+v; want a leader and two replicas", err, si)
	}
	// A node's first MQTT session creates the account's MQTT streams with three replicas and
	// persists the session through their leader; on a loaded machine that can outlast the
	// server's 5 s request timeout, and the server closes the connection — a device reconnects,
	// so does the test (make test saw "unable to persist session dev-2: timeout after 5s").
	for i := range 3 {
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
			err := mqttConnect(fmt.Sprintf("127.0.0.1:%d", mqtt+i), fmt.Sprintf("dev-%d", i), "obscura-operator", pw)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("MQTT on node %d: %v\n%s", i, err, logs())
			}
			t.Logf("MQTT on node %d: %v; reconnecting", i, err)
		}
	}
	for n := range 10 {
		if _, err := js.Publish(ctx, "r3.x", []byte(strconv.Itoa(n))); err != nil {
			t.Fatal(err)
		}
	}
	// One node lost (the stream's leader, the worst case): the stream elects another and keeps
	// every acknowledged message; new messages are acknowledged.
	var leader int
	if _, err := fmt.Sscanf(si.Cluster.Leader, "obscura-nats-%d", &leader); err != nil {
		t.Fatalf("leader %q: %v", si.Cluster.Leader, err)
	}
	_ = procs[leader].Process.Kill()
	_ = procs[leader].Wait()
	testenv.Eventually(t, 60*time.Second, "10 more messages acknowledged with node "+si.Cluster.Leader+" down", func() error {
		for n := 10; n < 20; n++ {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := js.Publish(pctx, "r3.x", []byte(strconv.Itoa(n)), jetstream.WithMsgID(strconv.Itoa(n)))
			cancel()
			if err != nil {
				return err
			}
		}
		return nil
	})
	start(leader)
	testenv.Eventually(t, 60*time.Second, "the restarted node healthy (caught up)", func() error { return healthy(leader) })
	si, err = s.Info(ctx)
	if err != nil || si.State.Msgs != 20 {
		t.Fatalf("after the restart: %v, %d messages; want 20", err, si.State.Msgs)
	}
	// nats-server redacts the routes' credentials in what it logs.
	routePW, _ := confs["route-password"].(string)
	if len(routePW) < 16 {
		t.Fatalf("route-password %q: want a generated password", routePW)
	}
	for i := range 3 {
		l, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("obscura-nats-%d.log", i)))
		if err != nil || len(l) == 0 {
			t.Fatalf("log of obscura-nats-%d: %v (%d bytes)", i, err, len(l))
		}
		if strings.Contains(string(l), routePW) {
			t.Errorf("the route password appears in obscura-nats-%d's log", i)
		}
	}
}

// basePorts returns a port p with p … p+n-1 all free a moment ago (node i of a cluster on the
// node's network takes base + i).
func basePorts(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		p, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ok := p+n < 65536
		for i := 1; ok && i < n; i++ {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+i)))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return p
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}

// operatorPassword reads the operator's INTEGRATOR password from the rendered Secret.
func operatorPassword(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	for _, u := range objs {
		if u.GetKind()+"/"+u.GetName() == "Secret/obscura-nats-operator" {
			v, _, _ := unstructured.NestedString(u.Object, "data", "operator")
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
	}
	t.Fatal("Secret/obscura-nats-operator not rendered")
	return ""
}

// mqttConnect sends an MQTT 3.1.1 CONNECT (clean session, user and password) and wants a
// CONNACK that accepts it: nats-server answers only once the account's session stream exists.
func mqttConnect(addr, clientID, user, password string) error {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	str := func(s string) []byte { return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...) }
	body := append(str("MQTT"), 4, 0xC2, 0, 60) // level 4, user+password+clean session, keep-alive 60 s
	body = append(body, str(clientID)...)
	body = append(body, str(user)...)
	body = append(body, str(password)...)
	if len(body) > 127 {
		return fmt.Errorf("CONNECT of %d bytes needs a longer length encoding", len(body))
	}
	if _, err := conn.Write(append([]byte{0x10, byte(len(body))}, body...)); err != nil {
		return err
	}
	ack := make([]byte, 4)
	if _, err := io.ReadFull(conn, ack); err != nil {
		return fmt.Errorf("no CONNACK: %w", err)
	}
	if ack[0] != 0x20 || ack[3] != 0 {
		return fmt.Errorf("CONNACK % x: refused", ack)
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
