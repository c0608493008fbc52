// Package layout holds the test of the repository's import rules (docs/architecture.md).
package layout
