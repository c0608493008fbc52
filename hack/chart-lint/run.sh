#!/usr/bin/env bash
# make chart-lint: kube-score on the chart's default render (`helm template`), every finding either
# fixed or allowed with its reason in hack/chart-lint/kube-score-allow.txt. Stale allow entries fail.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN="$ROOT/bin"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$BIN/helm" template obscura "$ROOT/charts/obscura" --namespace obscura-system >"$tmp/render.yaml"
# kube-score exits 1 when it finds anything; the allow-list decides.
"$BIN/kube-score" score "$tmp/render.yaml" --output-format json >"$tmp/score.json" || true
python3 - "$tmp/score.json" "$ROOT/hack/chart-lint/kube-score-allow.txt" <<'PY'
import fnmatch, json, sys
score, allow_path = sys.argv[1], sys.argv[2]
allow = []
for n, line in enumerate(open(allow_path), 1):
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    parts = [p.strip() for p in line.split("|")]
    if len(parts) != 4 or not all(parts[:3]) or len(parts[3]) < 20:
        sys.exit(f"{allow_path}:{n}: want 'check | object | finding | reason' with a reason")
    allow.append({"check": parts[0], "object": parts[1], "finding": parts[2], "line": n, "used": 0})
findings, bad = 0, []
for obj in json.load(open(score)):
    name = f'{obj["type_meta"]["kind"]}/{obj["object_meta"]["name"]}'
    for c in obj["checks"]:
        if c["skipped"] or c["grade"] >= 10:
            continue
        for cm in c["comments"] or [{"summary": c["check"]["name"], "path": ""}]:
            findings += 1
            summary = f'{cm.get("path") or ""} {cm.get("summary") or ""}'.strip()
            hit = [a for a in allow if a["check"] == c["check"]["id"] and fnmatch.fnmatch(name, a["object"])
                   and fnmatch.fnmatch(summary, a["finding"])]
            for a in hit:
                a["used"] += 1
            if not hit:
                bad.append(f'{name}: {c["check"]["id"]}: {summary}')
stale = [f'{allow_path}:{a["line"]}: {a["check"]} | {a["object"]} matches no finding (remove it)' for a in allow if not a["used"]]
for b in bad:
    print("kube-score:", b)
for s in stale:
    print(s)
print(f"chart-lint: {findings} kube-score findings on the default render, {findings - len(bad)} allowed, {len(bad)} not allowed, {len(stale)} stale allow entries")
sys.exit(1 if bad or stale else 0)
PY
