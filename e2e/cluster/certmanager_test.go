package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/obscura-iot/obscura/services/testenv"
)

// cert-manager in the cluster. Its controller is built from the published cert-manager module's
// controller packages with our own main (hack/tools/cert-manager: the upstream cmd/ modules are
// not served by the module proxy) and runs as a hostNetwork pod; its CRDs come from the same
// module. The chart sees cert-manager.io/v1 served and issues the Envoy edge's certificate
// through it: a self-signed root, a CA Issuer, the edge Certificate (docs/chart.md).
const (
	certManagerNS   = "cert-manager"
	certManagerRole = "obscura-e2e-cert-manager"
)

const certManagerManifest = `apiVersion: v1
kind: ServiceAccount
metadata: {name: cert-manager, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: %[2]s}
rules:
  - apiGroups: [cert-manager.io]
    resources: [certificates, certificates/status, certificates/finalizers, certificaterequests, certificaterequests/status, certificaterequests/finalizers, issuers, issuers/status, clusterissuers, clusterissuers/status]
    verbs: [get, list, watch, create, update, patch, delete]
  - apiGroups: [cert-manager.io]
    resources: [signers]
    verbs: [approve]
  - apiGroups: [acme.cert-manager.io]
    resources: [orders, challenges]
    verbs: [get, list, watch]
  - apiGroups: [""]
    resources: [secrets]
    verbs: [get, list, watch, create, update, patch, delete]
  - apiGroups: [""]
    resources: [events]
    verbs: [create, patch]
  - apiGroups: [events.k8s.io]
    resources: [events]
    verbs: [create, patch]
  - apiGroups: [authorization.k8s.io]
    resources: [subjectaccessreviews]
    verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: %[2]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %[2]s}
subjects:
  - {kind: ServiceAccount, name: cert-manager, namespace: %[1]s}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: cert-manager
  namespace: %[1]s
  labels: {app.kubernetes.io/name: cert-manager}
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector:
    matchLabels: {app.kubernetes.io/name: cert-manager}
  template:
    metadata:
      labels: {app.kubernetes.io/name: cert-manager}
    spec:
      hostNetwork: true
      serviceAccountName: cert-manager
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        seccompProfile: {type: RuntimeDefault}
      containers:
        - name: controller
          image: %[3]s
          imagePullPolicy: Never
          args: [--cluster-resource-namespace=%[1]s, --health-addr=127.0.0.1:9403, --enable-certificate-owner-ref=true]
          readinessProbe:
            httpGet: {host: 127.0.0.1, port: 9403, path: /readyz}
            periodSeconds: 2
          livenessProbe:
            httpGet: {host: 127.0.0.1, port: 9403, path: /healthz}
            periodSeconds: 10
          resources:
            requests: {cpu: 10m, memory: 64Mi}
            limits: {memory: 512Mi}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL]}
`

// certManagerCRDs returns the CRD files of the cert-manager module the controller is built from.
func (e *env) certManagerCRDs() []string {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager")
	cmd.Dir = filepath.Join(e.root, "hack/tools/cert-manager")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		e.t.Fatalf("locate the cert-manager module: %v", err)
	}
	files, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		e.t.Fatalf("no cert-manager CRDs under %s (%v)", strings.TrimSpace(string(out)), err)
	}
	return files
}

// installCertManager applies the CRDs and runs the controller; it waits until it is ready.
func (e *env) installCertManager() {
	image, ok := e.images["cert-manager"]
	if !ok {
		e.t.Fatal("images.json has no cert-manager image: hack/images/images.sh build")
	}
	for _, f := range e.certManagerCRDs() {
		e.run("kubectl", "apply", "--server-side", "-f", f)
	}
	// kubectl wait fails at once ("accessor error: <nil>") on a CRD whose status has no
	// conditions yet, instead of waiting for them (a full run at 20:39 on a loaded machine).
	testenv.Eventually(e.t, 2*time.Minute, "cert-manager CRDs established", func() error {
		_, err := e.try("kubectl", "wait", "--for=condition=Established", "--timeout=30s",
			"crd/certificates.cert-manager.io", "crd/issuers.cert-manager.io", "crd/certificaterequests.cert-manager.io")
		return err
	})
	e.run("kubectl", "create", "namespace", certManagerNS)
	e.run("kubectl", "apply", "-f", e.writeFile("cert-manager.yaml", fmt.Appendf(nil, certManagerManifest, certManagerNS, certManagerRole, image)))
	e.run("kubectl", "rollout", "status", "-n", certManagerNS, "deployment/cert-manager", "--timeout", "3m")
}

// checkEdgeCertificate checks that cert-manager issued the edge's certificate (the chart chose
// it because cert-manager.io/v1 is served) and that the Secret Envoy serves is cert-manager's.
func (e *env) checkEdgeCertificate() {
	testenv.Eventually(e.t, time.Minute, "the edge Certificate Ready", func() error {
		out, err := e.try("kubectl", "get", "certificate", "-n", e.ns, release+"-edge",
			"-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "True" {
			return fmt.Errorf("Ready = %q", out)
		}
		return nil
	})
	out := e.run("kubectl", "get", "secret", "-n", e.ns, release+"-edge-tls",
		"-o", `jsonpath={.metadata.annotations.cert-manager\.io/certificate-name}`)
	if strings.TrimSpace(out) != release+"-edge" {
		e.t.Fatalf("the edge's TLS Secret was not issued by cert-manager (certificate-name annotation %q)", out)
	}
	e.report.Notes = append(e.report.Notes, "cert-manager (controller built from the cert-manager v1.21.2 module's controller packages) issued the edge certificate: self-signed root → CA Issuer → Certificate")
}

// uninstallCertManager removes the controller, its RBAC and the CRDs.
func (e *env) uninstallCertManager() {
	_, _ = e.try("kubectl", "delete", "namespace", certManagerNS, "--ignore-not-found", "--wait", "--timeout", "2m")
	_, _ = e.try("kubectl", "delete", "clusterrolebinding,clusterrole", certManagerRole, "--ignore-not-found")
	out, _ := e.try("kubectl", "get", "crd", "-o", "name")
	for _, c := range strings.Fields(out) {
		if strings.HasSuffix(c, ".cert-manager.io") {
			_, _ = e.try("kubectl", "delete", c, "--ignore-not-found", "--wait", "--timeout", "1m")
		}
	}
}
