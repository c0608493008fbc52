// Package gc is the garbling engine of PPS (shared/specs/publish-process-subscribe.md):
// boolean circuits (Circuit, read from Bristol Fashion or made with a Builder), garbled with
// free-XOR and half-gates (Zahur–Rosulek–Evans, EUROCRYPT 2015) over the tweakable
// circular-correlation-robust hash of Guo–Katz–Wang–Yu (S&P 2020), H(x, t) = π(σ(x) ⊕ t) ⊕
// σ(x), where π is fixed-key AES-128, and streamed gate by gate from Garbler to evaluator.
// It follows spec §3.5–§3.7 and the pseudo-code of §8.5–§8.6.
package gc
