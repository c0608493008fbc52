package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/e2e/internal/ready"
	"github.com/obscura-iot/obscura/services/testenv"
)

// The NOTES' sample path (issue 19 item 5): what `helm install` prints under notesSamplesHeader
// is run verbatim, from the repository's root, and every sample it applies must become Ready
// (Complete for a run-to-completion kind).
const (
	notesSamplesHeader = "Run every sample"
	// provisionedBy labels what `obscura provision` created (services/cmd/obscura/provision.go).
	provisionedBy = "app.kubernetes.io/managed-by=obscura-provision"
)

// notesPath says whether the run takes the NOTES' path: the install with
// hack/images/out/values-images.yaml and the NOTES' sample commands. It is on by default in the
// smoke with one NATS server, and so in CI (issue 19: the nats image's supervisor restarts
// nats-server in place on the reloader's account-shape restarts, so the kubelet's crash-loop
// back-off no longer holds NATS down after the phase's eight samples; the smoke of 2026-11-29
// 00:07 passed with it, the phase 113 s); OBSCURA_E2E_CLUSTER_NOTES=0 turns it off. With the
// 3-node NATS (full mode, OBSCURA_E2E_CLUSTER_NATS3=1) it runs only with
// OBSCURA_E2E_CLUSTER_NOTES=1: in the full run of 00:16 the Vendor and Round applied after it never
// became Ready — their new pods' JetStream calls in the re-created vendor account (ensure stream
// V_IN, publish mohito.v0.in.key) timed out for 4 minutes (docs/cluster.md step 4b).
func notesPath() bool {
	switch os.Getenv("OBSCURA_E2E_CLUSTER_NOTES") {
	case "0":
		return false
	case "1":
		return true
	}
	return !natsCluster()
}

// notesCommands returns the command lines of the NOTES' sample section: the indented lines
// after the paragraph that starts with notesSamplesHeader, up to the next blank line.
func notesCommands(notes string) ([]string, error) {
	lines := strings.Split(notes, "\n")
	i := 0
	for i < len(lines) && !strings.HasPrefix(lines[i], notesSamplesHeader) {
		i++
	}
	if i == len(lines) {
		return nil, fmt.Errorf("the NOTES have no %q section", notesSamplesHeader)
	}
	for i < len(lines) && strings.TrimSpace(lines[i]) != "" { // the paragraph
		i++
	}
	for i < len(lines) && strings.TrimSpace(lines[i]) == "" {
		i++
	}
	var cmds []string
	for ; i < len(lines) && strings.HasPrefix(lines[i], "  "); i++ {
		cmds = append(cmds, strings.TrimSpace(lines[i]))
	}
	if len(cmds) == 0 {
		return nil, fmt.Errorf("the NOTES' %q section lists no command", notesSamplesHeader)
	}
	return cmds, nil
}

// TestNotesSamplePath renders the chart's NOTES as `helm install` prints them (no cluster), with
// the default values and with values-local.yaml, and checks the sample section the cluster smoke
// runs: it applies a kustomization with -k (not -f, which fails on kustomization.yaml) —
// config/samples, or config/samples-local on the node's network —, runs `obscura provision` in
// the release's namespace after it, and names no program the smoke cannot run.
func TestNotesSamplePath(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, dir string
		args      []string
	}{
		{"default values", "config/samples", nil},
		{"values-local", "config/samples-local", []string{"-f", filepath.Join(root, "charts/obscura/values-local.yaml")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"install", "--dry-run=client", "obscura", filepath.Join(root, "charts/obscura"), "-n", "obscura-notes"}, c.args...)
			cmd := exec.Command(filepath.Join(root, "bin", "helm"), args...)
			cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("helm install --dry-run: %v\n%s", err, out)
			}
			_, notes, ok := strings.Cut(string(out), "\nNOTES:\n")
			if !ok {
				t.Fatalf("no NOTES in\n%s", tail(string(out), 2000))
			}
			cmds, err := notesCommands(notes)
			if err != nil {
				t.Fatal(err)
			}
			dir, err := notesKustomization(cmds)
			if err != nil {
				t.Fatal(err)
			}
			if dir != c.dir {
				t.Errorf("the NOTES apply %s, want %s", dir, c.dir)
			}
			if _, err := os.Stat(filepath.Join(root, dir, "kustomization.yaml")); err != nil {
				t.Error(err)
			}
			apply, provision := -1, -1
			for i, line := range cmds {
				if _, err := notesProgram(root, strings.Fields(line)); err != nil {
					t.Error(err)
				}
				switch {
				case line == "kubectl apply -n obscura-notes -k "+c.dir:
					apply = i
				case line == "go run ./services/cmd/obscura provision --namespace obscura-notes":
					provision = i
				case strings.Contains(line, "-f config/samples"):
					t.Errorf("%q applies the samples directory with -f: it fails on kustomization.yaml", line)
				}
			}
			if apply < 0 || provision < apply {
				t.Errorf("the NOTES' sample commands do not apply the kustomization and then provision in the release namespace:\n%s", strings.Join(cmds, "\n"))
			}
		})
	}
}

// notesKustomization is the directory the NOTES' `kubectl apply ... -k <dir>` applies.
func notesKustomization(cmds []string) (string, error) {
	for _, c := range cmds {
		f := strings.Fields(c)
		if len(f) < 2 || f[0] != "kubectl" || f[1] != "apply" {
			continue
		}
		for i := range f[:len(f)-1] {
			if f[i] == "-k" {
				return f[i+1], nil
			}
		}
	}
	return "", fmt.Errorf("no `kubectl apply -k <dir>` among the NOTES' commands:\n%s", strings.Join(cmds, "\n"))
}

// notesProgram resolves a NOTES command's program: kubectl and helm are the repository's
// (bin/), go is the toolchain on PATH.
func notesProgram(root string, f []string) (string, error) {
	if len(f) == 0 {
		return "", fmt.Errorf("empty command")
	}
	switch f[0] {
	case "kubectl", "helm":
		return filepath.Join(root, "bin", f[0]), nil
	case "go":
		return exec.LookPath("go")
	}
	return "", fmt.Errorf("NOTES command %q: the smoke runs only kubectl, helm and go", strings.Join(f, " "))
}

// notesSamples is the phase: the NOTES' sample commands verbatim, every sample Ready (or
// Complete), then the samples and what provision made are deleted so that the phases after it
// start from the installed release alone.
func (e *env) notesSamples() {
	e.t.Helper()
	notes := e.run("helm", "get", "notes", release, "-n", e.ns)
	cmds, err := notesCommands(notes)
	if err != nil {
		e.t.Fatalf("%v:\n%s", err, notes)
	}
	dir, err := notesKustomization(cmds)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, c := range cmds {
		e.notesRun(c)
	}
	e.notesSecrets()

	samples := e.kustomizedSamples(dir)
	waitStart := time.Now()
	deadline := waitStart.Add(4 * time.Minute)
	var notReady map[string]string
	for {
		notReady = map[string]string{}
		for _, s := range samples {
			cur := &unstructured.Unstructured{}
			cur.SetGroupVersionKind(s.GroupVersionKind())
			err := e.k.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: s.GetName()}, cur)
			if err == nil {
				err = ready.Check(cur)
			}
			if err != nil {
				notReady[s.GetKind()+" "+s.GetName()] = err.Error()
			}
		}
		if len(notReady) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(3 * time.Second)
	}
	keys := make([]string, 0, len(notReady))
	for k := range notReady {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		e.t.Errorf("NOTES sample path: %s not Ready: %s", k, notReady[k])
	}
	e.report.Notes = append(e.report.Notes, fmt.Sprintf("NOTES sample path: %d samples applied, provisioned, %d Ready (or Complete) %.0f s after the last command",
		len(samples), len(samples)-len(notReady), time.Since(waitStart).Seconds()))
	if len(notReady) > 0 {
		out, _ := e.try("kubectl", "get", "pods", "-A", "-o", "wide")
		e.t.Logf("pods:\n%s", tail(out, 6000))
	}
	e.notesCleanup(dir)
}

// notesRun runs one NOTES command line from the repository's root (its paths are relative to
// it) against the cluster, and logs its output (provision prints no secret).
func (e *env) notesRun(line string) {
	e.t.Helper()
	f := strings.Fields(line)
	bin, err := notesProgram(e.root, f)
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command(bin, f[1:]...)
	cmd.Dir = e.root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	e.t.Logf("$ %s (%.1fs)\n%s", line, time.Since(start).Seconds(), tail(out.String(), 4000))
	if err != nil {
		e.t.Fatalf("NOTES command %q: %v", line, err)
	}
}

// kustomizedSamples are the objects `kubectl apply -k <dir>` applies.
func (e *env) kustomizedSamples(dir string) []*unstructured.Unstructured {
	e.t.Helper()
	out := e.run("kubectl", "kustomize", filepath.Join(e.root, dir))
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	if len(objs) == 0 {
		e.t.Fatalf("kubectl kustomize %s: no object", dir)
	}
	return objs
}

// notesSecrets adds the keys and tokens provision generated to what no pod log may hold.
func (e *env) notesSecrets() {
	var list corev1.SecretList
	k, v, _ := strings.Cut(provisionedBy, "=")
	if err := e.k.List(context.Background(), &list, client.MatchingLabels{k: v}); err != nil {
		e.t.Fatal(err)
	}
	for _, s := range list.Items {
		for k, v := range s.Data {
			switch {
			case strings.HasSuffix(k, ".key") && !bytes.Contains(v, []byte("-----BEGIN")):
				e.secrets["provisioned "+s.Namespace+"/"+s.Name+" "+k] = strings.TrimSpace(string(v))
			case k == "tokens.json":
				var toks map[string]string
				_ = json.Unmarshal(v, &toks)
				for t := range toks {
					e.secrets["provisioned token "+t[:4]+"…"] = t
				}
			}
		}
	}
}

// notesCleanup deletes the samples (foreground: their workloads first, so the phases after
// it can create objects of the same names) and what provision created.
func (e *env) notesCleanup(dir string) {
	e.t.Helper()
	cmd := exec.Command(filepath.Join(e.root, "bin", "kubectl"), "delete", "-n", e.ns, "-k", dir,
		"--cascade=foreground", "--wait", "--timeout", "3m", "--ignore-not-found")
	cmd.Dir = e.root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("kubectl delete -k %s: %v\n%s", dir, err, out)
	}
	e.run("kubectl", "delete", "secret", "-n", e.ns, "-l", provisionedBy, "--ignore-not-found")
	e.run("kubectl", "delete", "namespace", "-l", provisionedBy, "--wait", "--timeout", "3m", "--ignore-not-found")
}
