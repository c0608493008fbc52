// Package gc is the garbling engine of PPS (shared/specs/publish-process-subscribe.md,
// §3.5–§3.7 and the pseudo-code of §8.5–§8.6): boolean circuits (Circuit, read from Bristol
// Fashion or made with a Builder, compiled once into a Plan) are garbled with free-XOR and
// half-gates (Zahur–Rosulek–Evans, EUROCRYPT 2015; two 16-byte rows per AND, XOR and NOT
// free) over the tweakable circular-correlation-robust hash of Guo–Katz–Wang–Yu (S&P 2020),
// H(x, t) = π(σ(x) ⊕ t) ⊕ σ(x) with σ(xL‖xR) = (xL⊕xR)‖xL, π fixed-key AES-128, and
// point-and-permute. Garble writes a versioned stream (stream.go) gate by gate to an
// io.Writer through one chunk buffer; Evaluate reads it from an io.Reader and evaluates
// while it arrives, so memory is the wire labels (16 B per label slot) plus the chunk, and a
// GateSource can produce the gates lazily for circuits larger than memory (spec §10 #14).
// Publisher label pairs (a0, a1) enter through identity gates (§3.5) translating them into
// Δ-structured labels, one 16-byte row each (the 1-ciphertext option of §8.5: the label of
// the bit whose a has permute bit 0 is H(a, t) itself, so its row is implicit); constant (nullified) inputs get one
// label; outputs are decoded from permute bits only, d_j = lsb(W_j^0) ⊕ r_j, so no output
// label is ever sent (§2.6.2, §3.7).
//
// The [D] decisions taken here. D3: half-gates + free-XOR + GKWY20, with a fresh π key per
// garbled circuit; no GRR3 mode. D22: every Garble call draws Δ (lsb 1), the π key and a
// 128-bit execID from crypto/rand and erases Δ and the labels when it returns; there is no
// way to pass them in, so no two executions can share them. Half-gate tweaks are
// (lo = 2k or 2k+1 for the k-th AND in schedule order, hi = 2⁶⁴−1); identity tweaks are
// tweakID(exec, u) = LE64(execID low 64 bits) ‖ LE64(u) as in §8.5, whose high half is
// below 2³², so the two never meet. Identity gates use E(a, t) = H(a, t) (the alternative
// §8.5 allows) rather than AES keyed by a: it runs in the same batched fixed-key AES as the
// gates, without a key schedule per wire, and a uniformly random a independent of Δ is a
// sound input to a CCR hash under a fresh π. Stream version 2 has the 1-row identity gates
// (version 1, two rows, is refused).
// Constants in a compiled Circuit are folded away; a lazy GateSource's constants become
// wires whose evaluator label is the all-zero label (the value is public). NOT a is
// garbled as a ⊕ one, where the "one" slot holds Δ for the Garbler and zero for the
// evaluator (free NOT, §8.6). The circuit hash of D10 is Circuit.Hash. Speed: π runs in
// Go assembly with AES-NI (8 blocks in flight: 2 ANDs per iteration when garbling, 4 when
// evaluating, the whole half-gate in registers), and Compile reorders gates into layers of
// independent ANDs so that the kernels always have a batch, drops the gates no output depends
// on (they would only be garbled and sent), then gives each wire a label slot
// that is reused once the wire is dead (the label array is the largest live set: 96k slots
// for the 990k-wire Table 2 rank-free circuit, 1.5 MB instead of 16 MB); the pure-Go path (crypto/aes,
// one block at a time) is the fallback and is selected with -tags purego. The input wires'
// zero-labels come from AES-128 in counter mode under a key drawn from crypto/rand for the
// one Garble call and erased after it (pure Go: crypto/rand itself); an identity input's
// zero-label is then replaced by its 1-row identity gate's hash.
//
// Garbling ahead (pregarble.go, §8.5: the Garbler's labels do not depend on the inputs):
// Pregarble draws an execution's Δ, π key, execID and input zero-labels as Garble does and
// writes its AND tables (stream version 3) before any input exists; the Pregarbled it returns
// writes that one execution's inputs stream (version 4: two-row identity gates, since the
// input labels are already fixed, constant labels and decoding bits) once and is erased,
// and the evaluator holds the tables (ReadTables) until EvaluatePregarbled uses them once.
// D22 holds per execution: nothing of a Pregarbled can be passed in or used twice.
package gc
