#!/usr/bin/env bash
# Acknowledged writes/s from outside, SQLite next to PostgreSQL on one, two and three servers
# sharing a database (the several servers with SwiftNIO's default event loops, then with one
# each), and PostgreSQL alone under the same changes (pgbench, benchmarks/pgbench-floor.sql: the
# floor under a PostgreSQL write): wrk POSTs one item to a random cart of 1 000 over keep-alive connections
# (benchmarks/writes.lua); the servers' CPU from /proc; the log's last seq checked against the
# writes acknowledged. Usage: bash benchmarks/writes.sh   (see benchmarks/README.md)
#
# Needs wrk and PostgreSQL's server programs (apt-get install wrk postgresql); starts its own
# throwaway cluster on 127.0.0.1 (as the postgres user when run as root), removed at exit.
# Environment: SCRATCH (build folder, default .build-release), SECONDS_EACH (10), CONNECTIONS
# ("4 64 256", for one server), NODE_CONNECTIONS (64, spread over the servers of a multi-node run),
# SERVER (a fanout-server to measure instead of building one: runs of two builds in turn are an A/B).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:/opt/swift/bin:$PATH"
SCRATCH=${SCRATCH:-.build-release}
SECONDS_EACH=${SECONDS_EACH:-10}
CONNECTIONS=${CONNECTIONS:-4 64 256}
NODE_CONNECTIONS=${NODE_CONNECTIONS:-64}
source benchmarks/lib.sh   # release_build, free_port, postgres_cluster, start_server
command -v wrk >/dev/null || { echo "writes.sh: wrk is not installed (apt-get install wrk)" >&2; exit 1; }

release_build fanout-server

postgres_cluster writes
pgport=$PGPORT
psql_() { "$PGBIN/psql" -qtA -h 127.0.0.1 -p "$pgport" -U fanout "$@"; }

# CPU seconds (user + system) of the given pids so far.
cpu_seconds() {
    local total=0 pid line fields
    for pid in "$@"; do
        read -r line <"/proc/$pid/stat"
        read -ra fields <<<"${line##*) }"
        total=$((total + fields[11] + fields[12]))
    done
    python3 -c "print($total / $(getconf CLK_TCK))"
}

# The pids of PostgreSQL's processes: the postmaster and its children (the sessions persist
# through a run, so their CPU before and after it can be compared).
postgres_pids() {
    local postmaster
    postmaster=$(head -n 1 "$TMP/pg/postmaster.pid")
    echo "$postmaster"
    children_of "$postmaster"
}

# The batches that wrote the events after seq $2 through $3 in database $1: a batch is one
# transaction, so its events share their xmin.
batches() {
    "$PGBIN/psql" -qtA -h 127.0.0.1 -p "$pgport" -U fanout -d "$1" \
        -c "SELECT count(DISTINCT xmin::text) FROM cart_events WHERE seq > $2 AND seq <= $3"
}

# run LABEL LASTSEQ_COMMAND CONNECTIONS URL... -- PID...: wrk on every URL at once (the
# connections split between them), then one line of the table. DATABASE (PostgreSQL's, when
# set) adds the database's own CPU per write and the writes per batch.
run() {
    local label=$1 lastseq=$2 connections=$3; shift 3
    local urls=() servers=()
    while [ "$1" != "--" ]; do urls+=("$1"); shift; done; shift
    servers=("$@")
    local before cpu0 cpu1 each=$((connections / ${#urls[@]})) i=0 wrks=()
    before=$(eval "$lastseq")
    local pg=() pgcpu0=0 pgcpu1=0 batches=0
    if [ -n "${DATABASE:-}" ]; then
        mapfile -t pg < <(postgres_pids)
        pgcpu0=$(cpu_seconds "${pg[@]}")
    fi
    cpu0=$(cpu_seconds "${servers[@]}")
    for url in "${urls[@]}"; do
        wrk -t 1 -c "$each" -d "${SECONDS_EACH}s" --timeout 10s -s benchmarks/writes.lua "$url" | tail -n 1 >"$TMP/wrk.$i" &
        wrks+=("$!")
        i=$((i + 1))
    done
    # These wrk runs, not the servers (background jobs too) nor any other wrk on the machine.
    wait "${wrks[@]}"
    cpu1=$(cpu_seconds "${servers[@]}")
    [ -z "${DATABASE:-}" ] || pgcpu1=$(cpu_seconds "${pg[@]}")
    sleep 0.5
    local after
    after=$(eval "$lastseq")
    [ -z "${DATABASE:-}" ] || batches=$(batches "$DATABASE" "$before" "$after")
    cat "$TMP"/wrk.* | python3 -c '
import json, sys
label, connections, before, after, cpu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
pgcpu, batches = float(sys.argv[6]), int(sys.argv[7])
runs = [json.loads(line) for line in sys.stdin if line.startswith("{")]
acknowledged = sum(r["acknowledged"] for r in runs)
seconds = max(r["seconds"] for r in runs)
logged = after - before
check = "ok" if logged >= acknowledged else "LOST %d" % (acknowledged - logged)
database = ("%9.0f%9.1f" % (pgcpu / max(acknowledged, 1) * 1e6, acknowledged / batches)) if batches else "%9s%9s" % ("-", "-")
print("%-36s%6d%12.0f%10.0f%s%9.1f%9.1f%8d%8s" % (label, connections, acknowledged / seconds, cpu / max(acknowledged, 1) * 1e6,
      database, max(r["p50"] for r in runs), max(r["p99"] for r in runs), sum(r["errors"] for r in runs), check))
' "$label" "$connections" "$before" "$after" "$(python3 -c "print($cpu1 - $cpu0)")" \
        "$(python3 -c "print($pgcpu1 - $pgcpu0)")" "$batches"
    rm -f "$TMP"/wrk.*
}

printf '%-36s%6s%12s%10s%9s%9s%9s%9s%8s%8s\n' "one item to a random cart of 1 000" "conns" "writes/s" "µs CPU/w" "PG µs/w" "w/batch" \
    "p50 ms" "p99 ms" "errors" "log"
start_server sqlite "$TMP/fanout.sqlite"
for c in $CONNECTIONS; do
    run "SQLite, 1 server" "sqlite3 $TMP/fanout.sqlite 'SELECT coalesce(max(seq), 0) FROM cart_events'" "$c" "$URL" -- "$PID"
done
kill "$PID"; wait "$PID" 2>/dev/null || true

# PostgreSQL's CPU so far, the sessions that ended included: its live processes' own, and what
# the postmaster has reaped of its children (a pgbench run's sessions end with it).
cluster_cpu_seconds() {
    local postmaster line fields
    postmaster=$(head -n 1 "$TMP/pg/postmaster.pid")
    read -r line <"/proc/$postmaster/stat"
    read -ra fields <<<"${line##*) }"
    # shellcheck disable=SC2046  # one pid a word
    python3 -c "print($(cpu_seconds $(postgres_pids)) + ($((fields[13] + fields[14]))) / $(getconf CLK_TCK))"
}

# The floor under a PostgreSQL write: fanout's statements for one change, a transaction each,
# from pgbench (benchmarks/pgbench-floor.sql) on a database a fanout-server has migrated, with
# the session setting fanout's sessions have; PostgreSQL's CPU per write beside fanout's.
psql_ -d postgres -c "CREATE DATABASE floor"
start_server floor "postgres://fanout@127.0.0.1:$pgport/floor"
kill "$PID"; wait "$PID" 2>/dev/null || true
for c in $CONNECTIONS; do
    # A pgbench client is a session: within the cluster's max_connections (200).
    [ "$c" -le 150 ] || continue
    pg0=$(cluster_cpu_seconds)
    floor=$(PGOPTIONS="-c fanout.writer=on" "$PGBIN/pgbench" -n -M prepared -h 127.0.0.1 -p "$pgport" -U fanout -c "$c" -j 1 \
        -T "$SECONDS_EACH" -f benchmarks/pgbench-floor.sql floor 2>&1) || { echo "$floor" >&2; exit 1; }
    sleep 0.5   # its sessions end and are reaped
    pg1=$(cluster_cpu_seconds)
    python3 -c '
import re, sys
label, connections, text, cpu, seconds = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
done = int(re.search(r"number of transactions actually processed: (\d+)", text).group(1))
failed = re.search(r"number of failed transactions: (\d+)", text)
latency = float(re.search(r"latency average = ([\d.]+) ms", text).group(1))
print("%-36s%6d%12.0f%10s%9.0f%9.1f%9.1f%9s%8d%8s" % (label, connections, done / seconds, "-", cpu * 1e6 / done, 1.0,
      latency, "-", int(failed.group(1)) if failed else 0, "-"))
' "PostgreSQL alone (pgbench)" "$c" "$floor" "$(python3 -c "print($pg1 - $pg0)")" "$SECONDS_EACH"
done

# Several servers twice: each with SwiftNIO's default of an event loop per core, then with
# `--threads 1` (two or three servers, PostgreSQL and wrk share these two cores).
setup_index=0
for setup in "1" "2" "3" "2 --threads 1" "3 --threads 1"; do
    read -r nodes flags <<<"$setup"
    setup_index=$((setup_index + 1))
    database=nodes$setup_index
    psql_ -d postgres -c "CREATE DATABASE $database"
    urls=() servers=()
    for n in $(seq "$nodes"); do
        # shellcheck disable=SC2086  # the flags are words
        start_server "pg$setup_index-$n" "postgres://fanout@127.0.0.1:$pgport/$database" $flags
        urls+=("$URL"); servers+=("$PID")
    done
    lastseq="$PGBIN/psql -qtA -h 127.0.0.1 -p $pgport -U fanout -d $database -c 'SELECT latest FROM event_seq'"
    DATABASE=$database
    if [ "$nodes" = 1 ]; then
        for c in $CONNECTIONS; do run "PostgreSQL, 1 server" "$lastseq" "$c" "${urls[@]}" -- "${servers[@]}"; done
    else
        run "PostgreSQL, $nodes servers${flags:+, $flags}" "$lastseq" "$NODE_CONNECTIONS" "${urls[@]}" -- "${servers[@]}"
    fi
    for pid in "${servers[@]}"; do kill "$pid"; wait "$pid" 2>/dev/null || true; done
done
echo "(µs CPU/w: the fanout servers' CPU per acknowledged write, summed over servers; PG µs/w: PostgreSQL's own;"
echo " w/batch: acknowledged writes per batch committed;"
echo " log: the database's last seq moved by at least the writes acknowledged;"
echo " PostgreSQL alone: benchmarks/pgbench-floor.sql, a transaction per write; its p50 column is the average latency)"
