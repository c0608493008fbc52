#!/usr/bin/env bash
# Runs every Go fuzz target in the repository for the given time each (default 30s).
# `make test` runs the seed corpora only; this explores.
#
#   hack/fuzz.sh [fuzztime]
#   FUZZ_PARALLEL=1   fuzzing workers per target (go test -parallel; default: GOMAXPROCS)
#   FUZZ_MATCH=regex  only the targets whose "<package dir> <target>" matches (grep -E)
#   FUZZ_LOG=file     also append one summary line per target: dir target execs status
#
# Every target runs even if an earlier one fails; the exit status is 1 if any failed (a finding
# is written by go test to the package's testdata/fuzz/<target>/ and reproduces in `make test`).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-30s}
parallel=()
[[ -n "${FUZZ_PARALLEL:-}" ]] && parallel=(-parallel="$FUZZ_PARALLEL")
match=${FUZZ_MATCH:-}
summary=${FUZZ_LOG:-/dev/null}

# targets prints "<dir> <target>" for every func FuzzX( in the module's packages' _test.go files.
# A package without test files (or without fuzz targets) prints nothing: grep's "no match" and
# the missing glob must not end the run under pipefail.
targets() {
  local mod=$1 dir f
  (cd "$mod" && go list -f '{{.Dir}}' ./...) | while read -r dir; do
    for f in "$dir"/*_test.go; do
      [[ -e "$f" ]] || continue
      sed -nE 's/^func (Fuzz[A-Za-z0-9_]+)\(.*/\1/p' "$f" | while read -r t; do echo "$dir $t"; done
    done
  done
}

failed=0 ran=0
while read -r dir target; do
  if [[ -n "$match" ]] && ! grep -qE -- "$match" <<<"$dir $target"; then continue; fi
  ran=$((ran + 1))
  echo "[fuzz] $dir $target ($fuzztime)"
  log=$(mktemp)
  status=ok
  if ! (cd "$dir" && go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "${parallel[@]}" . </dev/null) 2>&1 | tee "$log"; then
    status=FAILED
    failed=$((failed + 1))
  fi
  # go test -fuzz reports "fuzz: elapsed: 30s, execs: 123456 (4115/sec), ..." — keep the last.
  execs=$(sed -nE 's/.*fuzz: elapsed: [^,]*, execs: ([0-9]+).*/\1/p' "$log" | tail -n1)
  rm -f "$log"
  printf '%s %s %s %s\n' "${dir#"$PWD"/}" "$target" "${execs:-0}" "$status" | tee -a "$summary"
done < <(for mod in operators services e2e; do targets "$mod"; done)

echo "[fuzz] $ran targets, $failed failed"
[[ $ran -gt 0 ]] || { echo "[fuzz] no fuzz target found" >&2; exit 1; }
[[ $failed -eq 0 ]]
