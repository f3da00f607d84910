#!/usr/bin/env bash
# What presence costs: N WebSocket subscribers present on one cart join one after another, then
# all leave; beside the same subscribers on the cart without presence (the baseline: connecting,
# subscribing, closing). Usage: bash benchmarks/presence.sh   (see benchmarks/README.md)
#
# Environment: SCRATCH (build folder, default .build-release), SIZES (subscribers, default
# "100 1000"), RUNS (rounds, default 3), RUN_TIMEOUT (seconds one measurement may take, 120).
set -euo pipefail
# fanout-bench's build folder is shared with compare.sh, which builds with this set.
export FANOUT_BENCHMARKS=1
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:/opt/swift/bin:$PATH"
SCRATCH=${SCRATCH:-.build-release}
SIZES=${SIZES:-100 1000}
RUNS=${RUNS:-3}
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
source benchmarks/lib.sh   # release_build, scratch_folder, start_server

release_build fanout-server fanout-bench

scratch_folder presence

# measure ROUND N MODE: a fresh server on a fresh SQLite database, one fanout-bench run; its
# JSON line goes to $TMP/results/.
mkdir -p "$TMP/results"
measure() {
    local round=$1 n=$2 mode=$3 flags=()
    [ "$mode" = present ] || flags=(--presence-baseline)
    rm -rf "$TMP/db" && mkdir "$TMP/db"
    start_server "server-$n-$mode" "$TMP/db/fanout.sqlite" --max-subscribers $((n + 100))
    sleep 0.5
    echo "round $round: $n subscribers, $mode" >&2
    timeout "$RUN_TIMEOUT" "$BUILT/fanout-bench" --url "$URL" --subscribers "$n" --presence-cart room \
        --presence-timeout "$((RUN_TIMEOUT / 2))" --server-pid "$PID" "${flags[@]}" \
        >"$TMP/results/$n.$mode.$round.json" 2>"$TMP/bench.err" \
        || { tail "$TMP/bench.err" >&2; echo "presence.sh: the bench failed ($n, $mode)" >&2; exit 1; }
    kill -TERM "$PID"
    wait "$PID" 2>/dev/null || true
    pids=()
}

started=$(date +%s)
for round in $(seq "$RUNS"); do
    for n in $SIZES; do
        measure "$round" "$n" baseline
        measure "$round" "$n" present
    done
done
elapsed=$(($(date +%s) - started))

mkdir -p benchmarks/results
commit=$(git rev-parse --short HEAD)
[ -z "$(git status --porcelain -- Sources benchmarks/FanoutBench Package.swift)" ] || commit="$commit-dirty"
lines=benchmarks/results/$(date -u '+%Y%m%dT%H%M')-$commit-presence.jsonl
cat "$TMP"/results/*.json >"$lines"
python3 - "$lines" "$RUNS" "$elapsed" <<'PY' | tee benchmarks/results/latest-presence.txt
import json, statistics, sys
path, runs, elapsed = sys.argv[1], sys.argv[2], sys.argv[3]
rows = [json.loads(line) for line in open(path)]
def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")
print(f"Presence on one cart: N WebSocket subscribers join one after another, then all close at once "
      f"(medians of {runs} rounds, {elapsed} s in all). baseline: the same subscribers on the cart without presence.")
print(f"{'N':>5} {'mode':<9}{'phase':<6}{'messages':>9}{'expected':>9}{'wall s':>8}{'CPU s':>8}{'µs/msg':>8}"
      f"{'RSS before':>11}{'RSS after':>10}{'KiB/sub':>8}")
cpu = {}
for n in sorted({r["subscribers"] for r in rows}):
    for present in (False, True):
        group = [r for r in rows if r["subscribers"] == n and r["present"] == present]
        if not group:
            continue
        for phase in ("join", "leave"):
            p = [r[phase] for r in group]
            cpu[(n, present, phase)] = median([x.get("serverCpuSeconds") for x in p])
            before = median([x.get("serverRssBeforeKiB") for x in p])
            after = median([x.get("serverRssAfterKiB") for x in p])
            per_sub = median([(x["serverRssAfterKiB"] - x["serverRssBeforeKiB"]) / r["connected"] for x, r in zip(p, group)])
            per_msg = median([x.get("serverCpuMicrosPerMessage") for x in p])
            print(f"{n:>5} {'present' if present else 'baseline':<9}{phase:<6}{int(median([x['messages'] for x in p])):>9}"
                  f"{p[0]['expected']:>9}{median([x['seconds'] for x in p]):>8.2f}{cpu[(n, present, phase)]:>8.2f}"
                  f"{per_msg:>8.2f}{before / 1024:>9.1f}MB{after / 1024:>8.1f}MB{per_sub:>8.1f}")
print("presence's own server CPU (present − baseline), per presence message:")
for n in sorted({r["subscribers"] for r in rows}):
    for phase, expected in (("join", n + n * (n - 1) // 2), ("leave", n * (n - 1) // 2)):
        if (n, True, phase) in cpu and (n, False, phase) in cpu:
            extra = cpu[(n, True, phase)] - cpu[(n, False, phase)]
            print(f"  N={n:<5} {phase:<6} {extra:6.2f} s, {extra * 1e6 / expected:5.2f} µs/msg")
print(f"raw results: {path}")
PY
