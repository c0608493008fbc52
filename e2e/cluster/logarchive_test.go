package cluster

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// logArchive copies the kubelet's container log files of the run's namespaces into the test's
// own directory as they grow, so that the log scans read every pod the run started — also the
// ones deleted before the scan: a rollout's old pods, scaled-in workers, the EncounterSimulation's
// shard pods and the HeaderGateway's interfaces, whose files the kubelet removes with the pod.
// A file is copied from where the last copy stopped; a file that shrank was rotated and is
// copied again from its start (a scan reads the same lines twice, never misses one).
type logArchive struct {
	src, dst string
	keep     func(pod string) bool
	mu       sync.Mutex
	offsets  map[string]int64
	quit     chan struct{}
	done     chan struct{}
}

// startLogArchive copies every interval until stop; the caller calls sync before it reads.
func startLogArchive(src, dst string, keep func(pod string) bool, interval time.Duration) *logArchive {
	a := &logArchive{src: src, dst: dst, keep: keep, offsets: map[string]int64{}, quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(a.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-a.quit:
				return
			case <-t.C:
				_ = a.sync()
			}
		}
	}()
	return a
}

func (a *logArchive) stop() {
	close(a.quit)
	<-a.done
}

// sync copies what the log files gained since the last sync. Files that vanish while it walks
// (a pod deleted that moment) are skipped: what was copied of them before stays.
func (a *logArchive) sync() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := filepath.WalkDir(a.src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		// <src>/<namespace>_<pod>_<uid>/<container>/<n>.log
		if pod := filepath.Base(filepath.Dir(filepath.Dir(path))); !a.keep(pod) {
			return nil
		}
		rel := strings.TrimPrefix(path, a.src+"/")
		if err := a.copyTail(path, rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func (a *logArchive) copyTail(path, rel string) error {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	off := a.offsets[rel]
	if st.Size() < off {
		off = 0 // rotated or truncated: copy it again
	}
	if st.Size() == off {
		return nil
	}
	out := filepath.Join(a.dst, rel)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, io.NewSectionReader(in, off, st.Size()-off))
	a.offsets[rel] = off + n
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// TestLogArchiveKeepsDeletedPods: the archive holds every line a kept pod's log ever had — after
// the file grew, was rotated (shrank) and was deleted with its pod — and nothing of other pods.
func TestLogArchiveKeepsDeletedPods(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	keep := func(pod string) bool { return strings.HasPrefix(pod, "obscura_") }
	file := func(pod string) string { return filepath.Join(src, pod, "c", "0.log") }
	write := func(path, s string, flag int) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|flag, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
	}
	a := startLogArchive(src, dst, keep, time.Hour) // synced by hand below
	defer a.stop()
	sync := func() {
		t.Helper()
		if err := a.sync(); err != nil {
			t.Fatal(err)
		}
	}
	kept, other := file("obscura_worker-1_u1"), file("kube-system_x_u2")
	write(kept, "line 1\n", os.O_APPEND)
	write(other, "not ours\n", os.O_APPEND)
	sync()
	write(kept, "line 2\n", os.O_APPEND)
	sync()
	write(kept, "line 3\n", os.O_TRUNC) // rotated: the file starts again
	sync()
	write(kept, "line 4 and more\n", os.O_APPEND)
	sync()
	if err := os.RemoveAll(filepath.Dir(filepath.Dir(kept))); err != nil { // the pod is deleted
		t.Fatal(err)
	}
	sync()
	b, err := os.ReadFile(filepath.Join(dst, "obscura_worker-1_u1", "c", "0.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"line 1", "line 2", "line 3", "line 4 and more"} {
		if !strings.Contains(string(b), l) {
			t.Errorf("archive lost %q: %q", l, b)
		}
	}
	if _, err := os.Stat(filepath.Join(dst, "kube-system_x_u2")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("archive copied another namespace's pod (%v)", err)
	}
}
