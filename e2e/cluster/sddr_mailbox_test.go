package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/e2e/internal/ready"
	"github.com/obscura-iot/obscura/e2e/internal/sddrrun"
	"github.com/obscura-iot/obscura/services/testenv"
)

// The EncounterMailbox sample (config/samples/sddr_v1alpha1_encountermailbox.yaml) in this
// run: the operator runs the mailbox API as a host-network pod on 127.0.0.1:8090 (the
// sample's port), in front of a Redis of its own on a port of the node no other pod uses; the
// release's edge routes /v1/mailboxes/ to it (edge.sddrMailbox, helmArgs).
const (
	sddrAPI      = "sddr.obscura.dev/v1alpha1"
	mailboxName  = "mailbox"
	mailboxRedis = "127.0.0.1:6392"
)

func (e *env) mailbox() (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(sddrAPI)
	u.SetKind("EncounterMailbox")
	return u, e.k.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: mailboxName}, u)
}

// applyMailbox runs the mailbox's own Redis and applies the sample with its address.
func (e *env) applyMailbox() {
	e.t.Helper()
	e.redis(e.ns, "redis-sddr-mailbox", mailboxRedis)
	u := e.readSample("sddr_v1alpha1_encountermailbox.yaml")
	if err := unstructured.SetNestedField(u.Object, mailboxRedis, "spec", "redis", "address"); err != nil {
		e.t.Fatal(err)
	}
	u.SetNamespace(e.ns)
	if err := e.k.Create(context.Background(), u); err != nil {
		e.t.Fatalf("apply the EncounterMailbox sample: %v", err)
	}
}

// mailboxExchange waits for the mailbox to be Ready, then two devices that met exchange
// sealed messages through the edge (TLS with the cert-manager certificate, h2, the edge's
// per-client limit): A seals and puts, B gets and opens, and back. The encounter id, the
// mailbox address, the tokens and the plaintexts become secrets no pod log may hold.
func (e *env) mailboxExchange() {
	e.t.Helper()
	testenv.Eventually(e.t, 3*time.Minute, "EncounterMailbox "+mailboxName+" Ready with 1 replica", func() error {
		u, err := e.mailbox()
		if err != nil {
			return err
		}
		if err := ready.Check(u); err != nil {
			return err
		}
		if n, _, _ := unstructured.NestedInt64(u.Object, "status", "readyReplicas"); n != 1 {
			return fmt.Errorf("readyReplicas %d", n)
		}
		return nil
	})
	ca, err := os.ReadFile(e.edgeCA())
	if err != nil {
		e.t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		e.t.Fatal("the edge's CA holds no certificate")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: e.edgeServerName, MinVersion: tls.VersionTLS12},
		Protocols: new(http.Protocols)}
	tr.Protocols.SetHTTP2(true)
	defer tr.CloseIdleConnections()
	h := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var last error
	testenv.Eventually(e.t, time.Minute, "a mailbox exchange through the edge", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		r, err := sddrrun.Exchange(ctx, "https://"+edgeAddr, h)
		if r != nil {
			e.secrets["SDDR encounter id"] = hex.EncodeToString(r.Pair.ID[:])
			e.secrets["SDDR mailbox address"] = r.Pair.BoxA.Address.String()
			e.secrets["SDDR client token A"], e.secrets["SDDR client token B"] = r.TokenA, r.TokenB
			e.secrets["SDDR message"], e.secrets["SDDR reply"] = string(r.Hello), string(r.Reply)
		}
		last = err
		return err
	})
	e.t.Logf("two devices exchanged sealed messages through the edge and the EncounterMailbox (last error: %v)", last)
}

// deleteMailbox deletes the sample (its Deployment and Service go with it) and its Redis.
func (e *env) deleteMailbox() {
	_, _ = e.try("kubectl", "delete", "-n", e.ns, "--wait", "--timeout", "2m", "--ignore-not-found", "encountermailboxes.sddr.obscura.dev/"+mailboxName)
	_, _ = e.try("kubectl", "delete", "-n", e.ns, "--ignore-not-found", "deployment/redis-sddr-mailbox")
}
