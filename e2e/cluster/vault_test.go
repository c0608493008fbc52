package cluster

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/obscura-iot/obscura/services/testenv"
)

// Vault in the cluster (issue: cert-manager and Vault in the cluster). A dev server (in-memory,
// unsealed, image built from bin/vault by hack/images) runs as a hostNetwork pod on
// 127.0.0.1:8200; the Kubernetes auth method reviews the workloads' service account tokens
// against the cluster's API server; the integrator's key ring is the KV v2 folder
// mohito/integrator/, which the Round references (keys.vault) and the chart's vault.address
// completes.
const (
	vaultNS        = "obscura-vault"
	vaultAddr      = "http://127.0.0.1:8200"
	vaultRole      = "integrator"
	vaultKeyFolder = "mohito/integrator/"
	vaultReviewer  = "vault-token-reviewer"
	vaultCRB       = "obscura-e2e-vault-token-reviewer"
)

const vaultManifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: vault
  namespace: %[1]s
  labels: {app.kubernetes.io/name: vault}
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector:
    matchLabels: {app.kubernetes.io/name: vault}
  template:
    metadata:
      labels: {app.kubernetes.io/name: vault}
    spec:
      hostNetwork: true
      automountServiceAccountToken: false
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        seccompProfile: {type: RuntimeDefault}
      containers:
        - name: vault
          image: %[2]s
          imagePullPolicy: Never
          args: [server, -dev, -dev-listen-address=127.0.0.1:8200]
          env:
            - name: VAULT_DEV_ROOT_TOKEN_ID
              valueFrom: {secretKeyRef: {name: vault-dev-token, key: token}}
            - {name: VAULT_ADDR, value: "http://127.0.0.1:8200"}
            - {name: HOME, value: /tmp}
          # An HTTP probe, not an exec of vault status: one every 2 s costs a runc exec and
          # a start of the 400 MB vault binary on the 2-core node throughout the run.
          readinessProbe:
            httpGet: {host: 127.0.0.1, port: 8200, path: /v1/sys/health}
            periodSeconds: 2
          resources:
            requests: {cpu: 10m, memory: 64Mi}
            limits: {memory: 768Mi}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL]}
          volumeMounts:
            - {name: tmp, mountPath: /tmp}
      volumes:
        - {name: tmp, emptyDir: {}}
`

// vaultPolicy lets the integrator's workloads list the key folder and read its epochs.
const vaultPolicy = `path "secret/metadata/mohito/integrator/" { capabilities = ["list"] }
path "secret/data/mohito/integrator/*" { capabilities = ["read"] }
`

// randomToken is a fresh 128-bit hex string (a Vault root token of this throwaway server).
func randomToken() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// vault runs bin/vault against the dev server with the root token (never on the command line).
func (e *env) vault(args ...string) string {
	e.t.Helper()
	out, err := e.tryEnv([]string{"VAULT_ADDR=" + vaultAddr, "VAULT_TOKEN=" + e.vaultToken}, "vault", args...)
	if err != nil {
		e.t.Fatalf("vault %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// installVault starts the dev server, turns on Kubernetes auth and stores the integrator's key
// as epoch 0 of its ring.
func (e *env) installVault() {
	e.vaultToken = randomToken()
	e.secrets["vault root token"] = e.vaultToken
	ctx := context.Background()
	if err := e.k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: vaultNS}}); err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatal(err)
	}
	if err := e.k.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "vault-dev-token", Namespace: vaultNS},
		Data: map[string][]byte{"token": []byte(e.vaultToken)}}); err != nil {
		e.t.Fatal(err)
	}
	image, ok := e.images["vault"]
	if !ok {
		e.t.Fatal("images.json has no vault image: hack/images/images.sh build")
	}
	e.run("kubectl", "apply", "-f", e.writeFile("vault.yaml", fmt.Appendf(nil, vaultManifest, vaultNS, image)))
	e.run("kubectl", "rollout", "status", "-n", vaultNS, "deployment/vault", "--timeout", "3m")

	// The token reviewer: a service account allowed to call TokenReview, whose short-lived
	// token Vault presents when it checks a workload's token.
	e.run("kubectl", "create", "serviceaccount", "-n", vaultNS, vaultReviewer)
	e.run("kubectl", "create", "clusterrolebinding", vaultCRB, "--clusterrole=system:auth-delegator",
		"--serviceaccount="+vaultNS+":"+vaultReviewer)
	reviewer := strings.TrimSpace(e.run("kubectl", "create", "token", "-n", vaultNS, vaultReviewer, "--duration=2h"))
	e.secrets["vault token reviewer JWT"] = reviewer
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		e.t.Fatal(err)
	}
	ca := cfg.CAData
	if len(ca) == 0 {
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			e.t.Fatalf("the cluster's CA: %v", err)
		}
	}
	e.vault("auth", "enable", "kubernetes")
	e.vault("write", "auth/kubernetes/config", "kubernetes_host="+cfg.Host,
		"kubernetes_ca_cert=@"+e.writeFile("cluster-ca.crt", ca), "token_reviewer_jwt=@"+e.writeFile("reviewer.jwt", []byte(reviewer)))
	e.vault("policy", "write", vaultRole, e.writeFile("integrator.hcl", []byte(vaultPolicy)))
	e.vault("write", "auth/kubernetes/role/"+vaultRole,
		"bound_service_account_names="+roundName+"-integrator", "bound_service_account_namespaces="+e.ns,
		"token_policies="+vaultRole, "token_ttl=10m")
	e.putVaultKey(0, e.readProvision("integrator.key"))
	e.report.Notes = append(e.report.Notes, strings.TrimSpace(e.vault("version"))+
		" dev server in the cluster: the integrator key ring is read through the Kubernetes auth method")
}

// putVaultKey writes epoch n of the integrator's key ring (base64 text) into the KV folder.
func (e *env) putVaultKey(n int, b64 []byte) {
	e.vault("kv", "put", "-mount=secret", fmt.Sprintf("%sepoch-%d", vaultKeyFolder, n),
		"private_key=@"+e.writeFile(fmt.Sprintf("integrator-epoch-%d.key", n), []byte(strings.TrimSpace(string(b64)))))
}

// roundOnVault is the Round sample with its key taken from Vault instead of a Secret: the
// folder reference (a key ring), no address (the chart's vault.address fills it in).
func (e *env) roundOnVault() string {
	b, err := os.ReadFile(filepath.Join(e.root, "config/samples/mohito_v1alpha1_round.yaml"))
	if err != nil {
		e.t.Fatal(err)
	}
	var rd map[string]any
	if err := yaml.Unmarshal(b, &rd); err != nil {
		e.t.Fatal(err)
	}
	spec := rd["spec"].(map[string]any)
	spec["keys"] = map[string]any{"vault": map[string]any{"role": vaultRole, "path": vaultKeyFolder}}
	// The cluster runs the post-quantum suite (ML-KEM-768 + X25519, issue 15 #13): X25519 runs in
	// every other service-level test, this suite nowhere else through pods. Its keys are 32-byte
	// seeds, as newKey writes them.
	spec["suite"] = "MLKEM768X25519"
	out, err := yaml.Marshal(rd)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.writeFile("round-vault.yaml", out)
}

// uninstallVault removes the dev server, its namespace and the reviewer's binding.
func (e *env) uninstallVault() {
	_, _ = e.try("kubectl", "delete", "clusterrolebinding", vaultCRB, "--ignore-not-found")
	_, _ = e.try("kubectl", "delete", "namespace", vaultNS, "--ignore-not-found", "--wait", "--timeout", "2m")
}

// newKey is a fresh 32-byte private key as base64 text (what mohito provision writes).
func newKey() []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic(err)
	}
	return []byte(base64.StdEncoding.EncodeToString(k))
}

// rotateKeysUnderLoad adds epoch 1 of the integrator's key (Vault folder) and of the vendor's
// (key ring Secret) while users send, and checks that every role picks it up live: the vendor's
// status and Event, the roles' logs, no command lost or duplicated, no round aborted for a key.
func (e *env) rotateKeysUnderLoad() {
	ab0 := e.counter("abortedRounds")
	since := time.Now()
	wait := e.driveInBackground("rotate", baseUsers, 130*time.Second)
	time.Sleep(10 * time.Second)
	ik, vk := newKey(), newKey()
	e.secretsAdd("integrator key epoch 1", ik)
	e.secretsAdd("vendor key epoch 1", vk)
	e.putVaultKey(1, ik)
	e.secret(vendorName+"-vendor-key", map[string][]byte{"epoch-0.key": e.readProvision("vendor-0.key"), "epoch-1.key": vk})

	testenv.Eventually(e.t, 2*time.Minute, "Vendor status.keyEpochs [0 1] and a KeyEpochRotated Event", func() error {
		u, err := e.resource("Vendor", vendorName)
		if err != nil {
			return err
		}
		eps, _, _ := unstructuredInts(u.Object, "status", "keyEpochs")
		if fmt.Sprint(eps) != "[0 1]" {
			return fmt.Errorf("status.keyEpochs = %v", eps)
		}
		out, err := e.try("kubectl", "get", "events", "-n", e.ns, "--field-selector", "reason=KeyEpochRotated", "-o", "name")
		if err != nil || strings.TrimSpace(out) == "" {
			return fmt.Errorf("no KeyEpochRotated Event yet (%v)", err)
		}
		return nil
	})
	// Staged within the kubelet's 10 s sync plus the 15 s reload; active 45 s later
	// (values-local.yaml); then the coordinator names the new epochs.
	testenv.Eventually(e.t, 3*time.Minute, "every key-holding role activated epoch 1", func() error {
		for d, msg := range map[string]string{
			roundName + "-coordinator": "integrator key epoch in force", roundName + "-decrypt-worker": "key epoch active",
			vendorName + "-shuffler": "key epoch active", vendorName + "-vendor-agent": "key epoch active",
		} {
			out, err := e.try("kubectl", "logs", "-n", e.ns, "deployment/"+d, "--since-time="+since.UTC().Format(time.RFC3339))
			if err != nil {
				return err
			}
			if !logHas(out, msg, `"epoch":1`) {
				return fmt.Errorf("%s has not logged %q for epoch 1 yet", d, msg)
			}
		}
		return nil
	})
	sum := wait()
	if num(sum["failed"]) > 0 || num(sum["duplicated"]) > 0 {
		e.t.Errorf("commands lost or duplicated across the key rotation: %v failed, %v duplicated of %v", sum["failed"], sum["duplicated"], sum["sent"])
	}
	// No role of any pod may have met a round naming an epoch it did not hold.
	e.podLogs(func(path string, b []byte) {
		if strings.Contains(string(b), "key epoch not held") {
			e.t.Errorf("%s met a round naming a key epoch it did not hold", path)
		}
	})
	aborted := e.counter("abortedRounds") - ab0
	e.report.Notes = append(e.report.Notes, fmt.Sprintf("key rotation under load (integrator in Vault, vendor in a Secret): %.0f sent, %.0f answered, %.0f failed, %.0f duplicated, %d rounds aborted, none for a key epoch",
		num(sum["sent"]), num(sum["commands"]), num(sum["failed"]), num(sum["duplicated"]), aborted))
}

// secretsAdd adds a value no pod log may contain, with its hex form when it is base64.
func (e *env) secretsAdd(what string, b64 []byte) {
	s := strings.TrimSpace(string(b64))
	e.secrets[what+" (base64)"] = s
	if raw, err := base64.StdEncoding.DecodeString(s); err == nil {
		e.secrets[what+" (hex)"] = hex.EncodeToString(raw)
	}
}

// logHas reports whether one line of a JSON log holds every part.
func logHas(log string, parts ...string) bool {
	for _, l := range strings.Split(log, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// unstructuredInts reads a list of integers from an unstructured object.
func unstructuredInts(obj map[string]any, fields ...string) ([]int64, bool, error) {
	l, ok, err := unstructured.NestedSlice(obj, fields...)
	if !ok || err != nil {
		return nil, ok, err
	}
	out := make([]int64, 0, len(l))
	for _, v := range l {
		switch n := v.(type) {
		case int64:
			out = append(out, n)
		case float64:
			out = append(out, int64(n))
		default:
			return nil, true, fmt.Errorf("%v is not an integer", v)
		}
	}
	return out, true, nil
}
