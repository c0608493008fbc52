package pda

import "fmt"

// Oracle is the proxy's decryption oracle (spec §3.9.5 step 2, A10). It decrypts each
// E_PRX(k') of a reveal request and marks the entry consistent iff F_s(k') = Y, so a
// participant that paired C_Y for k with C_K for k' cannot get k' published (T-MAL-1).
type Oracle struct {
	suite *Suite
	keys  *ProxyKeys
}

// Oracle returns the decryption oracle sharing the proxy's keys (one trust domain, U26).
func (p *Proxy) Oracle() *Oracle { return &Oracle{suite: p.suite, keys: p.keys} }

// OracleStats is what the oracle may log per request (never k or Y): U24's audit record.
type OracleStats struct {
	Window     uint64
	Entries    int
	Consistent int
}

// Answer handles one encoded RevealRequest and returns the encoded RevealResponse.
func (o *Oracle) Answer(raw []byte) ([]byte, OracleStats, error) {
	s, g := o.suite, o.suite.g
	q, err := s.ParseRevealRequest(raw)
	if err != nil {
		return nil, OracleStats{}, err
	}
	st := OracleStats{Window: q.Window, Entries: len(q.Entries)}
	if q.Window != s.params.Window {
		return nil, st, fmt.Errorf("%w: request for window %d", ErrWindowMismatch, q.Window)
	}
	if uint64(len(q.Entries)) < uint64(s.params.Threshold) {
		// A row with fewer than τ entries cannot satisfy f; an honest DB never asks (U24).
		return nil, st, fmt.Errorf("%w: %d entries, threshold %d", ErrRevealRefused, len(q.Entries), s.params.Threshold)
	}
	y, _ := g.DecodeElement(q.Y) // validated by ParseRevealRequest
	resp := &RevealResponse{Window: q.Window, RequestID: q.RequestID, Consistent: make([]bool, len(q.Entries))}
	verdict := make(map[string]bool) // F_s evaluated once per distinct plaintext
	chunks := make([]Element, s.params.Chunks)
	for i, ent := range q.Entries {
		for j, c := range ent {
			chunks[j] = o.keys.Oracle.decrypt(c)
		}
		k, err := s.decodeKey(chunks)
		if err != nil {
			continue // garbage plaintext: inconsistent
		}
		canon := string(k.Canonical())
		ok, seen := verdict[canon]
		if !seen {
			ok = g.mul(s.HashKey(k), o.keys.OPRF).IsEqual(y)
			verdict[canon] = ok
		}
		if ok {
			resp.Consistent[i] = true
			resp.Key = k // unique: F_s is injective on keys except with negligible probability
			st.Consistent++
		}
	}
	b, err := MarshalRevealResponse(resp)
	return b, st, err
}
