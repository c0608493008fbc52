package testenv

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// The API server is shared by the package the way operator test packages share theirs: it is
// started without a testing.TB (here lazily, so `-run Redis` does not pay for it) and stopped
// by TestMain after every test ran.
var shared struct {
	once sync.Once
	api  *APIServer
	err  error
}

func sharedAPIServer(t testing.TB) *APIServer {
	t.Helper()
	shared.once.Do(func() { shared.api, shared.err = StartAPIServer(APIServerOptions{}) })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.api
}

func TestMain(m *testing.M) {
	// envtest logs through controller-runtime; without a logger it prints a warning with a
	// stack trace when the first log call comes 30 s after the binary started.
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	if shared.api != nil {
		if err := shared.api.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// fatalTB records the message of a Fatal instead of failing the real test, so that tests can
// assert what a developer sees when a server does not start.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatal(args ...any) { f.msg = fmt.Sprint(args...); runtime.Goexit() }
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fatalTB) FailNow() { f.msg = "FailNow"; runtime.Goexit() }

// startFailure runs start on a fatalTB and returns the Fatal message ("" if none).
func startFailure(t *testing.T, start func(testing.TB)) string {
	t.Helper()
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		start(f)
	}()
	<-done
	return f.msg
}

func requireContains(t *testing.T, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("message does not mention %q:\n%s", w, got)
		}
	}
}
