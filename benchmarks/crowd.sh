#!/usr/bin/env bash
# Subscribers past one process's open-files limit: NODES fanout-servers on one PostgreSQL
# database, PER_NODE WebSocket subscribers on each, one fanout-bench process per server (a
# process here may hold at most 20 000 open files). The first bench process writes to the first
# server, EVENTS writes at RATE a second; the others listen and measure their receipts of those
# writes. Usage: bash benchmarks/crowd.sh   (see benchmarks/README.md)
#
# Environment: SCRATCH (build folder, default .build-release), NODES (3), PER_NODE (15000),
# EVENTS (50), RATE (5 writes/s).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:/opt/swift/bin:$PATH"
SCRATCH=${SCRATCH:-.build-release}
NODES=${NODES:-3}
PER_NODE=${PER_NODE:-15000}
EVENTS=${EVENTS:-50}
RATE=${RATE:-5}
source benchmarks/lib.sh   # release_build, free_port, postgres_cluster, start_server

ulimit -n 20000 2>/dev/null || { echo "crowd.sh: cannot raise the open-files limit to 20 000" >&2; exit 1; }
release_build fanout-server fanout-bench

rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

postgres_cluster crowd
"$PGBIN/psql" -q -h 127.0.0.1 -p "$PGPORT" -U fanout -d postgres -c "CREATE DATABASE crowd"
urls=() servers=() before=()
for node in $(seq "$NODES"); do
    start_server "node$node" "postgres://fanout@127.0.0.1:$PGPORT/crowd" --ring-size 4096 --max-subscribers $((PER_NODE + 500))
    urls+=("$URL") servers+=("$PID")
done
sleep 1
for pid in "${servers[@]}"; do before+=("$(rss "$pid")"); done

started=$(date +%s)
echo "connecting $PER_NODE subscribers to each of $NODES servers ($((NODES * PER_NODE)) in all)" >&2
# The listeners: servers 2…NODES, each its own process; a result appears whole (mv) or not at all.
results=() listeners=()
for node in $(seq 2 "$NODES"); do
    results+=("$TMP/listener$node.json")
    ( "$BUILT/fanout-bench" --url "${urls[node - 1]}" --subscribers "$PER_NODE" --events 0 --ready-file "$TMP/ready$node" \
        --writes-file "$TMP/writes" --drain-timeout 120 >"$TMP/listener$node.tmp" 2>"$TMP/listener$node.err" \
        && mv "$TMP/listener$node.tmp" "$TMP/listener$node.json" ) &
    listeners+=($!) pids+=($!)
done
for node in $(seq 2 "$NODES"); do
    for _ in $(seq 1200); do [ -e "$TMP/ready$node" ] && break; sleep 0.5; done
    [ -e "$TMP/ready$node" ] || { tail "$TMP/listener$node.err" >&2; echo "crowd.sh: listener $node did not connect in 10 min" >&2; exit 1; }
done
awaits=() pidargs=()
for result in "${results[@]}"; do awaits+=(--await-file "$result"); done
for pid in "${servers[@]}"; do pidargs+=(--server-pid "$pid"); done
"$BUILT/fanout-bench" --url "${urls[0]}" --subscribers "$PER_NODE" --events "$EVENTS" --writers 1 --rate "$RATE" \
    --writes-file "$TMP/writes" "${awaits[@]}" "${pidargs[@]}" --drain-timeout 120 >"$TMP/writer.json" 2>"$TMP/writer.err" \
    || { tail "$TMP/writer.err" >&2; echo "crowd.sh: the writing bench failed" >&2; exit 1; }
wait "${listeners[@]}"
elapsed=$(($(date +%s) - started))

python3 - "$TMP/writer.json" "${results[@]}" "${before[*]}" "$elapsed" "$NODES" "$PER_NODE" "$EVENTS" "$RATE" <<'PY'
import json, sys
*paths, before, elapsed, nodes, per_node, events, rate = sys.argv[1:]
reports = [json.load(open(p)) for p in paths]
before = [int(b) for b in before.split()]
after = reports[0]["serverRssKiBEach"]
print(f"{int(nodes)} servers on one PostgreSQL database, {int(per_node)} WebSocket subscribers each, "
      f"{events} writes at {rate}/s to server 1 ({elapsed} s in all, connecting included)")
print(f"{'server':<8}{'connected':>10}{'deliveries':>12}{'lost':>6}{'dup':>6}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
      f"{'RSS before':>12}{'RSS after':>11}{'KiB/sub':>9}")
for node, r in enumerate(reports):
    lat = r.get("latencyMs") or {}
    grown = (after[node] - before[node]) / r["connected"] if r["connected"] else 0
    print(f"{node + 1:<8}{r['connected']:>10}{r['deliveries']:>12}{r['lost']:>6}{r['duplicated']:>6}"
          f"{lat.get('p50', 0):>9.1f}{lat.get('p99', 0):>9.1f}{lat.get('max', 0):>9.1f}"
          f"{before[node] / 1024:>10.1f}MB{after[node] / 1024:>9.1f}MB{grown:>9.1f}")
deliveries = sum(r["deliveries"] for r in reports)
expected = sum(r["connected"] for r in reports) * reports[0]["acknowledged"]
cpu = reports[0].get("serverCpuSeconds")
print(f"all: {sum(r['connected'] for r in reports)} connected, {reports[0]['acknowledged']} writes acknowledged, "
      f"{deliveries} deliveries of {expected} owed, lost {sum(r['lost'] for r in reports)}, "
      f"duplicated {sum(r['duplicated'] for r in reports)}; slowest delivery {max((r.get('latencyMs') or {}).get('max', 0) for r in reports):.0f} ms"
      + (f"; servers' CPU {cpu * 1e6 / deliveries:.2f} µs per delivery (summed over the servers)" if cpu and deliveries else ""))
PY
