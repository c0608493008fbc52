// Package controller holds the Obscura operator's reconcilers: Vendor, Shuffler and Round
// (mohito.obscura.dev) and AggregationJob (pda.obscura.dev).
//
// Reconcilers decide and apply; every check a reconciler makes ends in a Ready/Degraded
// condition with a reason a human can act on, and every change of that outcome is recorded as an
// Event. Cross-object checks (a Shuffler's vendor exists, a Round selects vendors and shufflers,
// key Secrets exist and hold well-formed keys) are re-run when the referenced object changes,
// through field indexes and watches rather than polling.
package controller
