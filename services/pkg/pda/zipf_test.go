package pda

import (
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestZipfReportersThreshold is T-FUN-3 on the core protocol functions (participants'
// Item, Proxy.Ingest, Shuffle, DB.Open, Table, Oracle — the same calls the roles make,
// without NATS/Redis, which would make 28 000 items take minutes): 10 000 keys, key k
// reported by n_k distinct participants (out of 50), n_k ∈ 1..50 Zipf-distributed
// (P(n) ∝ n⁻², seeded; four keys pinned at 50, τ, τ − 1 and 1), τ = 10, distinct-participants mode. The revealed set must be
// exactly {k : n_k ≥ τ} — no false positive, no false negative — with Count = n_k.
// Participants submit in sessions of ≤ 1 000 items (the SubmitBatch limit). -short: 1 000 keys.
func TestZipfReportersThreshold(t *testing.T) {
	nKeys := 10_000 // ≈ 28 000 items, ≈ 35 s of CPU
	if testing.Short() {
		nKeys = 1_000
	}
	const (
		participants = 50
		tau          = 10
		batch        = 1000
	)
	d := newDeployment(t, deployOpts{tau: tau, seed: 3})
	rnd := rand.New(rand.NewPCG(3, 10_000))
	zipf := rand.NewZipf(rnd, 2, 1, participants-1) // n−1 ∈ [0, 49], P ∝ n⁻²
	keys := make([]Key, nKeys)
	reporters := make([]int, nKeys)
	obs := make([][]Observation, participants)
	perm := make([]int, participants)
	hist := map[int]int{}
	for k := range keys {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(k))
		keys[k] = opaqueKey(t, append([]byte("zipf-"), b[:]...))
		n := int(zipf.Uint64()) + 1
		if k < 4 { // the edges are always present: 50, τ, τ − 1, 1
			n = []int{participants, tau, tau - 1, 1}[k]
		}
		reporters[k] = n
		hist[n]++
		for i := range perm {
			perm[i] = i
		}
		for i := range n { // a random n-subset of the participants
			j := i + rnd.IntN(participants-i)
			perm[i], perm[j] = perm[j], perm[i]
			obs[perm[i]] = append(obs[perm[i]], Observation{Key: keys[k], Value: 1})
		}
	}
	// Participants build their items in parallel, each from its own seeded stream.
	items := make([][][]byte, participants)
	ids := make([][]SessionID, participants)
	sessions := make([][]*Session, participants)
	for p := range participants {
		for lo := 0; lo < len(obs[p]); lo += batch {
			s, id := d.newSession(pname(p))
			sessions[p], ids[p] = append(sessions[p], s), append(ids[p], id)
		}
	}
	var wg sync.WaitGroup
	next := make(chan int, participants)
	for p := range participants {
		next <- p
	}
	close(next)
	for range 2 {
		wg.Go(func() {
			for p := range next {
				r := detRand(uint64(1000 + p))
				for i, o := range obs[p] {
					b, err := NewParticipant(d.suite, r).Item(ids[p][i/batch], uint32(i%batch), o)
					if err != nil {
						t.Error(err)
						return
					}
					items[p] = append(items[p], b)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	total := 0
	for p := range participants {
		for s, sess := range sessions[p] {
			chunk := items[p][s*batch : min((s+1)*batch, len(items[p]))]
			out, rej := d.proxy.Ingest(sess, chunk)
			if len(rej) != 0 || len(out) != len(chunk) {
				t.Fatalf("participant %d: %d rejected", p, len(rej))
			}
			d.pool = append(d.pool, out...)
			total += len(out)
		}
	}
	d.flush()
	got := resultMap(d.reveal())
	want := 0
	for k, key := range keys {
		r, ok := got[string(key.Canonical())]
		if ok != (reporters[k] >= tau) {
			t.Fatalf("key %d with %d reporters: revealed = %v (τ = %d)", k, reporters[k], ok, tau)
		}
		if ok {
			want++
			if r.Count != reporters[k] {
				t.Errorf("key %d: count %d, want %d", k, r.Count, reporters[k])
			}
		}
	}
	if len(got) != want {
		t.Fatalf("%d keys revealed, %d qualify", len(got), want)
	}
	t.Logf("%d items from %d participants; %d of %d keys reach τ = %d and exactly those are revealed; reporters histogram %v",
		total, participants, want, nKeys, tau, hist)
}
