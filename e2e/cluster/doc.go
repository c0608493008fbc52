// Package cluster is the end-to-end test of the `helm install` path on a real single-node
// Kubernetes cluster (hack/cluster, docs/cluster.md): the chart installs the operator, NATS,
// Redis and the Envoy edge from the images hack/images built offline; the Vendor, Shuffler and
// Round samples become running workloads; a load generator drives users through the edge and
// devices over MQTT at ×1, ×2 and ×4 load while the operator scales the decryption workers;
// `helm upgrade` and a Round parameter change lose no command; `helm uninstall` leaves
// nothing; the SecurePipeline sample runs one execution through the real PPS broker and
// garbler whose unmasked result is checked; no pod log holds key material, a token or a device
// id.
//
// It runs only with OBSCURA_E2E_CLUSTER=1 against a running cluster whose containerd holds
// the images: `make e2e-cluster` does all of it (cluster up, images, import, test, down).
package cluster
