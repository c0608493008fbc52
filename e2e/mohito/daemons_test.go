package mohito

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/client"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roles"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
	"github.com/obscura-iot/obscura/services/testenv"
)

// binary is the mohito binary built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	testenv.RunWithBinary(m, "github.com/obscura-iot/obscura/services/cmd/mohito", &binary)
}

func pw(user string) string { return user + "-e2e-pw" }

// role is one daemon process.
type role struct {
	name    string
	cmd     *exec.Cmd
	metrics int
	health  int
	log     string
	done    chan struct{}
	err     error
}

func (r *role) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func (r *role) logTail() string {
	b, _ := os.ReadFile(r.log)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

type cluster struct {
	t     *testing.T
	dir   string
	nats  *testenv.NATS
	redis *testenv.Redis
	roles []*role
	ports []int
}

func (c *cluster) write(name string, b []byte) string {
	c.t.Helper()
	p := filepath.Join(c.dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// passwordFile writes user's password file once: rewriting it while another
// role reads it would hand that role an empty password.
func (c *cluster) passwordFile(user string) string {
	p := filepath.Join(c.dir, "pw-"+user)
	if _, err := os.Stat(p); err != nil {
		c.write("pw-"+user, []byte(pw(user)+"\n"))
	}
	return p
}

// distinctPorts returns n free ports on 127.0.0.1, distinct from each
// other (every listener is held until all are chosen).
func distinctPorts(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out
}

func (c *cluster) freePort() int {
	if len(c.ports) == 0 {
		c.ports = distinctPorts(c.t, 32)
	}
	p := c.ports[0]
	c.ports = c.ports[1:]
	return p
}

// start runs `mohito <sub> args...` with NATS credentials of user.
func (c *cluster) start(name, sub, user string, env []string, args ...string) *role {
	c.t.Helper()
	r := &role{name: name, metrics: c.freePort(), health: c.freePort(), log: filepath.Join(c.dir, name+".log"), done: make(chan struct{})}
	full := append([]string{sub,
		"--deployment", filepath.Join(c.dir, "deployment.json"),
		"--nats-url", c.nats.URL(),
		"--nats-user", user, "--nats-password-file", c.passwordFile(user),
		"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", r.metrics),
		"--health-addr", fmt.Sprintf("127.0.0.1:%d", r.health),
	}, args...)
	f, err := os.Create(r.log)
	if err != nil {
		c.t.Fatal(err)
	}
	r.cmd = exec.Command(binary, full...)
	r.cmd.Env = append(os.Environ(), env...)
	r.cmd.Stdout, r.cmd.Stderr = f, f
	r.cmd.SysProcAttr = childAttr()
	if err := r.cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		r.err = r.cmd.Wait()
		f.Close()
		close(r.done)
	}()
	c.roles = append(c.roles, r)
	c.t.Cleanup(func() {
		if !r.exited() {
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

func get(url string) (int, string, error) {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

const deploymentJSON = `{"series":"e2e","mode":"Hardened","suite":"X25519","commandsPerUser":1,"delta":2,"commandSize":256,"responseSize":128,
 "period":"400ms","shufflerTimeout":"3s","responseDeadline":"1500ms","asyncWindow":0,"encoders":2,"outBatch":32,"responseQuantum":16,
 "capacityDraw":"Random",
 "vendors":[
  {"index":0,"name":"acme","devices":4,"base":2,"jitter":2,"paddedEntries":16,"responsePaddedEntries":16},
  {"index":1,"name":"bolt","devices":3,"base":2,"jitter":2,"paddedEntries":16,"responsePaddedEntries":16},
  {"index":2,"name":"coil","devices":3,"base":2,"jitter":2,"paddedEntries":16,"responsePaddedEntries":16}]}`

// TestDaemons runs every role as its own process for at least five rounds:
// every command is delivered exactly once and answered, every role is ready
// and exports its metrics, the coordinator publishes the operator's status
// keys, and SIGTERM stops each role with status 0.
func TestDaemons(t *testing.T) {
	devices := []int{4, 3, 3}
	const vendors, users, perUser = 3, 6, 5
	c := &cluster{t: t, dir: t.TempDir()}
	ids := make([][]string, vendors) // every device has its own NATS user
	for v := range vendors {
		for i := range devices[v] {
			ids[v] = append(ids[v], fmt.Sprintf("v%dd%d", v, i))
		}
	}
	c.nats = testenv.StartNATS(t, testenv.WithNATSConfig(contract.AccountsConfig(ids, pw)), testenv.WithMQTT())
	c.redis = testenv.StartRedis(t)
	c.write("deployment.json", []byte(deploymentJSON))
	d, err := roles.LoadDeployment(filepath.Join(c.dir, "deployment.json"))
	if err != nil {
		t.Fatal(err)
	}
	p := d.Params

	keyFile := func(name string) string {
		k, err := mohito.GenerateKey(p.Suite)
		if err != nil {
			t.Fatal(err)
		}
		b, err := k.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		return c.write(name, b)
	}
	ikey := keyFile("integrator.key")

	// Devices, their registries and their owners.
	type dev struct {
		v, d  int
		creds mohito.DeviceCredentials
		owner int
	}
	var devs []dev
	secrets := map[string]*mohito.DeviceSecret{}
	for v, n := range devices {
		type entry struct {
			ID  string `json:"id"`
			PRF []byte `json:"prf"`
		}
		var reg []entry
		for i := range n {
			s, err := mohito.NewDeviceSecret(rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			id := fmt.Sprintf("v%dd%d", v, i)
			secrets[id] = &s
			cr := mohito.DeviceCredentials{Vendor: uint32(v), Keys: s.Keys()}
			reg = append(reg, entry{ID: id, PRF: cr.Keys.PRF[:]})
			devs = append(devs, dev{v: v, d: i, creds: cr, owner: len(devs) % users})
		}
		b, _ := json.Marshal(reg)
		c.write(fmt.Sprintf("devices-%d.json", v), b)
	}
	tokens := map[string]string{}
	for u := range users {
		tokens[fmt.Sprintf("tok-%d", u)] = fmt.Sprintf("user%d", u)
	}
	tb, _ := json.Marshal(tokens)
	c.write("tokens.json", tb)

	// Vendor roles, then integrator roles (the order does not matter: every
	// role retries its setup until the other side is there).
	iu := contract.IntegratorUser
	for v := range vendors {
		vk := keyFile(fmt.Sprintf("vendor%d.key", v))
		c.start(fmt.Sprintf("shuffler-%d", v), "shuffler", contract.VendorUser(v), nil, "--key-file", vk, "--vendor", strconv.Itoa(v))
		c.start(fmt.Sprintf("vendor-agent-%d", v), "vendor-agent", contract.VendorUser(v), []string{"OBSCURA_VENDOR_INDEX=" + strconv.Itoa(v)},
			"--key-file", vk, "--devices-file", filepath.Join(c.dir, fmt.Sprintf("devices-%d.json", v)))
	}
	rdb := []string{"--redis-addr", c.redis.Addr()}
	grpcPort := c.freePort()
	c.start("gateway", "gateway", iu, nil, append(rdb, "--grpc-addr", fmt.Sprintf("127.0.0.1:%d", grpcPort), "--tokens-file", filepath.Join(c.dir, "tokens.json"))...)
	c.start("decrypt-worker-0", "decrypt-worker", iu, nil, "--key-file", ikey)
	c.start("decrypt-worker-1", "decrypt-worker", iu, []string{"OBSCURA_KEY_FILE=" + ikey})
	c.start("encoder-0", "encoder", iu, []string{"POD_NAME=round-encoder-0"}, rdb...)
	c.start("encoder-1", "encoder", iu, []string{"POD_NAME=round-encoder-1"}, rdb...)
	c.start("responder", "responder", iu, nil, rdb...)
	c.start("coordinator", "coordinator", iu, nil, append(rdb, "--key-file", ikey)...)

	begin := time.Now()
	testenv.Eventually(t, 30*time.Second, "every role answers /readyz 200", func() error {
		for _, r := range c.roles {
			if r.exited() {
				return fmt.Errorf("%w: %s exited: %v\n%s", testenv.ErrGiveUp, r.name, r.err, r.logTail())
			}
			code, body, err := get(fmt.Sprintf("http://127.0.0.1:%d/readyz", r.health))
			if err != nil || code != http.StatusOK {
				if time.Since(begin) > 25*time.Second {
					b, _ := os.ReadFile(c.nats.LogPath)
					t.Logf("nats log:\n%s", b[max(0, len(b)-3000):])
					begin = time.Now()
				}
				return fmt.Errorf("%s: %d %s %v", r.name, code, strings.TrimSpace(body), err)
			}
		}
		return nil
	})

	// Devices: vendor 0's first device over MQTT, the others over NATS, each
	// as its own restricted device user.
	var deliveries sim.Deliveries
	for v := range vendors {
		for _, id := range ids[v] {
			user := contract.DeviceUser(v, id)
			var tr client.Transport
			if v == 0 && id == ids[0][0] {
				m, err := client.DialMQTT(c.nats.MQTTAddr(), user, pw(user))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(m.Close)
				tr = m
			} else {
				tr = client.NATSTransport{NC: c.nats.Connect(t, nats.UserInfo(user, pw(user)))}
			}
			if err := client.NewDevice(id, secrets[id], p, tr, deliveries.Ack).Start(); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Users: each sends perUser commands in sequence to its devices.
	conn, err := client.DialGateway(fmt.Sprintf("127.0.0.1:%d", grpcPort))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, users*perUser)
	sent := map[string]bool{}
	for u := range users {
		var mine []dev
		for _, dv := range devs {
			if dv.owner == u {
				mine = append(mine, dv)
			}
		}
		user := &client.User{Name: fmt.Sprintf("user%d", u), GW: client.NewGatewayClient(conn, fmt.Sprintf("tok-%d", u))}
		for s := range perUser {
			sent[fmt.Sprintf("u%d-%d", u, s)] = true
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range perUser {
				dv := mine[s%len(mine)]
				payload := fmt.Sprintf("u%d-%d", u, s)
				res, err := user.Send(ctx, &dv.creds, []byte(payload))
				if err != nil {
					errs <- fmt.Errorf("user %d command %d: %w", u, s, err)
					return
				}
				if string(res.Response) != "ack:"+payload {
					errs <- fmt.Errorf("user %d command %d: response %q", u, s, res.Response)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		for _, r := range c.roles {
			t.Logf("--- %s log tail ---\n%s", r.name, r.logTail())
		}
		t.Fatal(err)
	}
	delivered := deliveries.Counts()
	for p := range sent {
		if delivered[p] != 1 {
			t.Errorf("command %s delivered %d times", p, delivered[p])
		}
	}
	for p, n := range delivered {
		if !sent[p] {
			t.Errorf("device received %q (%d times) that nobody sent", p, n)
		}
	}

	// The operator's view: status keys in the integrator's KV bucket and
	// the decrypt workers' consumer.
	js := c.nats.JetStream(t, nats.UserInfo(iu, pw(iu)))
	kv, err := js.KeyValue(ctx, contract.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "five completed rounds in mohito_status", func() error {
		e, err := kv.Get(ctx, contract.StatusSeriesKey("e2e"))
		if err != nil {
			return err
		}
		var s contract.SeriesStatus
		if err := json.Unmarshal(e.Value(), &s); err != nil {
			return err
		}
		if s.CompletedRounds < 5 || s.CurrentRound < 5 || s.Updated == "" || s.LastRoundSeconds <= 0 {
			return fmt.Errorf("status %s", e.Value())
		}
		// A round lasts its period (400 ms), the work, then the vendors' fixed response
		// deadline (1.5 s): the work the autoscalers compare with the period is neither.
		if s.LastProcessingSeconds <= 0 || s.LastProcessingSeconds > s.LastRoundSeconds-0.4-1.5+0.002 {
			return fmt.Errorf("lastProcessingSeconds %.3f is not the round's work (round %.3fs = period 0.4s + work + deadline 1.5s)", s.LastProcessingSeconds, s.LastRoundSeconds)
		}
		t.Logf("series status: %s", e.Value())
		return nil
	})
	var duty int64
	for v := range vendors {
		e, err := kv.Get(ctx, contract.StatusVendorKey(v))
		if err != nil {
			t.Fatalf("vendor %d status: %v", v, err)
		}
		var vs contract.VendorStatus
		if err := json.Unmarshal(e.Value(), &vs); err != nil || vs.RoundsServed < 1 {
			t.Fatalf("vendor %d status %s: %v", v, e.Value(), err)
		}
		duty += vs.ShufflerDuty
		if _, err := kv.Get(ctx, contract.StatusShufflerKey(v)); err != nil {
			t.Fatalf("shuffler %d status: %v", v, err)
		}
	}
	if duty < 5 {
		t.Fatalf("total shuffler duty %d < 5 rounds", duty)
	}
	cons, err := js.Consumer(ctx, contract.StreamIntegratorIn, contract.ConsumerDecryptWorkers)
	if err != nil {
		t.Fatal(err)
	}
	if ci, err := cons.Info(ctx); err != nil || ci.Delivered.Consumer == 0 {
		t.Fatalf("decrypt-workers consumer delivered nothing: %+v %v", ci, err)
	}

	// Metrics of every role.
	for _, r := range c.roles {
		code, body, err := get(fmt.Sprintf("http://127.0.0.1:%d/metrics", r.metrics))
		if err != nil || code != 200 {
			t.Fatalf("%s /metrics: %d %v", r.name, code, err)
		}
		sub := strings.TrimRight(r.name, "-0123456789")
		if !strings.Contains(body, fmt.Sprintf(`mohito_role_info{role=%q,series="e2e"} 1`, sub)) {
			t.Fatalf("%s /metrics lacks mohito_role_info:\n%s", r.name, body[:min(len(body), 2000)])
		}
		if want := roleSeries[sub]; want != "" && !strings.Contains(body, want) {
			t.Errorf("%s /metrics lacks %s", r.name, want)
		}
		if code, _, err := get(fmt.Sprintf("http://127.0.0.1:%d/healthz", r.health)); err != nil || code != 200 {
			t.Fatalf("%s /healthz: %d %v", r.name, code, err)
		}
	}
	// SIGTERM: each role drains and exits 0. The coordinator first, so no
	// new round starts while the others stop.
	order := append([]*role{c.roles[len(c.roles)-1]}, c.roles[:len(c.roles)-1]...)
	for _, r := range order {
		if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatalf("signal %s: %v", r.name, err)
		}
	}
	for _, r := range order {
		select {
		case <-r.done:
			if r.err != nil {
				t.Errorf("%s exited with %v after SIGTERM\n%s", r.name, r.err, r.logTail())
			}
		case <-time.After(20 * time.Second):
			t.Errorf("%s did not exit within 20s of SIGTERM", r.name)
		}
	}
	// Logs are JSON lines and never carry the key material.
	for _, r := range c.roles {
		b, _ := os.ReadFile(r.log)
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			if len(line) > 0 && !json.Valid(line) {
				t.Errorf("%s logged a non-JSON line: %s", r.name, line)
				break
			}
		}
	}
}

// roleSeries is a series each role must export once rounds have run.
var roleSeries = map[string]string{
	"gateway":      `mohito_commands_total{stage="admitted"}`,
	"coordinator":  `mohito_stage_seconds_count{stage="close_to_plan"}`,
	"responder":    `mohito_commands_total{stage="responses"}`,
	"vendor-agent": `mohito_stage_seconds_count{stage="vendor_decode"}`,
	"shuffler":     "mohito_fakes_total",
}

// TestBadConfig: a configuration error exits with status 2 and says what is wrong.
func TestBadConfig(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "deployment.json")
	if err := os.WriteFile(bad, []byte(strings.Replace(deploymentJSON, `"series"`, `"seires":"x","series"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"encoder", "--deployment", bad, "--redis-addr", "127.0.0.1:1", "--partition", "0"}, `unknown field "seires"`},
		{[]string{"decrypt-worker", "--deployment", filepath.Join(dir, "missing.json")}, "missing.json"},
		{[]string{"shuffler", "--deployment", bad, "--vendor", "-1"}, "--vendor"},
		{[]string{"gateway", "--nats-user", "integrator"}, "--nats-password-file go together"},
	}
	for _, tc := range cases {
		cmd := exec.Command(binary, tc.args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("mohito %v: %v, want exit status 2\n%s", tc.args, err, stderr.String())
			continue
		}
		if !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("mohito %v: stderr %q does not mention %q", tc.args, stderr.String(), tc.want)
		}
	}
}
