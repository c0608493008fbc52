#!/usr/bin/env bash
# Runs every Go fuzz target in the repository for the given time each (default 30s).
# `make test` runs the seed corpora only; this explores.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-30s}
for mod in operators services e2e; do
  (cd "$mod" && go list -f '{{.Dir}}' ./... ) | while read -r dir; do
    grep -hoE '^func (Fuzz[A-Za-z0-9_]+)\(' "$dir"/*_test.go 2>/dev/null | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/' | while read -r target; do
      echo "[fuzz] $dir $target ($fuzztime)"
      (cd "$dir" && go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" .)
    done
  done
done
