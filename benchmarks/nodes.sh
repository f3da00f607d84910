#!/usr/bin/env bash
# One fanout-server against two on one PostgreSQL database, next to SQLite: mutations/s and
# p50/p99 write -> receipt with 1 000 subscribers (on one server, or 500 on each of two, writes
# spread over both). Usage: bash benchmarks/nodes.sh   (see benchmarks/README.md)
#
# Needs PostgreSQL's server programs (apt-get install postgresql); starts its own throwaway
# cluster on 127.0.0.1 (as the postgres user when run as root) and removes it at exit.
# Environment: SCRATCH (build folder, default .build-release), SUBSCRIBERS (1000), EVENTS (500),
# RATE (writes per second in all; default: as fast as the writers' answers come), SERVER (a
# fanout-server to measure instead of the one built here: runs of two builds in turn are an A/B).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:/opt/swift/bin:$PATH"
SCRATCH=${SCRATCH:-.build-release}
SUBSCRIBERS=${SUBSCRIBERS:-1000}
EVENTS=${EVENTS:-500}
RATE=${RATE:-}
source benchmarks/lib.sh   # release_build, free_port, postgres_cluster, start_server

ulimit -n 20000 2>/dev/null || true
release_build fanout-server fanout-bench

postgres_cluster nodes
port=$PGPORT
"$PGBIN/psql" -q -h 127.0.0.1 -p "$port" -U fanout -d postgres -c "CREATE DATABASE one" -c "CREATE DATABASE two"

cat >"$TMP/summary.py" <<'PY'
import json, sys
r = json.load(sys.stdin)
print("%-44s%10.0f%10.1f%10.1f%10.2f%6d%6d" % (sys.argv[1], r["mutationsPerSecond"], r["latencyMs"]["p50"],
      r["latencyMs"]["p99"], r["serverCpuMicrosPerDelivery"], r["lost"], r["duplicated"]))
PY

server_args=(--ring-size 4096 --max-subscribers 20000)

# run LABEL URL... -- PID...: one fanout-bench run, its summary line.
run() {
    local label=$1; shift
    local args=() pidargs=()
    while [ "$1" != "--" ]; do args+=(--url "$1"); shift; done; shift
    for pid in "$@"; do pidargs+=(--server-pid "$pid"); done
    "$BUILT/fanout-bench" "${args[@]}" "${pidargs[@]}" --subscribers "$SUBSCRIBERS" --events "$EVENTS" --writers 4 ${RATE:+--rate "$RATE"} \
        | python3 "$TMP/summary.py" "$label"
}

printf '%-44s%10s%10s%10s%10s%6s%6s\n' "$SUBSCRIBERS subscribers × $EVENTS writes, 4 writers${RATE:+, $RATE/s}" "writes/s" "p50 ms" "p99 ms" "µs/dlv" "lost" "dup"
start_server sqlite "$TMP/fanout.sqlite" "${server_args[@]}"; run "SQLite, 1 server" "$URL" -- "$PID"; kill "$PID"; wait "$PID" 2>/dev/null || true
start_server one "postgres://fanout@127.0.0.1:$port/one" "${server_args[@]}"; run "PostgreSQL, 1 server" "$URL" -- "$PID"; kill "$PID"; wait "$PID" 2>/dev/null || true
start_server a "postgres://fanout@127.0.0.1:$port/two" "${server_args[@]}"; first=$URL; firstpid=$PID
start_server b "postgres://fanout@127.0.0.1:$port/two" "${server_args[@]}"
run "PostgreSQL, 2 servers, half the subscribers each" "$first" "$URL" -- "$firstpid" "$PID"
echo "(µs/dlv: the fanout servers' CPU per delivery, summed over servers; PostgreSQL's own CPU is not in it)"
