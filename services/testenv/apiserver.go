package testenv

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// APIServerOptions configures StartAPIServer. The zero value is a plain API server with the
// repository's CRDs.
type APIServerOptions struct {
	// CRDDirs are installed in addition to <root>/crds, which is installed when it exists.
	// Every directory named here must exist.
	CRDDirs []string
	// Flags are extra kube-apiserver flags, name without dashes to value
	// (e.g. "feature-gates": "MutatingAdmissionPolicy=true"). They override the defaults.
	Flags map[string]string
	// StartTimeout bounds the start of etcd and of kube-apiserver, each; default 60s
	// (a cold kube-apiserver on two cores needs well over envtest's 20s default).
	StartTimeout time.Duration
}

// APIServer is a kube-apiserver and etcd pair started by StartAPIServer through envtest.
type APIServer struct {
	// Config reaches the API server as a system:masters user, over https://127.0.0.1.
	Config *rest.Config
	// KubeConfig is Config as a kubeconfig file's contents, for tools such as helm.
	KubeConfig []byte
	// CRDs are the CustomResourceDefinitions installed and established at start.
	CRDs []*apiextensionsv1.CustomResourceDefinition

	env  *envtest.Environment
	dir  string
	logs []*os.File
}

// Client builds a controller-runtime client for the given scheme (which must hold every type
// the caller reads or writes, e.g. clientgoscheme plus the project's API groups).
func (a *APIServer) Client(scheme *k8sruntime.Scheme) (client.Client, error) {
	c, err := client.New(a.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("client for API server %s: %w", a.Config.Host, err)
	}
	return c, nil
}

// ClientT returns a client of the API server with client-go's scheme (the built-in kinds;
// custom resources as unstructured objects) and fails t if it cannot be made.
func (a *APIServer) ClientT(t testing.TB) client.Client {
	t.Helper()
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := a.Client(scheme)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Stop stops kube-apiserver and etcd and removes their files. It is safe to call twice.
func (a *APIServer) Stop() error {
	if a.env == nil {
		return nil
	}
	err := a.env.Stop()
	if err != nil {
		err = fmt.Errorf("stop API server %s: %w", a.Config.Host, err)
	}
	a.env = nil
	for _, f := range a.logs {
		f.Close()
	}
	return errors.Join(err, os.RemoveAll(a.dir))
}

// StartAPIServer starts etcd and kube-apiserver from <root>/bin with envtest, both on
// 127.0.0.1 and free ports, and installs the CRDs. It needs no testing.TB so one API server
// can serve a whole test package from TestMain; the caller must call Stop. On failure it
// stops whatever started and returns an error holding both servers' log tails (or, when
// only a CRD was refused, the API server's reason).
//
// Both binaries are started through util-linux `setpriv --pdeathsig KILL` when it is present,
// so that they die with the test binary even when no Stop runs (envtest starts them itself
// and offers no hook for a parent-death signal).
func StartAPIServer(opts APIServerOptions) (*APIServer, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, fmt.Errorf("testenv: start API server: %w", err)
	}
	apiserverBin, err := Bin("kube-apiserver")
	if err != nil {
		return nil, fmt.Errorf("testenv: start API server: %w", err)
	}
	etcdBin, err := Bin("etcd")
	if err != nil {
		return nil, fmt.Errorf("testenv: start API server: %w", err)
	}
	crdDirs := append([]string(nil), opts.CRDDirs...)
	if rootCRDs := filepath.Join(root, "crds"); isDir(rootCRDs) {
		crdDirs = append([]string{rootCRDs}, crdDirs...)
	}
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, fmt.Errorf("testenv: start API server: %w", err)
	}

	removeOrphanedDirs()
	dir, err := os.MkdirTemp("", apiserverDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("testenv: start API server: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("testenv: start API server: %w", err)
	}
	a := &APIServer{dir: dir}
	fail := func(err error) (*APIServer, error) {
		msg := fmt.Sprintf("testenv: start API server (%s, %s): %v", apiserverBin, etcdBin, err)
		for _, f := range a.logs {
			msg += "\n" + logTail(f.Name(), 20)
		}
		if a.env != nil {
			_ = a.env.Stop()
		}
		for _, f := range a.logs {
			f.Close()
		}
		_ = os.RemoveAll(dir)
		return nil, errors.New(msg)
	}
	openLog := func(name string) (*os.File, error) {
		f, err := os.Create(filepath.Join(dir, name))
		if err == nil {
			a.logs = append(a.logs, f)
		}
		return f, err
	}
	if apiserverBin, err = withParentDeathSignal(dir, apiserverBin); err != nil {
		return fail(err)
	}
	if etcdBin, err = withParentDeathSignal(dir, etcdBin); err != nil {
		return fail(err)
	}
	etcdLog, err := openLog("etcd.log")
	if err != nil {
		return fail(err)
	}
	apiserverLog, err := openLog("kube-apiserver.log")
	if err != nil {
		return fail(err)
	}

	hostPort := func(p int) string { return net.JoinHostPort(Host, strconv.Itoa(p)) }
	etcd := &envtest.Etcd{
		Path:    etcdBin,
		DataDir: filepath.Join(dir, "etcd"),
		URL:     &url.URL{Scheme: "http", Host: hostPort(ports[0])},
		Out:     etcdLog,
		Err:     etcdLog,
	}
	peer := "http://" + hostPort(ports[1])
	// envtest would resolve "localhost" for the peer listener; the cluster flags only name it.
	etcd.Configure().
		Set("listen-peer-urls", peer).
		Set("initial-advertise-peer-urls", peer).
		Set("initial-cluster", "default="+peer)

	apiserver := &envtest.APIServer{
		Path:    apiserverBin,
		CertDir: filepath.Join(dir, "apiserver"),
		Out:     apiserverLog,
		Err:     apiserverLog,
	}
	apiserver.SecureServing.ListenAddr = envtest.ListenAddr{Address: Host, Port: strconv.Itoa(ports[2])}
	// Without an explicit advertise address kube-apiserver advertises the host's first
	// interface address; a loopback one is only accepted with the endpoint reconciler off.
	apiserver.Configure().
		Set("advertise-address", Host).
		Set("endpoint-reconciler-type", "none")
	for k, v := range opts.Flags {
		apiserver.Configure().Set(strings.TrimLeft(k, "-"), v)
	}
	for _, d := range []string{etcd.DataDir, apiserver.CertDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fail(err)
		}
	}

	useExisting := false // USE_EXISTING_CLUSTER=true in the environment must not redirect tests to a real cluster
	a.env = &envtest.Environment{
		ControlPlane:             envtest.ControlPlane{APIServer: apiserver, Etcd: etcd},
		BinaryAssetsDirectory:    filepath.Join(root, "bin"),
		UseExistingCluster:       &useExisting,
		ControlPlaneStartTimeout: timeout,
		ControlPlaneStopTimeout:  20 * time.Second,
	}
	cfg, err := a.env.Start()
	if err != nil {
		return fail(err)
	}
	a.Config, a.KubeConfig = cfg, a.env.KubeConfig

	// CRDs are installed here rather than by Environment.Start so that a broken CRD is
	// reported as such, not among the servers' logs. InstallCRDs waits until each is
	// established and served.
	if len(crdDirs) > 0 {
		a.CRDs, err = envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
			Paths:              crdDirs,
			ErrorIfPathMissing: true, // <root>/crds is only listed when it exists
		})
		if err != nil {
			_ = a.Stop()
			return nil, fmt.Errorf("testenv: install CRDs from %s: %w", strings.Join(crdDirs, ", "), err)
		}
	}
	return a, nil
}

// StartAPIServerT is StartAPIServer for one test: it fails t on error and stops the servers
// at cleanup.
func StartAPIServerT(t testing.TB, opts APIServerOptions) *APIServer {
	t.Helper()
	a, err := StartAPIServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Stop(); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return a
}

// withParentDeathSignal returns a script in dir that execs bin under
// `setpriv --pdeathsig KILL`, or bin itself where setpriv does not exist.
func withParentDeathSignal(dir, bin string) (string, error) {
	if runtime.GOOS != "linux" {
		return bin, nil
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return bin, nil
	}
	wrappers := filepath.Join(dir, "bin")
	if err := os.MkdirAll(wrappers, 0o700); err != nil {
		return "", err
	}
	script := filepath.Join(wrappers, filepath.Base(bin))
	text := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL -- %s \"$@\"\n", shellQuote(setpriv), shellQuote(bin))
	if err := os.WriteFile(script, []byte(text), 0o700); err != nil {
		return "", err
	}
	return script, nil
}

const (
	apiserverDirPrefix = "testenv-apiserver-"
	ownerFile          = "owner.pid"
)

// removeOrphanedDirs deletes the directories (etcd data is over 100 MB) of API servers whose
// test binary died without running Stop; the servers themselves died with it.
func removeOrphanedDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), apiserverDirPrefix+"*"))
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue // not ours, or still being created
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func isDir(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.IsDir()
}
