package roundstate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/testenv"
)

// queueAdmits holds r's sender, starts one Admit per m1 (user users[j]) and waits until every
// one is queued, so that the next sendAdmissions sends them all in one pipeline.
func queueAdmits(t *testing.T, r *Redis, ctx context.Context, round uint64, q int, users []string, m1s [][]byte) (idx []uint32, errs []error, wait func()) {
	t.Helper()
	r.adm.mu.Lock()
	r.adm.sending = true // as if another caller were sending: the calls below queue
	r.adm.mu.Unlock()
	idx = make([]uint32, len(m1s))
	errs = make([]error, len(m1s))
	var wg sync.WaitGroup
	for j := range m1s {
		wg.Add(1)
		go func() {
			defer wg.Done()
			idx[j], errs[j] = r.Admit(ctx, round, users[j], q, m1s[j])
		}()
	}
	testenv.Eventually(t, 30*time.Second, "every admission queued", func() error {
		r.adm.mu.Lock()
		defer r.adm.mu.Unlock()
		if n := len(r.adm.queue); n != len(m1s) {
			return fmt.Errorf("%d of %d queued", n, len(m1s))
		}
		return nil
	})
	return idx, errs, wg.Wait
}

// TestPipelinedAdmitExactlyOnce: admissions sent in one pipeline each get their own outcome —
// every distinct envelope admitted exactly once under a distinct dense index, a replayed
// envelope refused as a duplicate, the (q+1)-th of a user refused by the quota, one whose
// caller gave up before the send not admitted — and Admitted returns exactly the admitted ones.
// A batch that admitted nothing, or any command twice, fails it.
func TestPipelinedAdmitExactlyOnce(t *testing.T) {
	r := NewRedis(testenv.StartRedis(t).Client(), time.Minute)
	ctx := context.Background()
	const round, q, n = 5, 2, 300 // more than admitBatchMax: two pipelines
	var users []string
	var m1s [][]byte
	for j := range n {
		users = append(users, fmt.Sprintf("u%d", j/q))
		m1s = append(m1s, []byte(fmt.Sprintf("envelope-%d", j)))
	}
	idx, errs, wait := queueAdmits(t, r, ctx, round, q, users, m1s)
	r.sendAdmissions(ctx)
	wait()
	// Then, in one pipeline: over u0's quota, a replay of envelope-7, and one more new command.
	idxB, errsB, waitB := queueAdmits(t, r, ctx, round, q, []string{"u0", "replayer", "last"}, [][]byte{[]byte("one-too-many"), m1s[7], []byte("last")})
	r.sendAdmissions(ctx)
	waitB()
	users = append(users, "last")
	m1s = append(m1s, []byte("last"))
	idx = append(idx, idxB[2])
	errs = append(errs, errsB[2])

	seen := map[uint32]int{}
	for j := range n + 1 {
		if errs[j] != nil {
			t.Fatalf("admission %d: %v", j, errs[j])
		}
		if k, dup := seen[idx[j]]; dup {
			t.Fatalf("index %d given to admissions %d and %d", idx[j], k, j)
		}
		seen[idx[j]] = j
	}
	if !errors.Is(errsB[0], ErrRateLimit) {
		t.Errorf("the %d-th command of u0: %v, want ErrRateLimit", q+1, errsB[0])
	}
	if !errors.Is(errsB[1], ErrDuplicate) {
		t.Errorf("replayed envelope: %v, want ErrDuplicate", errsB[1])
	}
	adm, err := r.Admitted(ctx, round)
	if err != nil {
		t.Fatal(err)
	}
	if len(adm) != n+1 {
		t.Fatalf("Admitted returns %d admissions, want %d", len(adm), n+1)
	}
	for _, a := range adm {
		j, ok := seen[a.Index]
		if !ok || a.User != users[j] || string(a.M1) != string(m1s[j]) {
			t.Fatalf("admission %d: %s %q, want the one acknowledged to its caller", a.Index, a.User, a.M1)
		}
	}

	// A caller gone before the send is not admitted; the others of its pipeline are.
	gone, cancel := context.WithCancel(ctx)
	r.adm.mu.Lock()
	r.adm.sending = true
	r.adm.mu.Unlock()
	var goneErr error
	done := make(chan struct{})
	go func() { _, goneErr = r.Admit(gone, round+1, "g", q, []byte("gone")); close(done) }()
	idx2, errs2, wait2 := func() ([]uint32, []error, func()) {
		testenv.Eventually(t, 30*time.Second, "the cancelled call queued", func() error {
			r.adm.mu.Lock()
			defer r.adm.mu.Unlock()
			if len(r.adm.queue) != 1 {
				return errors.New("not yet")
			}
			return nil
		})
		cancel()
		<-done
		r.adm.mu.Lock()
		r.adm.sending = false
		r.adm.mu.Unlock()
		// The cancelled call is still queued; queue two more behind it.
		r.adm.mu.Lock()
		r.adm.sending = true
		pending := len(r.adm.queue)
		r.adm.mu.Unlock()
		if pending != 1 {
			t.Fatalf("%d queued, want the cancelled call", pending)
		}
		i := make([]uint32, 2)
		e := make([]error, 2)
		var wg sync.WaitGroup
		for j := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				i[j], e[j] = r.Admit(ctx, round+1, fmt.Sprintf("h%d", j), q, []byte(fmt.Sprintf("h%d", j)))
			}()
		}
		testenv.Eventually(t, 30*time.Second, "two more queued", func() error {
			r.adm.mu.Lock()
			defer r.adm.mu.Unlock()
			if len(r.adm.queue) != 3 {
				return errors.New("not yet")
			}
			return nil
		})
		return i, e, wg.Wait
	}()
	r.sendAdmissions(ctx)
	wait2()
	if !errors.Is(goneErr, context.Canceled) {
		t.Errorf("cancelled caller: %v", goneErr)
	}
	for j := range 2 {
		if errs2[j] != nil {
			t.Fatalf("h%d: %v", j, errs2[j])
		}
	}
	if adm, err := r.Admitted(ctx, round+1); err != nil || len(adm) != 2 || idx2[0] == idx2[1] {
		t.Fatalf("round %d: %d admissions (%v), indices %v; want h0 and h1 only", round+1, len(adm), err, idx2)
	}

	// Redis without the script (SCRIPT FLUSH, as after a restart): each call of the pipeline
	// is sent again with the script, and admitted once.
	if err := r.c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	idx3, errs3, wait3 := queueAdmits(t, r, ctx, round+2, q, []string{"a", "b", "c"}, [][]byte{[]byte("a"), []byte("b"), []byte("c")})
	r.sendAdmissions(ctx)
	wait3()
	for j, err := range errs3 {
		if err != nil {
			t.Fatalf("after SCRIPT FLUSH, admission %d: %v", j, err)
		}
	}
	if adm, err := r.Admitted(ctx, round+2); err != nil || len(adm) != 3 {
		t.Fatalf("after SCRIPT FLUSH: %d admissions (%v), want 3 (indices %v)", len(adm), err, idx3)
	}
	r.adm.mu.Lock()
	defer r.adm.mu.Unlock()
	if r.adm.sending || len(r.adm.queue) != 0 {
		t.Fatalf("sender left running (%v) or calls queued (%d)", r.adm.sending, len(r.adm.queue))
	}
}
