package cluster

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/services/testenv"
)

const (
	// devicesPerVendor bound the real commands of a round (q = 1 per device), so the largest
	// load phase needs as many as its users can use.
	devicesPerVendor = 320
	// baseUsers drive the upgrade and key-rotation phases.
	baseUsers = 8
)

// provision builds the mohito CLI for this machine and generates keys, device secrets and
// tokens with it, then creates the Secrets the samples reference.
func (e *env) provision() {
	bin := filepath.Join(e.dir, "mohito")
	cmd := exec.Command("go", "build", "-o", bin, "./services/cmd/mohito")
	cmd.Dir = e.root
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("build mohito: %v\n%s", err, out)
	}
	e.mohito = bin
	// OBSCURA_E2E_KEEP_PROVISION=1 keeps the generated secrets (of this throwaway deployment)
	// next to the report, to drive the cluster by hand after a failure.
	out := filepath.Join(e.dir, "provision")
	if os.Getenv("OBSCURA_E2E_KEEP_PROVISION") == "1" {
		out = filepath.Join(e.outDir(), "provision")
		_ = os.RemoveAll(out)
	}
	// Two vendors: the second (secondVendor) joins the series only for the load phases, where
	// encoder partitions, which own whole vendors, have more than one vendor to share out.
	e.exec(bin, "provision", "--vendors", "2", "--devices-per-vendor", strconv.Itoa(devicesPerVendor),
		"--users", strconv.Itoa(scaleTokens), "--out", out)
	e.prov = out
	read := e.readProvision
	e.run("kubectl", "create", "namespace", e.ns)
	// The integrator's key goes to Vault (installVault); the vendor's is a key ring Secret, as
	// the Vendor sample says (keys.secretRef.epochs).
	e.secret(vendorName+"-vendor-key", map[string][]byte{"epoch-0.key": read("vendor-0.key")})
	e.secret(roundName+"-user-tokens", map[string][]byte{"tokens.json": read("tokens.json")})
	e.secret(vendorName+"-devices", map[string][]byte{"devices.json": read("devices-0.json")})
	e.secret(secondVendor+"-vendor-key", map[string][]byte{"epoch-0.key": read("vendor-1.key")})
	e.secret(secondVendor+"-devices", map[string][]byte{"devices.json": read("devices-1.json")})
	// Until the second vendor joins, users command the first vendor's devices only.
	e.devices = e.vendorDevices(0)
	var toks map[string]string
	if err := json.Unmarshal(read("tokens.json"), &toks); err != nil {
		e.t.Fatal(err)
	}
	names := make([]string, 0, len(toks))
	for tok := range toks {
		names = append(names, tok)
	}
	sort.Strings(names)
	e.secret("obscura-smoke-token", map[string][]byte{"token": []byte(names[0])})

	// What no pod log may contain.
	e.secrets = map[string]string{}
	for tok := range toks {
		e.secrets["token "+tok[:4]+"…"] = tok
	}
	for _, k := range []string{"integrator.key", "vendor-0.key", "vendor-1.key"} {
		b64 := strings.TrimSpace(string(read(k)))
		e.secrets[k+" (base64)"] = b64
		if raw, err := base64.StdEncoding.DecodeString(b64); err == nil {
			e.secrets[k+" (hex)"] = fmt.Sprintf("%x", raw)
		}
	}
	var devs []struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(read("devices.json"), &devs); err != nil {
		e.t.Fatal(err)
	}
	for _, d := range devs {
		e.secrets["device id "+d.ID] = d.ID
		e.secrets["device secret of "+d.ID] = d.Secret
	}
}

// readProvision reads a file mohito provision wrote.
func (e *env) readProvision(name string) []byte {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.prov, name))
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// exec runs a program (not a repo tool) and fails the test on error.
func (e *env) exec(bin string, args ...string) string {
	e.t.Helper()
	cmd := exec.Command(bin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, tail(string(out), 4000))
	}
	return string(out)
}

// applySamples applies the Vendor, Shuffler and Round samples as a user would, then tunes the
// Round's autoscaler target so that this small machine's lag moves it.
func (e *env) applySamples() {
	for _, f := range []string{"mohito_v1alpha1_vendor.yaml", "mohito_v1alpha1_shuffler.yaml"} {
		e.run("kubectl", "apply", "-n", e.ns, "-f", filepath.Join(e.root, "config/samples", f))
	}
	e.run("kubectl", "apply", "-n", e.ns, "-f", e.roundOnVault())
	// The sample's vendor has 1,000 devices; this run registers devicesPerVendor of them.
	e.run("kubectl", "patch", "-n", e.ns, "vendors.mohito.obscura.dev/"+vendorName, "--type=merge",
		"-p", fmt.Sprintf(`{"spec":{"devices":%d}}`, devicesPerVendor))
	e.run("kubectl", "patch", "-n", e.ns, "rounds.mohito.obscura.dev/"+roundName, "--type=merge",
		"-p", `{"spec":{"decryptWorkers":{"min":1,"max":3,"targetLag":100}}}`)
}

// deviceCredentials writes the driver's MQTT logins from each Vendor's NATS Secret, where the
// operator issued each device of the registry its own login (<id>.user, <id>.password: what the
// vendor hands to that device; no login is shared between devices, issue 15 #2), for the devices
// the drives use (e.devices).
func (e *env) deviceCredentials() string {
	var devs []struct {
		ID     string `json:"id"`
		Vendor int    `json:"vendor"`
	}
	b, err := os.ReadFile(e.devices)
	if err == nil {
		err = json.Unmarshal(b, &devs)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	logins := map[string]map[string]string{}
	testenv.Eventually(e.t, 2*time.Minute, "the operator issued every registered device its own NATS login", func() error {
		secrets := map[int]*corev1.Secret{}
		missing := 0
		for _, d := range devs {
			s, ok := secrets[d.Vendor]
			if !ok {
				s = &corev1.Secret{}
				if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: vendorNames[d.Vendor] + "-nats"}, s); err != nil {
					return err
				}
				secrets[d.Vendor] = s
			}
			user, pw := s.Data[d.ID+".user"], s.Data[d.ID+".password"]
			if len(user) == 0 || len(pw) == 0 {
				missing++
				continue
			}
			logins[d.ID] = map[string]string{"user": string(user), "password": string(pw)}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d devices have no login yet", missing, len(devs))
		}
		return nil
	})
	for id, l := range logins {
		e.secrets["NATS password of device "+id] = l["password"]
	}
	b, _ = json.Marshal(logins)
	return e.writeFile("device-credentials.json", b)
}

// edgeCA writes the CA that signed the edge's certificate.
func (e *env) edgeCA() string {
	s := &corev1.Secret{}
	if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: release + "-edge-tls"}, s); err != nil {
		e.t.Fatalf("edge TLS secret: %v", err)
	}
	ca := s.Data["ca.crt"]
	if len(ca) == 0 {
		ca = s.Data["tls.crt"]
	}
	return e.writeFile("edge-ca.crt", ca)
}

// drive runs `mohito drive` through the edge and the MQTT listener for d with users users and
// returns its JSON summary.
func (e *env) drive(name string, users int, d time.Duration) map[string]any {
	e.t.Helper()
	s, err := e.driveRaw(name, users, d)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// driveRaw is drive without failing the test (it runs on other goroutines too).
func (e *env) driveRaw(name string, users int, d time.Duration) (map[string]any, error) {
	return e.driveAt(name, edgeAddr, mqttAddr, users, d)
}

// driveAt is driveRaw against the given edge and MQTT addresses.
func (e *env) driveAt(name, edge, mqtt string, users int, d time.Duration) (map[string]any, error) {
	js := filepath.Join(e.outDir(), "drive-"+name+".json")
	args := []string{"drive", "--gateway", edge, "--ca-file", e.ca, "--server-name", e.edgeServerName,
		"--tokens-file", filepath.Join(e.prov, "tokens.json"), "--devices-file", e.devices,
		"--mqtt", mqtt, "--device-credentials-file", e.creds,
		"--duration", d.String(), "--users", strconv.Itoa(users), "--timeout", "90s", "--progress", "10s", "--json", js}
	out, err := exec.Command(e.mohito, args...).CombinedOutput()
	_ = os.WriteFile(filepath.Join(e.outDir(), "drive-"+name+".txt"), out, 0o644)
	e.t.Logf("mohito drive (%s, %d users):\n%s", name, users, tail(string(out), 3000))
	// Exit status 1 with a summary is a run that was not exactly once: the caller judges it.
	if ee := (*exec.ExitError)(nil); err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		return nil, fmt.Errorf("drive %s: %w", name, err)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		return nil, err
	}
	var s map[string]any
	return s, json.Unmarshal(b, &s)
}

// counter reads a Round status counter.
func (e *env) counter(field string) int64 { return statusCount(e.roundStatus(), field) }

// statusCount is an integer field of a Round's status (0 when absent).
func statusCount(st map[string]any, field string) int64 {
	v, _ := strconv.ParseInt(fmt.Sprint(st[field]), 10, 64)
	return v
}

func num(v any) float64 {
	f, _ := strconv.ParseFloat(fmt.Sprint(v), 64)
	return f
}

// driveInBackground starts a drive (driveRaw) and returns the wait for its summary; the wait
// fails the test if the drive failed.
func (e *env) driveInBackground(name string, users int, d time.Duration) func() map[string]any {
	type result struct {
		sum map[string]any
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := e.driveRaw(name, users, d)
		done <- result{s, err}
	}()
	return func() map[string]any {
		e.t.Helper()
		r := <-done
		if r.err != nil {
			e.t.Fatalf("drive %s: %v", name, r.err)
		}
		return r.sum
	}
}

// upgradeUnderLoad changes a Round parameter and upgrades the release while users send
// commands: no command may be lost or duplicated.
func (e *env) upgradeUnderLoad() {
	ab0 := e.counter("abortedRounds")
	wait := e.driveInBackground("upgrade", 2*baseUsers, 75*time.Second)
	time.Sleep(10 * time.Second)
	// A Round parameter: the response timeout of the shuffler policy rolls every round workload.
	e.run("kubectl", "patch", "-n", e.ns, "rounds.mohito.obscura.dev/"+roundName, "--type=merge",
		"-p", `{"spec":{"shufflerPolicy":{"responseTimeout":"1800ms"}}}`)
	testenv.Eventually(e.t, 3*time.Minute, "round workloads rolled and available", e.allAvailable)
	e.upgrade()
	testenv.Eventually(e.t, 3*time.Minute, "everything available after the upgrade", e.allAvailable)
	sum := wait()
	// Rolling the coordinator, the encoders and the responder can abort a round in flight; its
	// users retry in a later round, and a device answers a retried command it already ran from
	// memory (docs/services.md): nothing lost, nothing duplicated, aborted or not.
	aborted := e.counter("abortedRounds") - ab0
	if num(sum["failed"]) > 0 || num(sum["duplicated"]) > 0 {
		e.t.Errorf("commands lost or duplicated across the upgrade: %v failed, %v duplicated of %v sent", sum["failed"], sum["duplicated"], sum["sent"])
	}
	e.report.Notes = append(e.report.Notes, fmt.Sprintf("upgrade under load: %.0f sent, %.0f answered (%.0f retried), %.0f failed, %.0f duplicated, %d rounds aborted during the rollouts",
		num(sum["sent"]), num(sum["commands"]), num(sum["retried"]), num(sum["failed"]), num(sum["duplicated"]), aborted))
}

// outDir keeps the drives' outputs next to the report (or in the run's directory).
func (e *env) outDir() string {
	if p := os.Getenv("OBSCURA_E2E_REPORT"); p != "" {
		return filepath.Dir(p)
	}
	return e.dir
}

// settledRounds is how many rounds in a row must complete without an abort before a load phase.
const settledRounds = 5

// waitSettled waits, before any load, until the decryption workers' count has not changed for
// 30 s with every worker ready, and the series has completed settledRounds rounds in a row
// without an abort. Ready pods are not enough: a rolled coordinator is Ready as a standby while
// its predecessor drains, and a run's ×1 phase began while the rounds still aborted (9 of them).
func (e *env) waitSettled() {
	var last int32 = -1
	since := time.Now()
	lastAborted, completed0 := int64(-1), int64(0)
	testenv.Eventually(e.t, 4*time.Minute, "decryption workers and rounds settled", func() error {
		want, ready, err := e.decryptWorkers()
		if err != nil {
			return err
		}
		if want != last {
			last, since = want, time.Now()
		}
		st := e.roundStatus()
		if ab := statusCount(st, "abortedRounds"); ab != lastAborted {
			lastAborted, completed0 = ab, statusCount(st, "completedRounds")
		}
		clean := statusCount(st, "completedRounds") - completed0
		if ready != want || time.Since(since) < 30*time.Second || clean < settledRounds {
			return fmt.Errorf("%d/%d ready, unchanged for %s; %d rounds completed since the last abort (want %d)",
				ready, want, time.Since(since).Round(time.Second), clean, settledRounds)
		}
		e.report.Notes = append(e.report.Notes, fmt.Sprintf("decryption workers settled at %d before the load phases", want))
		return nil
	})
}
