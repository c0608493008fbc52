// Package dsl compiles PPS functions written in the paper's Scheme-like language (spec §4.6,
// §3.9, D10) to gc circuits over Q24.8 fixed point (D1), together with the bit-exact
// plaintext model every circuit is tested against (spec §10 #1). A program runs at compile
// time — lists, lambdas, recursion and `if` on compile-time values are unrolled — on one of
// two backends: pps.Fixed arithmetic (the model) or gates on a gc.Builder with constant
// folding; only the arithmetic differs between them, and each operation's circuit is tested
// against pps.Fixed.
//
// Inputs are declared with `val`, `window` and `static` (D9), each with an optional
// nullifying identity (D12), and laid out as pps.InputLayout: 32 bits per slot, then one
// validity bit per slot that the Garbler hard-wires, so `mean`, `variance`, `linreg`, `r2`,
// `count`, `min`, `max`, `argmin` and `argmax` treat nullified inputs as absent; `min-inputs`
// sets the floor below which the function yields ⊥. `(start-building)` is accepted as in the
// listings and has no effect: gates are emitted as operations are applied.
package dsl
