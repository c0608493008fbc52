#!/usr/bin/env bash
# Same-run baseline: Obscura's Go half-gates engine (services/pkg/gc) against EMP-toolkit's emp-tool
# (C++) on this machine, one core each, and a Markdown table of the ratios for docs/benchmarks.md.
#
#   hack/bench/gc-vs-emp.sh              builds, then rounds of EMP and Go, then the table (stdout)
#   hack/bench/gc-vs-emp.sh --emp-only   EMP only (its table rows, no ratios)
#
# Environment:
#   EMP_SRC             emp-tool source: a git dir (bare or a clone) holding commit $EMP_COMMIT, or a
#                       source directory of exactly that commit (checked by a fingerprint of its
#                       sources). Only needed the first time: it is exported into the cache.
#   OBSCURA_TOOL_CACHE  per-machine cache (default ~/.cache/obscura-tools); EMP's source and builds
#                       live in $OBSCURA_TOOL_CACHE/emp-tool-<commit>/, never in this repository.
#   BENCH_CPU           the core both benchmarks are pinned to with taskset (default 1)
#   GO_COUNT            rounds (default 5): each runs the EMP program, then `go test -count 1`;
#                       every figure is the median over the rounds (so Go gets -count 5 in all)
#   EMP_RUNS            samples of each EMP figure per round, median taken (default 3)
#   EMP_GATES           independent AND gates per EMP sample (default 1048576)
#   GO_BENCHTIME        go test -benchtime (default Go's 1s)
#   BENCH_OUT           directory for the raw outputs (default: a new temporary directory)
#
# Nothing is downloaded: EMP comes from EMP_SRC or the cache, the Go half uses the module cache.
# Exit status: 0 done; 2 EMP source missing or wrong; 3 the Go package or its benchmarks missing
# (the EMP figures are still printed); 1 anything else (build failure, a wrong garbled result).
set -euo pipefail

EMP_COMMIT=1eef34652bd3ea08807e1b10468bf8a4048a665f
# sha256 over "<git blob id> <path>" of the sources the build and the benchmark read (see
# emp_fingerprint); pins a plain source directory to the commit above.
EMP_FINGERPRINT=f506585b29994acae784e83e47562b4336326ed981bf5d1ab1817e69524a67d8
GO_BENCH='BenchmarkGarbleAND|BenchmarkEvaluateAND|BenchmarkGarbleAES128|BenchmarkEvaluateAES128|BenchmarkGarbleSHA256|BenchmarkEvaluateSHA256'

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE="${OBSCURA_TOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/obscura-tools}"
EMP_DIR="$CACHE/emp-tool-$EMP_COMMIT"
CPU="${BENCH_CPU:-1}"
EMP_RUNS="${EMP_RUNS:-3}"
EMP_GATES="${EMP_GATES:-1048576}"
GO_COUNT="${GO_COUNT:-5}"
EMP_ONLY=0
case "${1:-}" in
  --emp-only) EMP_ONLY=1 ;;
  "") ;;
  *) echo "usage: $0 [--emp-only]" >&2; exit 1 ;;
esac

log() { echo "gc-vs-emp: $*" >&2; }
die() { local code=$1; shift; log "$*"; exit "$code"; }

for t in cmake g++ git taskset nice awk; do
  command -v "$t" >/dev/null || die 1 "$t is required (apt-get install cmake g++ git util-linux)"
done

# --- EMP source ----------------------------------------------------------------------------

# The files that decide what is built and measured: every C/C++ source and header, the CMake
# files, and the two circuits (the snapshot may lack some large unrelated circuit files).
emp_fingerprint() {
  (cd "$1" && find CMakeLists.txt cmake emp-tool -type f \
      \( -name '*.h' -o -name '*.hpp' -o -name '*.cpp' -o -name '*.in' -o -name 'CMakeLists.txt' \
         -o -path 'emp-tool/circuits/files/bristol_fashion/aes_128.txt' \
         -o -path 'emp-tool/circuits/files/bristol_fashion/sha256.txt' \) -print |
    LC_ALL=C sort | while read -r f; do echo "$(git hash-object --no-filters "$f") $f"; done |
    sha256sum | cut -d' ' -f1)
}

how_to_get_emp() {
  cat >&2 <<EOF
gc-vs-emp: the emp-tool source (commit $EMP_COMMIT) is not in the cache
  $EMP_DIR/src
and EMP_SRC does not point at it. This script never downloads anything. Get it once, then rerun:
  - from a clone:   git clone https://github.com/emp-toolkit/emp-tool /some/where/emp-tool
                    EMP_SRC=/some/where/emp-tool $0
    (any clone or bare git dir that contains commit $EMP_COMMIT works; so does a source tree of
    exactly that commit, e.g. an unpacked GitHub archive of it);
  - on the agent machines, the fetch tool's snapshot of github:emp-toolkit/emp-tool is a bare git
    dir:            EMP_SRC=/work/.mirror/emp-toolkit+emp-tool/repo $0
It is exported (not vendored) into $EMP_DIR and reused from there.
EOF
}

# Export $EMP_COMMIT from the git dir $1 into the new directory $2. Snapshots may lack the blobs of
# some large files (git archive then fails); those are skipped, and the fingerprint decides whether
# what is there is enough.
export_git() {
  local gd=$1 dst=$2
  git --git-dir="$gd" cat-file -e "$EMP_COMMIT^{commit}" 2>/dev/null ||
    die 2 "EMP_SRC=$EMP_SRC does not contain commit $EMP_COMMIT (git fetch it there first)"
  mkdir -p "$dst"
  if git --git-dir="$gd" archive --format=tar "$EMP_COMMIT" 2>/dev/null | tar -x -C "$dst" 2>/dev/null; then
    return
  fi
  rm -rf "$dst"; mkdir -p "$dst"
  local mode type obj path missing=0
  while IFS=$'\t' read -r meta path; do
    read -r mode type obj <<<"$meta"
    [ "$type" = blob ] || continue
    mkdir -p "$dst/$(dirname "$path")"
    if ! git --git-dir="$gd" cat-file blob "$obj" >"$dst/$path" 2>/dev/null; then
      rm -f "$dst/$path"; missing=$((missing + 1)); continue
    fi
    [ "$mode" = 100755 ] && chmod +x "$dst/$path"
  done < <(git --git-dir="$gd" ls-tree -r "$EMP_COMMIT")
  [ "$missing" -eq 0 ] || log "note: $missing file(s) of the snapshot have no content (large files the benchmark does not use)"
}

obtain_emp() {
  local src=$EMP_DIR/src
  if [ -f "$src/.obscura-emp-ok" ] && [ "$(cat "$src/.obscura-emp-ok")" = "$EMP_FINGERPRINT" ]; then
    return
  fi
  [ -n "${EMP_SRC:-}" ] || { how_to_get_emp; exit 2; }
  [ -e "$EMP_SRC" ] || { log "EMP_SRC=$EMP_SRC does not exist"; how_to_get_emp; exit 2; }
  mkdir -p "$EMP_DIR"
  local tmp
  tmp=$(mktemp -d "$EMP_DIR/src.tmp.XXXXXX")
  if gd=$(git -C "$EMP_SRC" rev-parse --absolute-git-dir 2>/dev/null) &&
     git --git-dir="$gd" cat-file -e "$EMP_COMMIT^{commit}" 2>/dev/null; then
    log "exporting emp-tool $EMP_COMMIT from git dir $gd"
    export_git "$gd" "$tmp/src"
  elif [ -f "$EMP_SRC/emp-tool/execution/half_gate.h" ]; then
    log "copying emp-tool source tree $EMP_SRC"
    mkdir -p "$tmp/src"
    (cd "$EMP_SRC" && tar -c --exclude=.git --exclude=build .) | tar -x -C "$tmp/src"
  else
    rm -rf "$tmp"
    die 2 "EMP_SRC=$EMP_SRC is neither a git dir with commit $EMP_COMMIT nor an emp-tool source tree"
  fi
  local fp
  fp=$(emp_fingerprint "$tmp/src")
  if [ "$fp" != "$EMP_FINGERPRINT" ]; then
    rm -rf "$tmp"
    die 2 "EMP_SRC=$EMP_SRC is not emp-tool $EMP_COMMIT (source fingerprint $fp, want $EMP_FINGERPRINT)"
  fi
  echo "$fp" >"$tmp/src/.obscura-emp-ok"
  rm -rf "$src"
  mv "$tmp/src" "$src"
  rmdir "$tmp"
}

# --- EMP build and run ---------------------------------------------------------------------

# -march=native binaries belong to this CPU and compiler: key the build directories on both.
host_key() {
  { grep -m1 '^flags' /proc/cpuinfo; g++ --version | head -1; cmake --version | head -1; } |
    sha256sum | cut -c1-12
}

build_emp() {
  local key build bench
  key=$(host_key)
  build=$EMP_DIR/build-$key
  bench=$EMP_DIR/bench-$key
  if [ ! -f "$build/.obscura-built" ]; then
    log "building emp-tool $EMP_COMMIT (Release, -O3 -march=native) in $build"
    rm -rf "$build"
    nice -n 10 cmake -S "$EMP_DIR/src" -B "$build" -DCMAKE_BUILD_TYPE=Release \
      -DEMP_TOOL_BUILD_TESTS=OFF -DEMP_TOOL_INSTALL=OFF -DEMP_TOOL_NATIVE_ARCH=ON \
      -DCMAKE_CXX_FLAGS='-O3 -march=native' >"$EMP_DIR/build-$key.log" 2>&1 ||
      die 1 "emp-tool configure failed, see $EMP_DIR/build-$key.log"
    nice -n 10 cmake --build "$build" -j 2 >>"$EMP_DIR/build-$key.log" 2>&1 ||
      die 1 "emp-tool build failed, see $EMP_DIR/build-$key.log"
    touch "$build/.obscura-built"
  fi
  log "building hack/bench/emp/bench_halfgates.cpp in $bench"
  nice -n 10 cmake -S "$ROOT/hack/bench/emp" -B "$bench" -DCMAKE_BUILD_TYPE=Release \
    -Demp-tool_DIR="$build" -DEMP_COMMIT="$EMP_COMMIT" >"$bench.log" 2>&1 ||
    die 1 "benchmark configure failed, see $bench.log"
  nice -n 10 cmake --build "$bench" -j 2 >>"$bench.log" 2>&1 ||
    die 1 "benchmark build failed, see $bench.log"
  EMP_BIN=$bench/bench_halfgates
}

OUT="${BENCH_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gc-vs-emp.XXXXXX")}"
mkdir -p "$OUT"
rm -f "$OUT"/emp.r*.jsonl "$OUT"/go.r*.txt
obtain_emp
build_emp

# --- Go half: is it there? -----------------------------------------------------------------

GO_STATUS=0
RUN_GO=0
if [ "$EMP_ONLY" = 0 ]; then
  GC="$ROOT/services/pkg/gc"
  missing=""
  for b in GarbleAND EvaluateAND GarbleAES128 EvaluateAES128 GarbleSHA256 EvaluateSHA256; do
    grep -qs "^func Benchmark$b(" "$GC"/*_test.go || missing="$missing Benchmark$b"
  done
  if [ ! -d "$GC" ]; then
    log "Go half skipped: services/pkg/gc does not exist yet (the Go garbling engine is not in this checkout)"
    GO_STATUS=3
  elif [ -n "$missing" ]; then
    log "Go half skipped: services/pkg/gc lacks the benchmark(s):$missing"
    GO_STATUS=3
  else
    command -v go >/dev/null || die 1 "go is required for the Go half"
    # Never download: modules must already be in the module cache, the toolchain is the local one.
    export GOPROXY=off GOTOOLCHAIN=local
    # Compile once on both cores (nice) so that the pinned runs below only link from the cache.
    log "compiling services/pkg/gc tests (nice, both cores)"
    (cd "$ROOT/services" && nice -n 10 go test -c -o "$OUT/gc.test" ./pkg/gc/) ||
      die 1 "services/pkg/gc does not compile (or needs modules not in the module cache: GOPROXY=off)"
    RUN_GO=1
  fi
fi

# --- Interleaved rounds ---------------------------------------------------------------------
# The machine is shared, and its load drifts over minutes. Rather than all of EMP and then all of
# Go, each of GO_COUNT rounds runs the EMP program (EMP_RUNS samples, median) and then
# `go test -count 1`, so drift hits both sides alike; each figure is the median over the rounds
# and the table also gives the spread of the per-round ratios.

ROUNDS=$GO_COUNT
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
log "$ROUNDS rounds on cpu $CPU: EMP ($EMP_RUNS samples, $EMP_GATES gates per AND sample)$([ "$RUN_GO" = 1 ] && echo ', then go test -count 1'); load average $LOAD_BEFORE"
for r in $(seq 1 "$ROUNDS"); do
  taskset -c "$CPU" "$EMP_BIN" --circuits "$EMP_DIR/src/emp-tool/circuits/files/bristol_fashion" \
    --runs "$EMP_RUNS" --gates "$EMP_GATES" >"$OUT/emp.r$r.jsonl" ||
    die 1 "the EMP benchmark failed (a wrong garbled result exits 1; see above)"
  sed "s/^/emp round $r: /" "$OUT/emp.r$r.jsonl" >&2
  if [ "$RUN_GO" = 1 ]; then
    (cd "$ROOT/services" && taskset -c "$CPU" go test -run '^$' -bench "$GO_BENCH" -cpu 1 \
        -count 1 ${GO_BENCHTIME:+-benchtime "$GO_BENCHTIME"} ./pkg/gc/) >"$OUT/go.r$r.txt" ||
      { cat "$OUT/go.r$r.txt" >&2; die 1 "the Go benchmarks failed"; }
    grep '^Benchmark' "$OUT/go.r$r.txt" | sed "s/^/go round $r: /" >&2
  fi
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
GO_FILES=()
[ "$RUN_GO" = 1 ] && for r in $(seq 1 "$ROUNDS"); do GO_FILES+=("$OUT/go.r$r.txt"); done

# --- Report --------------------------------------------------------------------------------

CPU_MODEL=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
SIMD=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'aes|vaes|avx2|avx512f|sha_ni' | paste -sd, -)
GO_VER=$( (command -v go >/dev/null && go version | cut -d' ' -f3) || echo "n/a")
GXX_VER=$(g++ -dumpfullversion)
# Which Go engine was measured: the last commit touching services/pkg/gc, "+dirty" with local edits.
GC_REV=$(git -C "$ROOT" log -1 --format=%h -- services/pkg/gc 2>/dev/null || true)
[ -n "$(git -C "$ROOT" status --porcelain -- services/pkg/gc 2>/dev/null)" ] && GC_REV="${GC_REV:-uncommitted}+dirty"

awk -v commit="$EMP_COMMIT" -v cpu="$CPU_MODEL" -v simd="$SIMD" -v gover="$GO_VER" -v gxx="$GXX_VER" \
    -v pin="$CPU" -v l0="$LOAD_BEFORE" -v l1="$LOAD_AFTER" -v date="$(date -u +%Y-%m-%d)" \
    -v rounds="$ROUNDS" -v empruns="$EMP_RUNS" -v empgates="$EMP_GATES" -v gostatus="$GO_STATUS" \
    -v emponly="$EMP_ONLY" -v ncpu="$(nproc)" -v gcrev="${GC_REV:-n/a}" '
function jnum(line, key,   s) {  # value of "key":number in a flat JSON line
  s = line; if (!match(s, "\"" key "\":[-0-9.eE+]+")) return "";
  s = substr(s, RSTART, RLENGTH); sub(/^[^:]*:/, "", s); return s + 0;
}
function jstr(line, key,   s) {
  s = line; if (!match(s, "\"" key "\":\"[^\"]*\"")) return "";
  s = substr(s, RSTART, RLENGTH); sub(/^[^:]*:"/, "", s); sub(/"$/, "", s); return s;
}
function round_of(f,   s) { s = f; sub(/.*\.r/, "", s); sub(/\..*/, "", s); return s + 0; }
function put(series, r, v) { if (v == "") return; val[series, r] = v; has[series] = 1; }
function medlist(a, n,   i, j, t) {
  for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t; }
  return n == 0 ? "" : (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2;
}
function med(series,   r, n, a) { n = 0; for (r = 1; r <= rounds; r++) if ((series, r) in val) a[++n] = val[series, r]; return medlist(a, n); }
# Spread of the per-round ratios num/den (times scale), "lo–hi".
function spread(num, den,   r, lo, hi, x) {
  lo = ""; for (r = 1; r <= rounds; r++) if ((num, r) in val && (den, r) in val && val[den, r] > 0) {
    x = val[num, r] / val[den, r]; if (lo == "" || x < lo) lo = x; if (hi == "" || x > hi) hi = x; }
  return lo == "" ? "" : sprintf(" (rounds %.2f–%.2f)", lo, hi);
}
function mrate(x) { return x == "" ? "n/a" : sprintf("%.1f M", x / 1e6); }
function ms(x) { return x == "" ? "n/a" : sprintf("%.3f ms", x); }
function ratio(a, b) { return (a == "" || b == "" || b == 0) ? "n/a" : sprintf("%.2f×", a / b); }
FILENAME ~ /emp\.r[0-9]+\.jsonl$/ {
  r = round_of(FILENAME);
  b = jstr($0, "bench"); im = jstr($0, "impl"); c = jstr($0, "circuit");
  sh = jnum($0, "cpu_share"); if (sh != "") { if (shmin == "" || sh < shmin) shmin = sh; if (shmax == "" || sh > shmax) shmax = sh; }
  if (b == "and_garble" || b == "and_evaluate") put("emp:" b "/" im, r, jnum($0, "ands_per_s"));
  if (b == "circuit_garble" || b == "circuit_evaluate") { put("emp:" b "/" c, r, jnum($0, "median_ms")); empand[c] = jnum($0, "and_gates"); }
  next;
}
/^Benchmark/ {
  r = round_of(FILENAME);
  name = $1; sub(/-[0-9]+$/, "", name);
  for (i = 2; i < NF; i++) {
    if ($(i + 1) == "ns/op") put("go:" name "|ms", r, $i / 1e6);
    if ($(i + 1) == "ANDs/s") put("go:" name "|ands", r, $i);
  }
  if (!(name in seen)) { seen[name] = 1; order[++nn] = name; }
}
END {
  # If a benchmark has sub-benchmarks, the first one listed is used for the ratio; all of them
  # are listed below the table.
  for (k = 1; k <= nn; k++) { n = order[k]; b = n; sub(/\/.*/, "", b); if (!(b in pick)) pick[b] = n; }
  gA = "go:" pick["BenchmarkGarbleAND"] "|ands"; eA = "go:" pick["BenchmarkEvaluateAND"] "|ands";
  print "";
  printf "### Half-gates garbling, same run: Obscura `services/pkg/gc` (Go) vs EMP-toolkit emp-tool (C++)\n\n";
  printf "%s, one core (`taskset -c %s`), %s; %s. %d interleaved rounds, each: EMP (emp-tool `%s`, g++ %s, Release, `-O3 -march=native`; our `hack/bench/emp/bench_halfgates.cpp`, median of %d samples), then Go %s `go test -cpu 1 -count 1` (services/pkg/gc at `%s`); figures are medians over the rounds, garbled tables to memory. ", cpu, pin, simd, date, rounds, substr(commit, 1, 7), gxx, empruns, gover, gcrev;
  printf "Load average %s before, %s after: a shared %d-core machine, figures are noisy (±10–20 %%)", l0, l1, ncpu;
  split(l0, la, " "); split(l1, lb, " ");
  if (la[1] + 0 > ncpu || lb[1] + 0 > ncpu) printf "; **the machine was busy (load average above %d): rerun on a quiet machine before quoting**", ncpu;
  if (shmin != "") printf "; EMP had the core for %.0f–%.0f %% of its wall time", shmin * 100, shmax * 100;
  printf ".\n\n";
  print "| Measure | Obscura (Go) | EMP | Ratio, >1: Obscura faster (spread of per-round ratios) |";
  print "|---|---|---|---|";
  printf "| AND garble, independent gates, AND/s | %s | %s | %s Go ÷ EMP%s |\n", mrate(med(gA)), mrate(med("emp:and_garble/kernel")), ratio(med(gA), med("emp:and_garble/kernel")), spread(gA, "emp:and_garble/kernel");
  printf "| AND evaluate, independent gates, AND/s | %s | %s | %s Go ÷ EMP%s |\n", mrate(med(eA)), mrate(med("emp:and_evaluate/kernel")), ratio(med(eA), med("emp:and_evaluate/kernel")), spread(eA, "emp:and_evaluate/kernel");
  split("GarbleAES128 EvaluateAES128 GarbleSHA256 EvaluateSHA256", gb, " ");
  split("circuit_garble/aes_128 circuit_evaluate/aes_128 circuit_garble/sha256 circuit_evaluate/sha256", eb, " ");
  for (k = 1; k <= 4; k++) {
    g = "go:" pick["Benchmark" gb[k]] "|ms"; e = "emp:" eb[k];
    c = eb[k]; sub(/.*\//, "", c); what = (c == "aes_128") ? "AES-128" : "SHA-256";
    printf "| %s (Bristol, %d AND) %s, time per circuit | %s | %s | %s EMP ÷ Go%s |\n", what, empand[c], (gb[k] ~ /^Garble/) ? "garble" : "evaluate",
      ms(med(g)), ms(med(e)), ratio(med(e), med(g)), spread(e, g);
  }
  print "";
  printf "EMP AND figures: `halfgates_garble`/`halfgates_eval` (MITCCRH re-keyed fixed-key AES) over %s independent gates. ", empgates;
  printf "Through emp'"'"'s circuit-execution backend (`HalfGateGen`/`HalfGateEva::and_gate`, memory IOChannel): %s garble, %s evaluate", mrate(med("emp:and_garble/backend")), mrate(med("emp:and_evaluate/backend"));
  if (med(gA) != "") printf " (Go ÷ that: %s, %s)", ratio(med(gA), med("emp:and_garble/backend")), ratio(med(eA), med("emp:and_evaluate/backend"));
  print ".";
  if (nn > 0) {
    print ""; print "Go benchmarks (median over the rounds):";
    for (k = 1; k <= nn; k++) { n = order[k]; a = med("go:" n "|ands"); printf "- `%s`: %.0f ns/op%s\n", n, med("go:" n "|ms") * 1e6, a == "" ? "" : sprintf(", %s AND/s", mrate(a)); }
  }
  if (emponly == 1) { print ""; print "Go half not run (--emp-only)."; }
  else if (gostatus != 0) { print ""; print "Go half not run: services/pkg/gc or its benchmarks are missing (see stderr)."; }
}' "$OUT"/emp.r*.jsonl "${GO_FILES[@]}" | tee "$OUT/table.md"
log "raw outputs and table in $OUT"
exit "$GO_STATUS"
