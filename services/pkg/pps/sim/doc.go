// Package sim replays the shapes of the PPS paper's three applications
// (shared/specs/publish-process-subscribe.md §4.2–§4.5) with deterministic, seeded generators
// — the datasets themselves cannot be downloaded here — together with the DSL programs of
// §4.6 that compute on them and a Pipeline builder that turns a dataset and a program into a
// contract.Pipeline plus the publishers' device identities, for `obscura demo` and the e2e
// tests.
//
// Decisions taken: one publisher device per program topic, one value per message, so a
// topic's series is its device's rounds and `(window "<topic>" N)` reads the last N of them
// (D7, D9); parking lots are scaled down (9 lots of 30–90 spaces) so the daily variance of
// their combined count fits Q24.8 (D1 — the paper's real counts would need a wider type);
// RSS is published in bels (dBm / 10), so the regression slope is −η directly and the sums
// of 600 samples stay inside Q24.8; the "rank" of free spaces is computed from the occupied
// counts and the lots' public capacities (free = capacity − occupied), so lots publish one
// value per round.
package sim
