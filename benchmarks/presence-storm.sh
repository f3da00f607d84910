#!/usr/bin/env bash
# One user's presence storm, and what the others see meanwhile: one signed token opens N
# WebSockets present on one cart, each changing its state RATE times a second for STORM_SECONDS; as
# another user, /healthz is asked every 50 ms and a change made to another cart every 100 ms
# and read back by a long-poll. Usage: bash benchmarks/presence-storm.sh   (see benchmarks/README.md)
#
# Environment: SCRATCH (build folder, default .build-release), SUBSCRIBERS (1000), STORM_SECONDS
# (10), RATE (1), RUNS (3), SERVER (a fanout-server binary to measure instead of this tree's:
# an A/B against another build), SERVER_ARGS (more flags for the server, e.g.
# "--presence-max-members-per-user 1000"), RUN_TIMEOUT (seconds one measurement may take, 180).
set -euo pipefail
export FANOUT_BENCHMARKS=1
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:/opt/swift/bin:$PATH"
SCRATCH=${SCRATCH:-.build-release}
SUBSCRIBERS=${SUBSCRIBERS:-1000}
STORM_SECONDS=${STORM_SECONDS:-10}
RATE=${RATE:-1}
RUNS=${RUNS:-3}
RUN_TIMEOUT=${RUN_TIMEOUT:-180}
source benchmarks/lib.sh   # release_build, scratch_folder, start_server

release_build fanout-server fanout-bench

scratch_folder storm

SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
OPERATOR=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
# The storm's one user, allowed the storm's cart only.
STORMER=$("$BUILT/fanout-server" token --jwt-secret "$SECRET" --sub stormer --carts hot --scope read --ttl 1h)

mkdir -p "$TMP/results"
started=$(date +%s)
for round in $(seq "$RUNS"); do
    rm -rf "$TMP/db" && mkdir "$TMP/db"
    start_server "server-$round" "$TMP/db/fanout.sqlite" --max-subscribers $((SUBSCRIBERS + 100)) \
        --jwt-secret "$SECRET" --token "$OPERATOR" ${SERVER_ARGS:-}
    sleep 0.5
    echo "round $round: $SUBSCRIBERS subscribers, $RATE changes/s each for $STORM_SECONDS s" >&2
    timeout "$RUN_TIMEOUT" "$BUILT/fanout-bench" --url "$URL" --subscribers "$SUBSCRIBERS" --presence-cart hot \
        --presence-storm "$STORM_SECONDS" --storm-rate "$RATE" --token "$OPERATOR" --subscriber-token "$STORMER" \
        --presence-timeout 60 --server-pid "$PID" >"$TMP/results/$round.json" 2>"$TMP/bench.err" \
        || { tail "$TMP/bench.err" >&2; echo "presence-storm.sh: the bench failed" >&2; exit 1; }
    cat "$TMP/results/$round.json"
    kill -TERM "$PID"
    wait "$PID" 2>/dev/null || true
    pids=()
done
elapsed=$(($(date +%s) - started))

mkdir -p benchmarks/results
commit=$(git rev-parse --short HEAD)
[ -z "$(git status --porcelain -- Sources benchmarks/FanoutBench Package.swift)" ] || commit="$commit-dirty"
[ -z "${SERVER:-}" ] || commit="$commit-server-$(basename "$(dirname "$(dirname "$SERVER")")")"
lines=benchmarks/results/$(date -u '+%Y%m%dT%H%M')-$commit-presence-storm.jsonl
cat "$TMP"/results/*.json >"$lines"
echo "presence-storm.sh: $RUNS rounds in $elapsed s; results in $lines" >&2
