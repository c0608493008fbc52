package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mohitocontract "github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/testenv"
)

// The chart's NATS as a JetStream cluster (issue 14 item 5): natsNodes nodes, every stream,
// bucket and object store (and the MQTT session streams) at natsNodes replicas. With
// values-local.yaml's hostNetwork node i listens on 127.0.0.1 at each base port + i.
const (
	natsNodes       = 3
	natsClientPort  = 4222
	natsMonitorPort = 8222
)

// natsCluster says whether this run installs the 3-node NATS: the full mode always; the smoke
// mode (CI) only with OBSCURA_E2E_CLUSTER_NATS3=1, since three JetStream nodes and R3 writes
// add start-up time and CPU to a run that must stay within its budget on two cores.
func natsCluster() bool {
	return os.Getenv("OBSCURA_E2E_CLUSTER_MODE") != "smoke" || os.Getenv("OBSCURA_E2E_CLUSTER_NATS3") == "1"
}

// natsClusterValues are the release's settings for the 3-node NATS (none for one node).
func natsClusterValues() []string {
	if !natsCluster() {
		return nil
	}
	return []string{"--set", fmt.Sprintf("nats.cluster.replicas=%d", natsNodes), "--set", fmt.Sprintf("nats.jetstream.replicas=%d", natsNodes)}
}

// natsURLs lists every node's client URL, as the operator's --nats-url does.
func natsURLs() string {
	urls := make([]string, natsNodes)
	for i := range urls {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", natsClientPort+i)
	}
	return strings.Join(urls, ",")
}

// natsNodeHealthy asks node i's monitor for the full /healthz: JetStream current with the meta
// leader and every stream and consumer placed on the node caught up.
func natsNodeHealthy(i int) error {
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", natsMonitorPort+i))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var h struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&h)
		return fmt.Errorf("node %d: /healthz %d %s", i, resp.StatusCode, h.Error)
	}
	return nil
}

// killNATSNodeUnderLoad crashes one NATS node (SIGKILL of its nats-server, then the pod
// force-deleted: a node lost with its JetStream store, which lives in the pod's emptyDir) while
// users send commands through the edge; the
// StatefulSet recreates it and it catches up from its peers. Asserted: the Round's streams,
// bucket and object store have three replicas; no acknowledged command is lost or duplicated;
// at most one round aborts; a re-sent command was re-sent exactly once; the new pod rejoins
// and its /healthz (streams caught up) passes.
//
// The node killed is the leader of the integrator's work stream, the stream every stage of a
// round goes through; never node 0, whose MQTT listener is the devices' (127.0.0.1:1883: on the
// node's network no Service spreads MQTT over the nodes, and a device has one address), so when
// node 0 leads, the leadership is stepped down first.
func (e *env) killNATSNodeUnderLoad() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	e.natsSettled()
	pw := string(e.secretData(e.ns, release+"-nats-operator", "operator"))
	e.secrets["NATS password of the operator"] = pw
	e.secrets["NATS route password"] = string(e.secretData(e.ns, release+"-nats-config", "route-password"))
	nc, err := nats.Connect(natsURLs(), nats.UserInfo("obscura-operator", pw), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		e.t.Fatalf("connect to the NATS cluster %s: %v", natsURLs(), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		e.t.Fatal(err)
	}
	info := func(name string) *jetstream.StreamInfo {
		var si *jetstream.StreamInfo
		testenv.Eventually(e.t, time.Minute, "info of stream "+name, func() error {
			ictx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			s, err := js.Stream(ictx, name)
			if err == nil {
				si, err = s.Info(ictx)
			}
			if err == nil && (si.Cluster == nil || si.Cluster.Leader == "") {
				err = fmt.Errorf("no leader")
			}
			return err
		})
		return si
	}
	for _, name := range []string{mohitocontract.StreamWork, "KV_" + mohitocontract.BucketRounds, "OBJ_" + mohitocontract.BucketOKVS} {
		if si := info(name); si.Config.Replicas != natsNodes || len(si.Cluster.Replicas) != natsNodes-1 {
			e.t.Fatalf("stream %s: %d replicas configured, %d peers besides leader %s; want %d in all", name, si.Config.Replicas, len(si.Cluster.Replicas), si.Cluster.Leader, natsNodes)
		}
	}
	node := func(server string) int {
		var i int
		if _, err := fmt.Sscanf(server, release+"-nats-%d", &i); err != nil {
			e.t.Fatalf("server %q is not a pod of %s-nats: %v", server, release, err)
		}
		return i
	}
	testenv.Eventually(e.t, time.Minute, "the work stream led by a node other than 0", func() error {
		leader := info(mohitocontract.StreamWork).Cluster.Leader
		if node(leader) != 0 {
			return nil
		}
		if _, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+mohitocontract.StreamWork, nil, 5*time.Second); err != nil {
			return fmt.Errorf("step down %s: %w", leader, err)
		}
		return fmt.Errorf("led by %s: stepped down", leader)
	})
	victim := node(info(mohitocontract.StreamWork).Cluster.Leader)
	pod := fmt.Sprintf("%s-nats-%d", release, victim)
	old := &corev1.Pod{}
	if err := e.k.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: pod}, old); err != nil {
		e.t.Fatal(err)
	}

	if e.ca == "" {
		e.ca = e.edgeCA()
	}
	if e.creds == "" {
		e.creds = e.deviceCredentials()
	}
	ab0, done0 := e.counter("abortedRounds"), e.counter("completedRounds")
	wait := e.driveInBackground("nats-node-kill", 2*baseUsers, 100*time.Second)
	// Mid-round under load: rounds carrying this drive's commands are completing.
	testenv.Eventually(e.t, 2*time.Minute, "rounds completing under load", func() error {
		if n := e.counter("completedRounds"); n < done0+5 {
			return fmt.Errorf("%d rounds completed since the drive started", n-done0)
		}
		return nil
	})
	// The rounds in flight when the node dies: a round lasts its period plus the vendors'
	// response phase, so with rounds pipelined every period ceil(round time ÷ period) are open
	// at once — the one collecting and those still in their response phase — and the kill may
	// abort each of them (the first run saw the collecting round and the one answering abort).
	inFlight := int64(1)
	if u, err := e.resource("Round", roundName); err == nil {
		period, _, _ := unstructured.NestedString(u.Object, "spec", "period")
		roundSecs, _, _ := unstructured.NestedString(u.Object, "status", "lastRoundSeconds")
		p, perr := time.ParseDuration(period)
		r, rerr := strconv.ParseFloat(roundSecs, 64)
		if perr == nil && rerr == nil && p > 0 {
			inFlight = max(1, int64(math.Ceil(r/p.Seconds())))
		}
	}
	// A crash, not a shutdown: SIGKILL the pod's nats-server — the image's supervisor and the
	// server it runs (it steps down nothing, flushes nothing) — then force-delete the pod so that
	// its store goes with it.
	pids, err := natsServerPids(pod)
	if err != nil {
		e.t.Fatal(err)
	}
	killed := time.Now()
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
			e.t.Fatalf("kill nats-server %d of %s: %v", pid, pod, err)
		}
	}
	e.run("kubectl", "delete", "pod", "-n", e.ns, pod, "--grace-period=0", "--force", "--wait=false")
	e.t.Logf("killed nats-server (pids %v) of %s, the leader of %s, mid-round, and deleted the pod", pids, pod, mohitocontract.StreamWork)
	testenv.Eventually(e.t, 3*time.Minute, "the StatefulSet recreated "+pod+" and it is ready", func() error {
		p := &corev1.Pod{}
		if err := e.k.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: pod}, p); err != nil {
			return err
		}
		if p.UID == old.UID {
			return fmt.Errorf("still the old pod")
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("new pod %s not ready (%s)", p.UID, p.Status.Phase)
	})
	back := time.Since(killed)
	testenv.Eventually(e.t, 3*time.Minute, pod+" caught up (/healthz)", func() error { return natsNodeHealthy(victim) })
	caughtUp := time.Since(killed)
	sum := wait()
	aborted := e.counter("abortedRounds") - ab0
	if num(sum["failed"]) > 0 || num(sum["duplicated"]) > 0 {
		e.t.Errorf("NATS node kill: %v of %v acknowledged commands lost, %v duplicated", sum["failed"], sum["sent"], sum["duplicated"])
	}
	if num(sum["commands"]) == 0 {
		e.t.Errorf("NATS node kill: no command answered: %v", sum)
	}
	if aborted > inFlight {
		e.t.Errorf("NATS node kill: %d rounds aborted during the drive; want at most the %d in flight at the kill", aborted, inFlight)
	}
	if a := num(sum["max_attempts"]); a > 2 {
		e.t.Errorf("NATS node kill: a command took %.0f attempts; a client retries at most once", a)
	}
	for _, name := range []string{mohitocontract.StreamWork, "KV_" + mohitocontract.BucketRounds} {
		if si := info(name); len(si.Cluster.Replicas) != natsNodes-1 {
			e.t.Errorf("after the kill, stream %s has %d peers besides its leader; want %d", name, len(si.Cluster.Replicas), natsNodes-1)
		}
	}
	e.report.Notes = append(e.report.Notes, fmt.Sprintf("NATS node kill (%d nodes, R%d; pod %s, leader of %s, force-deleted mid-round): back and ready in %.0f s, caught up in %.0f s; %.0f sent, %.0f answered (%.0f retried, at most %.0f attempts), %.0f failed, %.0f duplicated, %d rounds aborted (%d in flight at the kill)",
		natsNodes, natsNodes, pod, mohitocontract.StreamWork, back.Seconds(), caughtUp.Seconds(), num(sum["sent"]), num(sum["commands"]),
		num(sum["retried"]), num(sum["max_attempts"]), num(sum["failed"]), num(sum["duplicated"]), aborted, inFlight))
}

// natsServerPids finds the nats-server processes of pod on this machine (the local cluster's
// containers are its processes): those whose environment names the pod (POD_NAME, which the
// chart sets for the config's mount) — the image's supervisor and the server it runs.
func natsServerPids(pod string) ([]int, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var found []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", d.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "nats-server" {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", d.Name(), "environ"))
		if err != nil {
			continue
		}
		if slices.Contains(strings.Split(string(env), "\x00"), "POD_NAME="+pod) {
			found = append(found, pid)
		}
	}
	// The image's supervisor and its server child (services/cmd/nats-server): one or two.
	if len(found) == 0 || len(found) > 2 {
		return nil, fmt.Errorf("nats-server processes of pod %s on this machine: %v; want the supervisor and its server", pod, found)
	}
	return found, nil
}

// natsSettled waits until every NATS node has been healthy, with no container restarted, for
// 30 s, and every workload is available. A change of the accounts' shape (an account added or
// removed: the EncounterSimulation deleted just before) makes every node's reloader restart its
// nats-server (docs/chart.md), all within the kubelet's Secret sync period: the cluster is down
// for a moment, and a drive started then fails its devices' MQTT connects.
func (e *env) natsSettled() {
	var last string
	since := time.Now()
	testenv.Eventually(e.t, 4*time.Minute, "the NATS cluster settled (healthy, no restart for 30 s)", func() error {
		var pods corev1.PodList
		if err := e.k.List(context.Background(), &pods, client.InNamespace(e.ns), client.MatchingLabels{"app.kubernetes.io/component": "nats"}); err != nil {
			return err
		}
		var state []string
		for _, p := range pods.Items {
			for _, c := range p.Status.ContainerStatuses {
				state = append(state, fmt.Sprintf("%s/%s:%s:%d", p.Name, c.Name, p.UID, c.RestartCount))
			}
		}
		slices.Sort(state)
		now := strings.Join(state, " ")
		for i := range natsNodes {
			if err := natsNodeHealthy(i); err != nil {
				last = ""
				return err
			}
		}
		if now != last {
			last, since = now, time.Now()
		}
		if len(pods.Items) != natsNodes || time.Since(since) < 30*time.Second {
			return fmt.Errorf("%d NATS pods, unchanged for %s: %s", len(pods.Items), time.Since(since).Round(time.Second), now)
		}
		return e.allAvailable()
	})
}
