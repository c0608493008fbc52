// Package testenv starts real servers for tests in every module of the repository
// (services, operators, e2e) and cleans them up: an embedded nats-server with JetStream
// (StartNATS, optionally with accounts and an MQTT listener), a redis-server process
// (StartRedis), an Envoy process with a bootstrap template (StartEnvoy), and kube-apiserver
// plus etcd through controller-runtime's envtest with the repository's CRDs installed
// (StartAPIServer). There are no mocks: a test talks to the same server software the
// platform runs. The binaries are the pinned ones in <root>/bin, installed by `make tools`
// (hack/tools.sh); nothing is ever downloaded, and a missing binary fails the test with the
// command that installs it.
//
// Everything listens on 127.0.0.1 only, on free ports chosen at start, so tests run in
// parallel and never expose or reach anything beyond the machine. The starters enforce it:
// NATS options and Envoy listeners naming another address are refused, Redis's --bind and
// --port belong to the harness, and kube-apiserver advertises 127.0.0.1. A starter prints
// nothing when it succeeds. When a server does not come up, the error names the binary, the
// address and the configuration file, and ends with the tail of the server's log. Readiness
// is polled with a deadline (PING, /ready, /healthz), never slept for.
//
// Every process is stopped at cleanup (SIGTERM, then SIGKILL) and is started with a
// parent-death signal, so that it also dies when the test binary panics, times out or is
// killed. Logs and data live under t.TempDir(); the API server's, which has no testing.TB,
// under a temporary directory that Stop removes (or the next start, if the binary died).
//
// Per test, with a testing.TB:
//
//	n := testenv.StartNATS(t, testenv.WithMQTT())
//	js := n.JetStream(t)
//	rdb := testenv.StartRedis(t).Client()
//	edge := testenv.StartEnvoy(t, bootstrapTemplate, 1) // template fields: see EnvoyPorts
//
// An API server takes a few seconds to start, so a package usually shares one from TestMain
// (StartAPIServerT is the per-test form). Set controller-runtime's logger first: envtest logs
// through it, and controller-runtime prints a warning with a stack trace when nobody did.
//
//	var api *testenv.APIServer
//
//	func TestMain(m *testing.M) {
//		ctrllog.SetLogger(zap.New(zap.WriteTo(io.Discard)))
//		var err error
//		if api, err = testenv.StartAPIServer(testenv.APIServerOptions{}); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		code := m.Run()
//		if err := api.Stop(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			code = 1
//		}
//		os.Exit(code)
//	}
//
// and in a test: c, err := api.Client(scheme), with a scheme holding client-go's types and
// the project's API groups.
package testenv
