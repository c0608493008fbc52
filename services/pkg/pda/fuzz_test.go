package pda

import (
	"bytes"
	"testing"
)

// Fuzz targets for every decoder of network bytes. Each must return an error or a value
// that re-encodes to the same bytes, and must never panic. `go test` runs the seeds; run
// e.g. `go test ./pkg/pda -run '^$' -fuzz FuzzParseSubmission -fuzztime 60s` to explore.

func fuzzDeployment(f *testing.F) (*deployment, [][]byte) {
	d := newDeployment(f, deployOpts{tau: 2, values: []uint16{1, 2}, seed: 40})
	k := opaqueKey(f, []byte("fuzz"))
	d.submit("a", []Observation{{k, 1}})
	d.submit("b", []Observation{{k, 2}})
	return d, d.pool
}

func FuzzDecodeElement(f *testing.F) {
	for _, id := range []GroupID{Ristretto255, P256} {
		g, _ := NewGroup(id)
		f.Add(byte(id), g.encodeElement(g.Generator()))
	}
	f.Add(byte(1), make([]byte, 32))
	f.Fuzz(func(t *testing.T, id byte, b []byte) {
		g, err := NewGroup(GroupID(id))
		if err != nil {
			return
		}
		e, err := g.DecodeElement(b)
		if err != nil {
			return
		}
		if e.IsIdentity() || !bytes.Equal(g.encodeElement(e), b) {
			t.Fatal("accepted element does not re-encode to its input")
		}
	})
}

func FuzzDecodeScalar(f *testing.F) {
	f.Add(byte(1), make([]byte, 32))
	f.Add(byte(2), bytes.Repeat([]byte{0xff}, 32))
	f.Fuzz(func(t *testing.T, id byte, b []byte) {
		g, err := NewGroup(GroupID(id))
		if err != nil {
			return
		}
		s, err := g.DecodeScalar(b)
		if err != nil {
			return
		}
		if !bytes.Equal(g.AppendScalar(nil, s), b) {
			t.Fatal("accepted scalar does not re-encode to its input")
		}
	})
}

func FuzzParseSubmission(f *testing.F) {
	d := newDeployment(f, deployOpts{tau: 2, values: []uint16{1, 2}, seed: 41})
	sess, id := d.newSession("p")
	item, _ := NewParticipant(d.suite, d.rnd).Item(id, 0, Observation{opaqueKey(f, []byte("x")), 2})
	f.Add(item)
	f.Fuzz(func(t *testing.T, b []byte) {
		sub, err := d.suite.ParseSubmission(b)
		if err != nil {
			return
		}
		if len(b) != d.suite.SubmissionSize() || len(sub.CK) != 1 || sub.CV == nil {
			t.Fatal("inconsistent parse")
		}
		d.proxy.Ingest(sess, [][]byte{b}) // must not panic
		// In a batch with a valid item (batch check, then the per-item fallback): the
		// valid item is accepted whatever b is (or b is, and the item is then its replay).
		sess.accepted = map[uint32]bool{}
		if out, rej := d.proxy.Ingest(sess, [][]byte{b, item}); len(out) == 0 {
			t.Fatalf("valid item lost in a batch: %+v", rej)
		}
		sess.accepted = map[uint32]bool{}
	})
}

func FuzzParseBlindedItem(f *testing.F) {
	d, items := fuzzDeployment(f)
	for _, it := range items {
		f.Add(it)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		it, err := d.suite.ParseBlindedItem(b)
		if err != nil {
			return
		}
		re, err := d.suite.marshalBlindedItem(it)
		if err != nil || !bytes.Equal(re, b) {
			t.Fatal("accepted item does not re-encode to its input")
		}
		d.db.Open(b, 1) // must not panic
	})
}

func FuzzParseEntry(f *testing.F) {
	d, items := fuzzDeployment(f)
	for _, it := range items {
		e, _ := d.db.Open(it, 1)
		enc, _ := d.suite.MarshalEntry(e)
		f.Add(enc)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := d.suite.ParseEntry(b)
		if err != nil {
			return
		}
		re, err := d.suite.MarshalEntry(e)
		if err != nil || !bytes.Equal(re, b) {
			t.Fatal("accepted entry does not re-encode to its input")
		}
		NewTable(d.suite, d.rnd).Insert(e)
	})
}

func FuzzParseRevealRequest(f *testing.F) {
	d, _ := fuzzDeployment(f)
	d.flush()
	reqs, _ := d.table.RevealRequests()
	for _, q := range reqs {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := d.suite.ParseRevealRequest(b)
		if err != nil {
			return
		}
		re, err := d.suite.MarshalRevealRequest(q)
		if err != nil || !bytes.Equal(re, b) {
			t.Fatal("accepted request does not re-encode to its input")
		}
		d.oracle.Answer(b) // must not panic
	})
}

func FuzzParseRevealResponse(f *testing.F) {
	d, _ := fuzzDeployment(f)
	d.flush()
	reqs, _ := d.table.RevealRequests()
	for _, q := range reqs {
		resp, _, _ := d.oracle.Answer(q)
		f.Add(resp)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRevealResponse(b)
		if err != nil {
			return
		}
		re, err := MarshalRevealResponse(r)
		if err != nil || !bytes.Equal(re, b) {
			t.Fatal("accepted response does not re-encode to its input")
		}
		d.table.ApplyRevealResponse(b) // must not panic
	})
}

func FuzzPublicParams(f *testing.F) {
	d, _ := fuzzDeployment(f)
	pp := d.suite.Params()
	b, _ := pp.MarshalBinary()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var pp PublicParams
		if pp.UnmarshalBinary(b) != nil {
			return
		}
		re, err := pp.MarshalBinary()
		if err != nil || !bytes.Equal(re, b) {
			t.Fatal("accepted params do not re-encode to their input")
		}
	})
}

func FuzzParseCanonicalKey(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "2001:db8::1"} {
		k, _ := ParseIPKey(s)
		f.Add(k.Canonical())
	}
	u, _ := URLKey("https://example.com/a?b=c")
	f.Add(u.Canonical())
	f.Add([]byte{5, 0, 3, 'a', 'b', 'c'})
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParseCanonicalKey(b)
		if err != nil {
			return
		}
		if !bytes.Equal(k.Canonical(), b) {
			t.Fatal("accepted key does not re-encode to its input")
		}
	})
}

// URLKey must be idempotent: a canonical URL canonicalises to itself, or the oracle's
// ParseCanonicalKey would reject keys participants produced.
func FuzzURLKey(f *testing.F) {
	for _, s := range []string{"HTTP://Example.com:80/a/./b/../c?x=%7e#f", "https://[::ffff:10.0.0.1]:8443/%41", "ftp://xn--bcher-kva.example/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := URLKey(s)
		if err != nil {
			return
		}
		k2, err := URLKey(string(k.b))
		if err != nil || !k2.Equal(k) {
			t.Fatalf("not idempotent: %q → %q → %v", s, k.b, err)
		}
	})
}
