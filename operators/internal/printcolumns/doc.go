// Package printcolumns holds the test that the CRDs' printer columns render on a real API server
// (`kubectl get` and `-o wide`, issue 19 item 4); it has no code of its own.
package printcolumns
