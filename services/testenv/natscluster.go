package testenv

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSCluster is a JetStream cluster of real nats-server processes on 127.0.0.1, started by
// StartNATSCluster: one cluster name, routes between every node, a store directory per node,
// the same accounts on every node. Kill and Restart take one node down and bring it back by
// its pid, as a crashed and rescheduled pod would be.
type NATSCluster struct {
	// Name is the cluster name (the `cluster { name }` of every node).
	Name string

	bin   string
	nodes []*natsNode

	mu sync.Mutex
}

// natsNode is one nats-server of a cluster: its ports and directory stay the same across
// restarts, so a restarted node finds its JetStream store and its routes again.
type natsNode struct {
	name                          string
	dir, conf                     string
	clientPort, routePort, httpPt int
	proc                          *process
	starts                        int
}

// StartNATSCluster starts nodes nats-server processes from <root>/bin as one JetStream
// cluster on 127.0.0.1, each with its own client, route and monitoring port and its own
// store under t.TempDir(). conf is the accounts block every node shares (the text
// WithNATSConfig takes for the single server); an account that uses JetStream needs
// `jetstream: enabled` in it. It returns once every node answers /healthz (JetStream has a
// meta leader and is current) and stops every node at cleanup.
func StartNATSCluster(t testing.TB, nodes int, conf string) *NATSCluster {
	t.Helper()
	return startNATSCluster(t, nodes, conf, "")
}

// StartNATSClusterIncluding starts a cluster as StartNATSCluster does whose nodes include
// accountsFile (`include "accounts.conf"`, a symlink to it in each node's directory), as the
// chart's nodes include the operator's accounts Secret: a change of the file is what a node
// loads on its next reload or restart.
func StartNATSClusterIncluding(t testing.TB, nodes int, accountsFile string) *NATSCluster {
	t.Helper()
	return startNATSCluster(t, nodes, `include "accounts.conf"`, accountsFile)
}

func startNATSCluster(t testing.TB, nodes int, conf, accountsFile string) *NATSCluster {
	t.Helper()
	if nodes < 1 {
		t.Fatalf("testenv: start NATS cluster: %d nodes", nodes)
	}
	bin, err := Bin("nats-server")
	if err != nil {
		t.Fatalf("testenv: start NATS cluster: %v", err)
	}
	c := &NATSCluster{Name: "testenv", bin: bin}
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(3 * nodes)
		if err != nil {
			t.Fatalf("testenv: start NATS cluster: %v", err)
		}
		c.nodes = make([]*natsNode, nodes)
		routes := make([]string, nodes)
		for i := range nodes {
			routes[i] = fmt.Sprintf("nats://%s:%d", Host, ports[3*i+1])
		}
		for i := range nodes {
			n := &natsNode{name: fmt.Sprintf("n%d", i), dir: filepath.Join(dir, fmt.Sprintf("a%d-n%d", attempt, i)),
				clientPort: ports[3*i], routePort: ports[3*i+1], httpPt: ports[3*i+2]}
			if err := os.MkdirAll(n.dir, 0o755); err != nil {
				t.Fatalf("testenv: start NATS cluster: %v", err)
			}
			if accountsFile != "" {
				if err := os.Symlink(accountsFile, filepath.Join(n.dir, "accounts.conf")); err != nil {
					t.Fatalf("testenv: start NATS cluster: %v", err)
				}
			}
			n.conf = filepath.Join(n.dir, "nats.conf")
			if err := os.WriteFile(n.conf, []byte(clusterNodeConf(c.Name, n, routes, conf)), 0o600); err != nil {
				t.Fatalf("testenv: start NATS cluster: %v", err)
			}
			c.nodes[i] = n
		}
		var startErr error
		for i := range nodes {
			if startErr = c.start(i); startErr != nil {
				break
			}
		}
		if startErr == nil {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			startErr = c.waitHealthy(ctx)
			cancel()
		}
		if startErr != nil {
			conflict := false
			for _, n := range c.nodes {
				if n.proc != nil {
					_ = n.proc.stop(time.Second)
					conflict = conflict || n.proc.bindConflict()
				}
			}
			if attempt < bindAttempts && conflict {
				continue
			}
			t.Fatalf("testenv: start NATS cluster of %d nodes: %v\n%s", nodes, startErr, c.logs())
		}
		t.Cleanup(func() {
			for _, n := range c.nodes {
				c.mu.Lock()
				p := n.proc
				c.mu.Unlock()
				if p == nil {
					continue
				}
				if err := p.stop(10 * time.Second); err != nil {
					t.Errorf("testenv: %v", err)
				}
			}
		})
		return c
	}
}

// clusterNodeConf is node n's configuration file: its listeners on 127.0.0.1, its store, the
// cluster with a route to every node (a node skips the route to itself) and the accounts.
func clusterNodeConf(cluster string, n *natsNode, routes []string, accounts string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %s\nlisten: %q\nhttp: %q\n", n.name,
		fmt.Sprintf("%s:%d", Host, n.clientPort), fmt.Sprintf("%s:%d", Host, n.httpPt))
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n}\n", filepath.Join(n.dir, "jetstream"))
	fmt.Fprintf(&b, "cluster {\n  name: %q\n  listen: %q\n  routes: [\n", cluster, fmt.Sprintf("%s:%d", Host, n.routePort))
	for _, r := range routes {
		fmt.Fprintf(&b, "    %q\n", r)
	}
	b.WriteString("  ]\n}\n")
	b.WriteString(accounts)
	b.WriteString("\n")
	return b.String()
}

// start runs node i's nats-server on its configuration file.
func (c *NATSCluster) start(i int) error {
	n := c.nodes[i]
	n.starts++
	logPath := filepath.Join(n.dir, fmt.Sprintf("nats-%d.log", n.starts))
	p, err := startProcess("nats-server "+n.name, c.bin, []string{"-c", n.conf}, n.dir, logPath)
	if err != nil {
		return err
	}
	c.mu.Lock()
	n.proc = p
	c.mu.Unlock()
	return nil
}

// waitHealthy waits until every running node answers /healthz with 200: JetStream is
// enabled, has a meta leader, and the node's streams and consumers are current.
func (c *NATSCluster) waitHealthy(ctx context.Context) error {
	for i := range c.nodes {
		if err := c.waitNodeHealthy(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

func (c *NATSCluster) waitNodeHealthy(ctx context.Context, i int) error {
	n := c.nodes[i]
	c.mu.Lock()
	p := n.proc
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	url := fmt.Sprintf("http://%s:%d/healthz", Host, n.httpPt)
	err := p.waitReady(ctx, func(ctx context.Context) error { return natsHealthz(ctx, url) })
	if err != nil {
		return fmt.Errorf("nats-server %s (pid %d) not healthy: %w", n.name, p.cmd.Process.Pid, err)
	}
	return nil
}

func natsHealthz(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %v", errNotYet, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: /healthz %d %s", errNotYet, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// MonitorURL returns node i's monitoring base URL, "http://127.0.0.1:<port>".
func (c *NATSCluster) MonitorURL(i int) string {
	return fmt.Sprintf("http://%s:%d", Host, c.nodes[i].httpPt)
}

// Supervise plays the kubelet until the test ends: a node whose nats-server exits (a SIGTERM
// from a reloader, a crash) is started again on its ports, store and configuration, and
// started is called with its new pid. A node taken down by Kill stays down.
func (c *NATSCluster) Supervise(t testing.TB, started func(i, pid int)) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c.mu.Lock()
				p := c.nodes[i].proc
				c.mu.Unlock()
				if p == nil {
					return
				}
				select {
				case <-stop:
					return
				case <-p.done:
				}
				c.mu.Lock()
				killed := c.nodes[i].proc != p
				c.mu.Unlock()
				if killed {
					return
				}
				if err := c.start(i); err != nil {
					t.Errorf("testenv: supervise NATS node %d: %v", i, err)
					return
				}
				started(i, c.Pid(i))
			}
		}()
	}
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
	})
}

// Nodes is the number of nodes.
func (c *NATSCluster) Nodes() int { return len(c.nodes) }

// URL returns node i's client URL, "nats://127.0.0.1:<port>".
func (c *NATSCluster) URL(i int) string {
	return fmt.Sprintf("nats://%s:%d", Host, c.nodes[i].clientPort)
}

// URLs returns every node's client URL, comma-separated, as nats.Connect takes a server list.
func (c *NATSCluster) URLs() string {
	urls := make([]string, len(c.nodes))
	for i := range c.nodes {
		urls[i] = c.URL(i)
	}
	return strings.Join(urls, ",")
}

// ServerName returns node i's server name (what stream info names as leader and replicas).
func (c *NATSCluster) ServerName(i int) string { return c.nodes[i].name }

// Index returns the node of server name, or -1.
func (c *NATSCluster) Index(name string) int {
	for i, n := range c.nodes {
		if n.name == name {
			return i
		}
	}
	return -1
}

// Pid returns node i's process id, or 0 while it is down.
func (c *NATSCluster) Pid(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.nodes[i].proc; p != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

// Kill sends SIGKILL to node i's pid and waits for it to exit: no lame-duck mode, no
// goodbye to the routes or the clients — a crash.
func (c *NATSCluster) Kill(t testing.TB, i int) {
	t.Helper()
	c.mu.Lock()
	p := c.nodes[i].proc
	c.nodes[i].proc = nil
	c.mu.Unlock()
	if p == nil {
		t.Fatalf("testenv: kill NATS node %d: not running", i)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("testenv: kill nats-server %s (pid %d): %v", c.nodes[i].name, p.cmd.Process.Pid, err)
	}
	<-p.done
}

// Restart starts node i again on its ports, store and configuration, and returns once it
// answers /healthz: it has rejoined the cluster and caught its streams up.
func (c *NATSCluster) Restart(t testing.TB, i int) {
	t.Helper()
	c.mu.Lock()
	running := c.nodes[i].proc != nil
	c.mu.Unlock()
	if running {
		t.Fatalf("testenv: restart NATS node %d: still running (Kill it first)", i)
	}
	if err := c.start(i); err != nil {
		t.Fatalf("testenv: restart NATS node %d: %v", i, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := c.waitNodeHealthy(ctx, i); err != nil {
		t.Fatalf("testenv: restart NATS node %d: %v\n%s", i, err, logTail(c.nodes[i].proc.logPath, 30))
	}
}

// Connect opens a client connection to every node's URL (pass nats.UserInfo etc. for the
// accounts), reconnecting without limit, and closes it at cleanup.
func (c *NATSCluster) Connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{nats.Name(t.Name()), nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(c.URLs(), opts...)
	if err != nil {
		t.Fatalf("testenv: connect to NATS cluster %s: %v", c.URLs(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream opens a connection with Connect and returns its JetStream context.
func (c *NATSCluster) JetStream(t testing.TB, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(c.Connect(t, opts...))
	if err != nil {
		t.Fatalf("testenv: JetStream on the NATS cluster: %v", err)
	}
	return js
}

// LogPath returns the log of node i's latest start.
func (c *NATSCluster) LogPath(i int) string {
	n := c.nodes[i]
	return filepath.Join(n.dir, "nats-"+strconv.Itoa(n.starts)+".log")
}

// logs is the tail of every node's latest log, for a failure message.
func (c *NATSCluster) logs() string {
	var b strings.Builder
	for i, n := range c.nodes {
		if n.starts == 0 {
			continue
		}
		fmt.Fprintf(&b, "  node %s (%s):\n%s\n", n.name, c.LogPath(i), logTail(c.LogPath(i), 15))
	}
	return b.String()
}
