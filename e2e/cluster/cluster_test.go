package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/e2e/internal/ready"
	"github.com/obscura-iot/obscura/services/testenv"
)

const (
	release    = "obscura"
	roundName  = "home"
	vendorName = "acme"
	mohitoAPI  = "mohito.obscura.dev/v1alpha1"
	// edgeAddr and mqttAddr are where values-local.yaml puts the Envoy edge and NATS's MQTT
	// listener on the node (everything is on 127.0.0.1).
	edgeAddr = "127.0.0.1:8443"
	mqttAddr = "127.0.0.1:1883"
)

func TestCluster(t *testing.T) {
	if os.Getenv("OBSCURA_E2E_CLUSTER") != "1" {
		t.Skip("needs the local cluster: make e2e-cluster (sets OBSCURA_E2E_CLUSTER=1)")
	}
	smoke := os.Getenv("OBSCURA_E2E_CLUSTER_MODE") == "smoke"
	e := newEnv(t)
	defer e.writeReport()
	defer e.dumpOnFailure()

	e.phase("remove what an earlier run left", e.reset)
	e.phase("provision keys, devices and tokens", e.provision)
	e.phase("install Vault (dev server) with Kubernetes auth; the integrator key ring in it", e.installVault)
	e.phase("install cert-manager", e.installCertManager)
	e.phase("helm install --wait", e.install)
	e.phase("the edge certificate comes from cert-manager", e.checkEdgeCertificate)
	if notesPath() {
		e.phase("the NOTES' sample path verbatim: kubectl apply -k, obscura provision; every sample Ready (or Complete); deleted", e.notesSamples)
	}
	e.phase("apply the Vendor, Shuffler and Round samples", e.applySamples)
	e.phase("workloads ready", e.waitWorkloads)
	e.phase("helm test (one round through the edge)", func() {
		e.run("helm", "test", release, "-n", e.ns, "--timeout", "3m")
	})
	e.phase("a Prometheus on the node scrapes every pod (file SD) under load; every Mohito panel returns data", e.prometheusScrapesPods)
	var gw *loisRun
	e.phase("apply the HeaderGateway sample (its session stream's NATS on the node's loopback; a device and a server namespace)", func() {
		gw = e.applyGateway()
	})
	e.phase("one HTTP exchange of a device in its own namespace through the LOIS CI pod (a Prometheus on the node scraping the CI pod, the DI and the SI); the wire and the status checked", func() {
		gw.mon = e.startMonitor(e.ns)
		e.runGateway(gw)
	})
	e.phase("every LOIS dashboard panel returns data", func() {
		defer gw.mon.stop()
		gw.mon.checkDashboard("lois")
	})
	e.phase("delete the HeaderGateway", func() { e.deleteGateway(gw) })
	e.phase("an HPA drives the Round's decrypt workers through its scale subresource", e.hpaDrivesScale)
	e.phase("apply the EncounterMailbox sample (its own Redis on the node's loopback)", e.applyMailbox)
	var sddrMon *monitor
	e.phase("two devices exchange sealed messages through the edge and the EncounterMailbox (a Prometheus on the node scraping the mailbox)", func() {
		sddrMon = e.startMonitor(e.ns)
		e.mailboxExchange()
	})
	e.phase("every SDDR dashboard panel returns data", func() {
		defer sddrMon.stop()
		sddrMon.checkDashboard("sddr")
	})
	e.phase("delete the EncounterMailbox", e.deleteMailbox)
	e.phase("the EncounterSimulation sample completes as an Indexed Job of 2 shards; status sums the shards' results", e.runSimulation)
	e.phase("delete the EncounterSimulation", e.deleteSimulation)
	if !smoke || os.Getenv("OBSCURA_E2E_CLUSTER_PDA") == "1" {
		e.phase("an AggregationJob at a growing rate through the edge (mTLS passed through): the shards scale out, the sink holds the exact aggregate; every PDA dashboard panel returns data", e.pdaScaling)
	}
	if !smoke {
		e.scalingPhases()
		e.phase("helm upgrade and a Round change under load", e.upgradeUnderLoad)
		e.phase("rotate the integrator (Vault) and vendor (Secret) keys under load", e.rotateKeysUnderLoad)
	}
	if natsCluster() {
		e.phase("kill one node of the 3-node NATS mid-round under load (nats_cluster_test.go): nothing lost or duplicated, at most one round aborted", e.killNATSNodeUnderLoad)
	}
	var pps *ppsRun
	e.phase("apply the SecurePipeline sample (its garbler namespace, keys, TLS Secrets, a Redis per trust domain)", func() {
		pps = e.applyPipeline()
	})
	var ppsMon *monitor
	e.phase("one PPS execution: publishers and a subscriber over MQTT, the result checked, status reported (a Prometheus on the node scraping the broker and the garbler)", func() {
		ppsMon = e.startMonitor(e.ns, garblerNS)
		e.runPipeline(pps)
	})
	e.phase("every PPS dashboard panel returns data", func() {
		defer ppsMon.stop()
		ppsMon.checkDashboard("pps")
	})
	e.phase("scan pod logs for secrets", e.scanLogs)
	e.phase("delete the samples, helm uninstall", e.uninstall)
	e.phase("uninstall Vault and cert-manager", func() {
		e.uninstallVault()
		e.uninstallCertManager()
	})
}

// writeReport saves the figures for docs/benchmarks.md.
func (e *env) writeReport() {
	path := os.Getenv("OBSCURA_E2E_REPORT")
	if path == "" {
		return
	}
	b, _ := json.MarshalIndent(e.report, "", "  ")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		e.t.Errorf("report: %v", err)
	}
}

// dumpOnFailure logs what a failing run needs: pods, events, the operator's log tail.
func (e *env) dumpOnFailure() {
	if !e.t.Failed() {
		return
	}
	for _, args := range [][]string{
		{"get", "pods", "-A", "-o", "wide"},
		{"get", "events", "-n", e.ns, "--sort-by=.lastTimestamp"},
		{"get", "rounds,vendors,shufflers,securepipelines,headergateways", "-n", e.ns, "-o", "wide"},
		{"get", "pods,events", "-n", garblerNS},
		{"logs", "-n", e.ns, "-l", "app.kubernetes.io/component=operator", "--tail", "80"},
	} {
		out, err := e.try("kubectl", args...)
		e.t.Logf("kubectl %s:\n%s%v", strings.Join(args, " "), tail(out, 6000), errOrEmpty(err))
	}
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// waitWorkloads waits for the Round, Vendor and Shuffler to be Ready and every Deployment and
// StatefulSet in the namespace to be available.
func (e *env) waitWorkloads() {
	testenv.Eventually(e.t, 4*time.Minute, "Round, Vendor and Shuffler Ready", func() error {
		if err := e.allReady([2]string{"Vendor", vendorName}, [2]string{"Shuffler", vendorName + "-shuffler"}, [2]string{"Round", roundName}); err != nil {
			return err
		}
		return e.allAvailable()
	})
	// The roles run the suite the Round names (the deployment document they all read).
	cm := &corev1.ConfigMap{}
	if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: roundName + "-deployment"}, cm); err != nil {
		e.t.Fatalf("deployment ConfigMap of Round %s: %v", roundName, err)
	}
	if !strings.Contains(cm.Data["deployment.json"], `"suite": "MLKEM768X25519"`) {
		e.t.Fatalf("Round %s does not run the post-quantum suite:\n%s", roundName, cm.Data["deployment.json"])
	}
}

// allReady checks that each {kind, name} of objs is Ready (ready.Check).
func (e *env) allReady(objs ...[2]string) error {
	for _, r := range objs {
		u, err := e.resource(r[0], r[1])
		if err == nil {
			err = ready.Check(u)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", r[0], r[1], err)
		}
	}
	return nil
}

func (e *env) allAvailable() error {
	ctx := context.Background()
	var deps appsv1.DeploymentList
	if err := e.k.List(ctx, &deps, client.InNamespace(e.ns)); err != nil {
		return err
	}
	for _, d := range deps.Items {
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		if d.Status.AvailableReplicas < want || d.Status.UpdatedReplicas < want {
			return fmt.Errorf("deployment %s: %d/%d available", d.Name, d.Status.AvailableReplicas, want)
		}
	}
	var sts appsv1.StatefulSetList
	if err := e.k.List(ctx, &sts, client.InNamespace(e.ns)); err != nil {
		return err
	}
	for _, s := range sts.Items {
		if s.Spec.Replicas != nil && s.Status.ReadyReplicas < *s.Spec.Replicas {
			return fmt.Errorf("statefulset %s: %d/%d ready", s.Name, s.Status.ReadyReplicas, *s.Spec.Replicas)
		}
	}
	return nil
}

// roundStatus reads the figures the operator reports on the Round.
func (e *env) roundStatus() map[string]any {
	u, err := e.resource("Round", roundName)
	if err != nil {
		e.t.Fatalf("Round %s: %v", roundName, err)
	}
	st, _, _ := unstructured.NestedMap(u.Object, "status")
	return st
}

// uninstall deletes the samples (the operator removes their finalizers and registry entries),
// uninstalls the release and checks that nothing of it is left.
func (e *env) uninstall() {
	e.deletePipeline()
	// The second vendor joined only in full mode: --ignore-not-found.
	e.run("kubectl", append([]string{"delete", "-n", e.ns, "--wait", "--timeout", "2m", "--ignore-not-found"}, seriesObjects()...)...)
	e.run("helm", "uninstall", release, "-n", e.ns, "--wait", "--timeout", "3m")
	for _, s := range e.createdSecrets {
		e.run("kubectl", "delete", "secret", "-n", e.ns, s, "--ignore-not-found")
	}
	testenv.Eventually(e.t, 2*time.Minute, "nothing left in the namespace", func() error {
		var left []string
		for _, kind := range []string{"pods", "deployments", "statefulsets", "services", "configmaps", "secrets", "serviceaccounts",
			"roles", "rolebindings", "poddisruptionbudgets", "networkpolicies", "jobs"} {
			out, err := e.try("kubectl", "get", kind, "-n", e.ns, "-o", "name")
			if err != nil {
				return err
			}
			for _, l := range strings.Fields(out) {
				// Kubernetes itself keeps these in every namespace.
				if l == "configmap/kube-root-ca.crt" || l == "serviceaccount/default" {
					continue
				}
				left = append(left, l)
			}
		}
		for _, kind := range []string{"clusterroles", "clusterrolebindings"} {
			out, err := e.try("kubectl", "get", kind, "-l", "app.kubernetes.io/instance="+release, "-o", "name")
			if err != nil {
				return err
			}
			left = append(left, strings.Fields(out)...)
		}
		if len(left) > 0 {
			return fmt.Errorf("left behind: %s", strings.Join(left, " "))
		}
		return nil
	})
	e.run("kubectl", "delete", "namespace", e.ns, "--wait", "--timeout", "2m")
	// The CRDs stay (Helm never deletes crds/ on uninstall, so that custom resources of other
	// releases survive); the test removes them to leave the cluster as it found it.
	out := e.run("kubectl", "get", "crd", "-o", "name")
	for _, c := range strings.Fields(out) {
		if strings.HasSuffix(c, ".obscura.dev") {
			e.run("kubectl", "delete", c, "--wait", "--timeout", "1m")
		}
	}
}

// writeFile writes a file into the run's directory.
func (e *env) writeFile(name string, b []byte) string {
	p := filepath.Join(e.dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// imageValues turns the built images into the chart's images.<name>.repository/tag values.
func (e *env) imageValues() []string {
	chartName := map[string]string{"operator": "operator", "obscura": "obscura", "mohito": "mohito", "pda": "pda", "pps": "pps", "lois": "lois", "sddr": "sddr", "nats-server": "nats", "redis": "redis", "envoy": "envoy"}
	var args []string
	for comp, ref := range e.images {
		name, ok := chartName[comp]
		if !ok {
			continue
		}
		i := strings.LastIndex(ref, ":")
		// --set-string: a content-hash tag can be all digits, which --set reads as a number
		// and the schema refuses (the smoke of 18:10: "/images/mohito/tag: got number").
		args = append(args, "--set-string", fmt.Sprintf("images.%s.repository=%s,images.%s.tag=%s", name, ref[:i], name, ref[i+1:]))
	}
	if len(args) != 2*len(chartName) {
		e.t.Fatalf("images.json lacks some of %v: %v", chartName, e.images)
	}
	return args
}

// helmArgs are the settings of this run's release (install and upgrade).
func (e *env) helmArgs(extra ...string) []string {
	args := []string{release, filepath.Join(e.root, "charts/obscura"), "-n", e.ns,
		"-f", filepath.Join(e.root, "charts/obscura/values-local.yaml"),
		"--set", "edge.round=" + roundName,
		"--set", "tests.tokenSecret.name=obscura-smoke-token", "--set", "tests.tokenSecret.key=token",
		"--set", "vault.address=" + vaultAddr,
		"--set", "edge.sddrMailbox.enabled=true",
		// PDA participants through the edge (pda_test.go).
		"--set", "edge.pdaProxy.enabled=true", "--set", "edge.pdaProxy.job=" + pdaJobName, "--set", "edge.pdaProxy.namespace=" + pdaProxyNS,
		"--wait", "--timeout", "5m"}
	if notesPath() {
		// The images as `make images` pins them (repository, tag, digest): docs/chart.md's install.
		args = append(args, "-f", filepath.Join(e.root, "hack/images/out/values-images.yaml"))
	} else {
		args = append(args, e.imageValues()...)
	}
	args = append(args, natsClusterValues()...)
	return append(args, extra...)
}

// install is the README's local-cluster path: helm install --wait.
func (e *env) install() {
	e.run("helm", append([]string{"install"}, e.helmArgs()...)...)
	e.edgeServerName = "localhost"
}

// upgrade changes a setting of the release (the operator's log level rolls its pod).
func (e *env) upgrade() {
	e.run("helm", append([]string{"upgrade"}, e.helmArgs("--set", "operator.logLevel=debug")...)...)
	st := e.run("helm", "status", release, "-n", e.ns, "-o", "json")
	var s struct {
		Version int `json:"version"`
		Info    struct {
			Status string `json:"status"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(st), &s); err != nil || s.Version != 2 || s.Info.Status != "deployed" {
		e.t.Fatalf("after the upgrade: %s (%v)", tail(st, 500), err)
	}
}

// podLogs calls f with every container log of the namespace (and the PPS garbler's) since the
// run started: the archive of the kubelet's files under the cluster's state dir (restarted
// containers' earlier logs and pods deleted since included, logarchive_test.go), and returns how
// many files and bytes it read.
func (e *env) podLogs(f func(path string, b []byte)) (files, size int) {
	if err := e.logs.sync(); err != nil {
		e.t.Fatalf("pod log archive: %v", err)
	}
	dir := e.logs.dst
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		size += len(b)
		f(strings.TrimPrefix(path, dir+"/"), b)
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if files == 0 {
		e.t.Fatalf("no pod log of namespace %s under %s", e.ns, dir)
	}
	return files, size
}

// scanLogs fails on any secret of the run in any pod log of the namespace.
func (e *env) scanLogs() {
	aborts := map[string]int{}
	files, bytes := e.podLogs(func(path string, b []byte) {
		// The NATS server holds every device's login and routes the device subjects
		// (mohito.dev.<id>.cmd): device ids are its to know (docs/operators.md), and its own
		// warnings (a slow subscription) name the subject. Every other secret is still looked
		// for in its log.
		natsServer := strings.Contains(path, "_"+release+"-nats-") && strings.Contains(path, "/nats/")
		for what, v := range e.secrets {
			if len(v) < 4 || natsServer && strings.HasPrefix(what, "device id ") {
				continue
			}
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, v) {
					// The line, with the secret itself cut out, says which code logged it.
					e.t.Errorf("%s appears in %s: %s", what, path, tail(strings.ReplaceAll(l, v, "<"+what+">"), 400))
					break
				}
			}
		}
		// Why rounds aborted, for the report (the coordinator logs each with its reason).
		for _, l := range strings.Split(string(b), "\n") {
			if i := strings.Index(l, `"msg":"round aborted"`); i >= 0 {
				reason := "?"
				if j := strings.Index(l, `"reason":"`); j >= 0 {
					reason, _, _ = strings.Cut(l[j+len(`"reason":"`):], `"`)
				}
				aborts[reason]++
			}
		}
	})
	if len(aborts) > 0 {
		e.report.Notes = append(e.report.Notes, fmt.Sprintf("rounds aborted over the whole run, by reason: %v", aborts))
	}
	e.t.Logf("scanned %d log files (%d bytes) for %d secrets", files, bytes, len(e.secrets))
	e.report.Notes = append(e.report.Notes, fmt.Sprintf("log scan: %d files, %d bytes, %d secrets, none found", files, bytes, len(e.secrets)))
}

// reset removes a release and namespace an interrupted earlier run left behind.
func (e *env) reset() {
	e.uninstallVault()
	defer e.uninstallCertManager() // after the release, whose Certificates it finalizes
	e.deletePipeline()
	if _, err := e.try("kubectl", "get", "namespace", e.ns); err != nil {
		return
	}
	e.t.Logf("namespace %s exists: removing an earlier run", e.ns)
	_, _ = e.try("kubectl", append([]string{"delete", "-n", e.ns, "--wait", "--timeout", "2m", "--ignore-not-found"}, seriesObjects()...)...)
	_, _ = e.try("helm", "uninstall", release, "-n", e.ns, "--wait", "--timeout", "2m", "--ignore-not-found")
	e.run("kubectl", "delete", "namespace", e.ns, "--wait", "--timeout", "3m")
}
