#!/usr/bin/env bash
# Side-by-side benchmark of fanout-server against nchan (the nginx pub/sub module) and NATS
# (nats-server, core protocol), on 127.0.0.1 only. Usage: bash benchmarks/compare.sh   (see benchmarks/README.md)
#
# Environment: RUNS (rounds of every measurement, default 3), SCRATCH (build folder, default
# .build-release), RUN_TIMEOUT (seconds one measurement may take, default 300), BUILD_TIMEOUT
# (default 3600), TOKENS=1 (fanout's subscribers hold a signed token naming the carts written,
# the writers the operator's token: the per-event cost of a token's cart filter), CROWD=1 (only
# the crowd run: 19 000 WebSocket subscribers, 50 writes at CROWD_RATE a second, default 2; about
# 3 minutes a round),
# IDLE_SECONDS (how long the idle runs hold their subscribers while the servers' CPU is measured,
# default 20).
set -euo pipefail
# The benchmark executables exist only with this set (Package.swift).
export FANOUT_BENCHMARKS=1
cd "$(dirname "$0")/.."

export PATH="/opt/swift/usr/bin:/opt/swift/bin:$PATH"
SCRATCH=${SCRATCH:-.build-release}
RUNS=${RUNS:-3}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
IDLE_SECONDS=${IDLE_SECONDS:-20}
# One event to 19 000 subscribers costs each server about 0.25 s of CPU and the bench 0.15 s on
# this machine kind: at 5 writes a second the two cores are saturated, and the latency measures
# the queue of events rather than one event reaching all. At 2 a second each event goes alone.
CROWD_RATE=${CROWD_RATE:-2}
# How often every server checks an idle subscriber: fanout-server's heartbeat (its default, 5 s);
# nchan pings its WebSocket and EventSource subscribers and NATS its clients as often, so that
# the idle runs compare servers that would all notice a dead subscriber as soon.
PING_SECONDS=5
BUILD_TIMEOUT=${BUILD_TIMEOUT:-3600}
NCHAN_MODULE=/usr/lib/nginx/modules/ngx_nchan_module.so
# 10 000 idle WebSockets need that many descriptors in the client and in each server, plus
# slack; 20 000 is also the hard limit of the CI machine kind.
FD_LIMIT=20000

started=()     # pids this script started and has not yet stopped, oldest first
workers=()     # nginx workers: their master stops them, they are only killed if it could not
TMP=$(mktemp -d -t fanout-compare.XXXXXX)
# nginx workers run as an unprivileged user when the master is root; they must be able to
# reach their temp paths inside this folder.
chmod 755 "$TMP"

log() { printf '%s\n' "$*" >&2; }
die() { log "compare.sh: $*"; exit 1; }

alive() { kill -0 "$1" 2>/dev/null; }

# forget ARRAY PID: drops PID from the named list.
forget() {
    local -n list=$1
    local kept=() p
    for p in "${list[@]}"; do [ "$p" = "$2" ] || kept+=("$p"); done
    list=("${kept[@]}")
}

# Stops one started process: TERM, then KILL if it has not gone within 10 s (a server closing
# thousands of WebSockets takes a moment; a hung one must not hang the benchmark).
stop() {
    local pid=$1 i
    if alive "$pid"; then
        kill -TERM "$pid" 2>/dev/null || true
        for i in $(seq 100); do alive "$pid" || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
    forget started "$pid"
}

# Kills what stop() left of an nginx: a worker outlives a master that was killed.
reap_worker() {
    alive "$1" && kill -KILL "$1" 2>/dev/null || true
    forget workers "$1"
}

cleanup() {
    local status=$? pid i
    # Newest first: a client goes before the server it talks to. Workers are left to their
    # master, which restarts a worker that is stopped behind its back.
    for ((i = ${#started[@]} - 1; i >= 0; i--)); do
        kill -TERM "${started[i]}" 2>/dev/null || true
    done
    for i in $(seq 100); do
        for pid in "${started[@]}"; do alive "$pid" && break; pid=""; done
        [ -n "${pid:-}" ] || break
        sleep 0.1
    done
    for pid in "${started[@]}" "${workers[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------------------
# Tools and limits.

# nginx lives in /usr/sbin, which is not on every user's PATH.
NGINX=$(command -v nginx 2>/dev/null || echo /usr/sbin/nginx)
need=()
[ -x "$NGINX" ] || need+=(nginx-light)
[ -f "$NCHAN_MODULE" ] || need+=(libnginx-mod-nchan)
# Debian's package installs a system service too, which apt-install keeps from starting.
NATS_SERVER=$(command -v nats-server 2>/dev/null || echo /usr/sbin/nats-server)
[ -x "$NATS_SERVER" ] || need+=(nats-server)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v python3 >/dev/null 2>&1 || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    # Without starting the system nginx the package would start on port 80: this benchmark
    # starts its own.
    ./scripts/apt-install --no-install-recommends "${need[@]}"
fi
[ -x "$NGINX" ] || NGINX=$(command -v nginx 2>/dev/null || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || die "nginx is missing after install"
[ -f "$NCHAN_MODULE" ] || die "$NCHAN_MODULE is missing after install"
[ -x "$NATS_SERVER" ] || NATS_SERVER=$(command -v nats-server 2>/dev/null || echo /usr/sbin/nats-server)
[ -x "$NATS_SERVER" ] || die "nats-server is missing after install"

ulimit -n "$FD_LIMIT" 2>/dev/null || ulimit -Sn "$FD_LIMIT" \
    || die "cannot raise the open-file limit to $FD_LIMIT (hard limit $(ulimit -Hn))"

# ---------------------------------------------------------------------------------------
# Release binaries, in their own scratch folder so they never disturb a debug build.

for product in fanout-server fanout-bench cartstore-bench hummingbird-floor; do
    log "building $product (release, $SCRATCH)"
    timeout "$BUILD_TIMEOUT" swift build -c release --scratch-path "$SCRATCH" --product "$product" >&2
done
BIN=$(swift build -c release --scratch-path "$SCRATCH" --show-bin-path)
SERVER=$BIN/fanout-server
BENCH=$BIN/fanout-bench
STORE_BENCH=$BIN/cartstore-bench
FLOOR=$BIN/hummingbird-floor
# The SQLite floor: fanout's statements in C (benchmarks/WriteFloor), against the system libsqlite3.
command -v cc >/dev/null 2>&1 && [ -f /usr/include/sqlite3.h ] || {
    log "installing gcc libsqlite3-dev"
    ./scripts/apt-install --no-install-recommends gcc libc6-dev libsqlite3-dev
}
WRITE_FLOOR=$TMP/write-floor
cc -O2 -o "$WRITE_FLOOR" benchmarks/WriteFloor/write-floor.c -lsqlite3 || die "cannot build write-floor"
cat Sources/CartStore/SQLite/Migrations/*.sql >"$TMP/schema.sql"
"$BENCH" --help >/dev/null 2>&1 || die "$BENCH does not run"

# ---------------------------------------------------------------------------------------
# Servers. Each measurement gets a server process of its own, started just before and
# stopped just after: the other peers are not running (so it takes no CPU from the two
# cores), the RSS baseline is a fresh process's, and nothing (allocator high-water marks,
# a longer event log, half-closed sockets) carries over from one size to the next.

# free_port, child_of
source benchmarks/lib.sh

# Sets SERVER_PID (measured), STOP_PID (to stop), URL (where subscribers connect) and, for
# NATS, PUBLISH_URL (where writers publish).
# start_listening NAME PROGRAM ARGUMENT…: starts a server that prints "listening on URL" first
# (fanout-server, hummingbird-floor), its output in $TMP/NAME; sets SERVER_PID, STOP_PID, URL.
start_listening() {
    local dir=$TMP/$1 program=$2 line="" i
    shift 2
    mkdir -p "$dir"
    "$program" "$@" >"$dir/stdout" 2>"$dir/stderr" &
    SERVER_PID=$!
    STOP_PID=$SERVER_PID
    started+=("$SERVER_PID")
    for i in $(seq 200); do
        line=$(head -n 1 "$dir/stdout" 2>/dev/null || true)
        [[ $line == "listening on "* ]] && break
        alive "$SERVER_PID" || { cat "$dir/stderr" >&2; die "$(basename "$program") exited at startup"; }
        sleep 0.05
    done
    [[ $line == "listening on "* ]] || die "$(basename "$program") printed no address within 10 s"
    URL=${line#listening on }
}

start_fanout() {
    start_listening "$1" "$SERVER" --port 0 --db "$TMP/$1/fanout.sqlite" --ring-size 4096 --max-subscribers 19800 \
        --log-level warning "${TOKEN_FLAGS[@]}"
}

start_nchan() {
    local dir=$TMP/$1 port code="" i
    mkdir -p "$dir"/{client_body,proxy,fastcgi,uwsgi,scgi}
    port=$(free_port)
    cat >"$dir/nginx.conf" <<EOF
load_module $NCHAN_MODULE;
# One worker, like the one process fanout-server is, and the worker is what is measured.
worker_processes 1;
worker_rlimit_nofile $FD_LIMIT;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections $FD_LIMIT; }
http {
    access_log off;
    client_body_temp_path $dir/client_body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    server {
        # The default backlog (511) overflows when thousands of subscribers connect at once.
        listen 127.0.0.1:$port backlog=4096;
        location ~ ^/pub/(\\w+)\$ {
            nchan_publisher;
            nchan_channel_id \$1;
            # Keep a short tail for resuming subscribers, not every message of the run.
            nchan_message_buffer_length 100;
            nchan_message_timeout 60s;
        }
        location ~ ^/sub/(\\w+)\$ {
            # Both transports fanout serves: WebSocket and Server-Sent Events (EventSource).
            nchan_subscriber websocket eventsource;
            nchan_channel_id \$1;
            # Live messages only, like a fanout subscriber without since: nothing published
            # before it connected (such as the probe below) reaches it.
            nchan_subscriber_first_message newest;
            nchan_websocket_ping_interval $PING_SECONDS;
            nchan_eventsource_ping_interval $PING_SECONDS;
        }
    }
}
EOF
    "$NGINX" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" -g 'daemon off;' >"$dir/stdout" 2>&1 &
    STOP_PID=$!
    started+=("$STOP_PID")
    URL=http://127.0.0.1:$port
    # The probe proves publishing works: 202 (stored, no subscriber) or 201 (delivered).
    for i in $(seq 100); do
        code=$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' -X POST "$URL/pub/bench" -d '{"seq":1}' || true)
        [[ $code == 201 || $code == 202 ]] && break
        alive "$STOP_PID" || { cat "$dir/stdout" "$dir/error.log" >&2 2>/dev/null; die "nginx exited at startup"; }
        sleep 0.1
    done
    [[ $code == 201 || $code == 202 ]] || { cat "$dir/error.log" >&2; die "publishing to nchan answered $code"; }
    SERVER_PID=$(child_of "$STOP_PID")
    [ -n "$SERVER_PID" ] || die "no nginx worker under master $STOP_PID"
    workers+=("$SERVER_PID")
}

start_nats() {
    local dir=$TMP/$1 port ws_port answer="" i
    mkdir -p "$dir"
    port=$(free_port)
    ws_port=$(free_port)
    cat >"$dir/nats.conf" <<EOF
# Core NATS only (no JetStream): it relays, as nchan does. One process, which Go runs on
# every core (GOMAXPROCS), as fanout-server uses both.
listen: "127.0.0.1:$port"
# The default is 64K; the idle runs hold 9 000 subscribers, and the process inherits this
# script's open-file limit.
max_connections: $FD_LIMIT
# As often as fanout-server heartbeats (PING_SECONDS; the default is 2 minutes).
ping_interval: "${PING_SECONDS}s"
log_file: "$dir/nats.log"
websocket {
    listen: "127.0.0.1:$ws_port"
    no_tls: true
    # The default 2 s for the upgrade is short when thousands connect at once on 2 shared cores.
    handshake_timeout: "30s"
}
EOF
    "$NATS_SERVER" -c "$dir/nats.conf" >"$dir/stdout" 2>&1 &
    SERVER_PID=$!
    STOP_PID=$SERVER_PID
    started+=("$SERVER_PID")
    URL=http://127.0.0.1:$ws_port
    PUBLISH_URL=nats://127.0.0.1:$port
    # The probe proves publishing works: a PUB acknowledged by the PONG to the PING after it.
    # The WebSocket listener starts before the client port, so it is up too.
    for i in $(seq 100); do
        answer=$(python3 - "$port" 2>/dev/null <<'PY' || true
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b'CONNECT {"verbose":false}\r\nPUB bench 9\r\n{"seq":1}\r\nPING\r\n')
seen = b""
while b"PONG" not in seen and b"-ERR" not in seen:
    chunk = s.recv(4096)
    if not chunk:
        break
    seen += chunk
print("PONG" if b"PONG" in seen else seen.decode(errors="replace").strip())
PY
        )
        [ "$answer" = PONG ] && break
        alive "$SERVER_PID" || { cat "$dir/stdout" "$dir/nats.log" >&2 2>/dev/null; die "nats-server exited at startup"; }
        sleep 0.1
    done
    [ "$answer" = PONG ] || { cat "$dir/nats.log" >&2; die "publishing to NATS answered ${answer:-nothing}"; }
}

# The HTTP floor: hummingbird-floor answers a publish as nchan does, each connection's task on
# its event loop as fanout-server's are. Measured as nchan is (fanout-bench --peer nchan).
start_floor() {
    start_listening "$1" "$FLOOR" --port 0 --on-loop
}

# ---------------------------------------------------------------------------------------
# Measurements. Each writes fanout-bench's one JSON line to $RESULTS/<run>.<peer>.json.

RESULTS=$TMP/results
mkdir -p "$RESULTS"

# TOKENS=1: the server takes signed tokens; each subscriber's names every cart a run writes to
# (bench-W-N: writer W, its N-th ten writes; 356 carts, the small, large and saturation runs'),
# so that it receives every event, through a cart filter instead of none.
TOKEN_FLAGS=()
BENCH_TOKEN_ARGS=()
if [ "${TOKENS:-}" = 1 ]; then
    secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
    operator=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
    carts=$(python3 -c "print(','.join([f'bench-{w}-{i}' for w in range(4) for i in range(50)] + [f'bench-{w}-{i}' for w in range(4, 16) for i in range(13)]))")
    TOKEN_FLAGS=(--token "$operator" --jwt-secret "$secret")
    BENCH_TOKEN_ARGS=(--token "$operator" --subscriber-token "$("$SERVER" token --jwt-secret "$secret" --sub bench --carts "$carts" --ttl 4h)")
fi
failures=0

# measure RUN PEER TRANSPORT SUBSCRIBERS EVENTS [WRITERS [RATE]]   (in round $ROUND)
measure() {
    local run=$1 peer=$2 transport=$3 subscribers=$4 events=$5 writers=${6:-} rate=${7:-} bench rc out
    local args=(--subscribers "$subscribers" --events "$events" --transport "$transport")
    # The floor publishes as nchan, under its own name.
    if [ "$peer" = floor ]; then args+=(--peer nchan --label floor); else args+=(--peer "$peer"); fi
    # An idle run holds its subscribers IDLE_SECONDS while the server's CPU is measured; meanwhile
    # this script reads the kernel's memory for the server's end of them (socket_memory.py).
    [[ $run != idle* ]] || args+=(--idle-seconds "$IDLE_SECONDS" --ready-file "$TMP/$run.$peer.$ROUND/ready")
    [ -z "$writers" ] || args+=(--writers "$writers")
    [ -z "$rate" ] || args+=(--rate "$rate")
    local name=$run.$peer.$ROUND
    "start_$peer" "$name"
    args+=(--url "$URL" --server-pid "$SERVER_PID")
    [ "$peer" != fanout ] || args+=("${BENCH_TOKEN_ARGS[@]}")
    [ "$peer" != nats ] || args+=(--nats-url "$PUBLISH_URL")
    out=$RESULTS/$name.json
    log "round $ROUND/$RUNS, $run: $peer, $subscribers $transport subscribers, $events events${writers:+, $writers writers}"
    timeout -k 10 "$RUN_TIMEOUT" "$BENCH" "${args[@]}" >"$out.tmp" 2>"$TMP/$name/bench.err" &
    bench=$!
    started+=("$bench")
    if [[ $run == idle* ]]; then
        local port=${URL##*:} i
        for i in $(seq $((RUN_TIMEOUT * 10))); do
            [ -f "$TMP/$name/ready" ] || { alive "$bench" && sleep 0.1 && continue; }
            break
        done
        # A second to settle, as the bench waits before it measures.
        sleep 1
        python3 benchmarks/socket_memory.py "${port%%/*}" >"$TMP/$name/kernel.json" 2>>"$TMP/$name/bench.err" || true
    fi
    if wait "$bench"; then rc=0; else rc=$?; fi
    forget started "$bench"
    stop "$STOP_PID"
    [ "$SERVER_PID" = "$STOP_PID" ] || reap_worker "$SERVER_PID"
    # Warnings from the server (slow-consumer drops, nchan shared-memory trouble) explain
    # odd numbers, and the temp dir holding them is deleted at exit.
    local logfile=$TMP/$name/stderr
    [ "$peer" = nchan ] && logfile=$TMP/$name/error.log
    [ "$peer" = floor ] && logfile=$TMP/$name/stderr
    # nats-server logs its start and stop at [INF], and a warning that the WebSocket listener
    # has no TLS, however it is configured: only the rest.
    if [ "$peer" = nats ]; then
        logfile=$TMP/$name/warnings.log
        grep -v -e '\[INF\]' -e 'Websocket not configured with TLS' "$TMP/$name/nats.log" >"$logfile" 2>/dev/null || true
    fi
    if [ -s "$logfile" ]; then
        log "  the server logged $(wc -l <"$logfile") line(s); the last ones:"
        tail -n 3 "$logfile" | cut -c 1-300 >&2
    fi
    if [ "$rc" -eq 0 ] && python3 -c 'import json, sys; json.loads(open(sys.argv[1]).read())' "$out.tmp" 2>/dev/null; then
        if [ -s "$TMP/$name/kernel.json" ]; then
            python3 - "$out.tmp" "$TMP/$name/kernel.json" >"$out" <<'PY'
import json, sys
result = json.loads(open(sys.argv[1]).read())
result["kernel"] = json.loads(open(sys.argv[2]).read())
print(json.dumps(result, separators=(",", ":"), sort_keys=True))
PY
            rm -f "$out.tmp"
        else
            mv "$out.tmp" "$out"
        fi
    else
        failures=$((failures + 1))
        [ "$rc" -eq 124 ] && log "  timed out after ${RUN_TIMEOUT} s" || log "  failed (exit $rc)"
        tail -n 20 "$TMP/$name/bench.err" >&2 || true
        rm -f "$out.tmp"
    fi
}

started_at=$(date +%s)
load_before=$(cut -d ' ' -f 1-3 /proc/loadavg)
# RUNS rounds; in each, every measurement once, the peers one after the other, so that all
# see the same machine and the ratios of one round compare like with like.
for ROUND in $(seq "$RUNS"); do
    if [ "${CROWD:-}" = 1 ]; then
        # As many subscribers as one process may hold here (20 000 open files), a write every
        # 1 / CROWD_RATE s: what one event to all of them takes, and what they cost in memory.
        for peer in fanout nchan nats; do measure crowd "$peer" websocket 19000 50 1 "$CROWD_RATE"; done
        continue
    fi
    # Each size for both transports: WebSocket subscribers (run names without suffix), then
    # Server-Sent Events ones (-sse), against nchan's EventSource; NATS has no event stream.
    for transport in websocket sse; do
        suffix="" peers=(fanout nchan nats)
        [ "$transport" = websocket ] || { suffix="-$transport"; peers=(fanout nchan); }
        for peer in "${peers[@]}"; do measure "small$suffix" "$peer" "$transport" 100 2000 4; done
        for peer in "${peers[@]}"; do measure "large$suffix" "$peer" "$transport" 1000 500 4; done
        for peer in "${peers[@]}"; do measure "idle$suffix" "$peer" "$transport" 10000 0; done
    done
    # Saturation: more writers than the cores can serve, so the server's fan-out is the limit.
    for peer in fanout nchan nats; do measure saturation "$peer" websocket 1000 2000 16; done
    # What one write costs each server with nobody listening: what the small and large runs'
    # fan-out costs on top of it falls out (report.py). Beside them the floors of a durable write:
    # Hummingbird answering a publish, and fanout's statements in SQLite alone, a transaction
    # per write and four (the most four writers' batches hold); and the store alone
    # (cartstore-bench: sequential mutations, durability .full, no observers).
    for peer in fanout nchan nats floor; do measure zero "$peer" websocket 0 2000 4; done
    for batch in 1 4; do
        log "round $ROUND/$RUNS, SQLite alone: 4 000 writes, $batch a transaction"
        rm -f "$TMP"/floor.sqlite*
        if floor=$(timeout "$RUN_TIMEOUT" "$WRITE_FLOOR" "$TMP/floor.sqlite" "$TMP/schema.sql" 4000 "$batch"); then
            echo "${floor%\}},\"peer\":\"fanout\"}" >"$RESULTS/sqlite-$batch.fanout.$ROUND.json"
        else
            failures=$((failures + 1))
            log "  write-floor failed"
        fi
    done
    log "round $ROUND/$RUNS, store: cartstore-bench mutations"
    if store_cpu=$(timeout "$RUN_TIMEOUT" "$STORE_BENCH" mutations | awk '/^file, durability .full +none / { print $NF }') && [ -n "$store_cpu" ]; then
        echo "{\"peer\":\"fanout\",\"storeCpuMicrosPerMutation\":$store_cpu}" >"$RESULTS/store.fanout.$ROUND.json"
    else
        failures=$((failures + 1))
        log "  cartstore-bench failed"
    fi
done
elapsed=$(($(date +%s) - started_at))

# ---------------------------------------------------------------------------------------
# The JSON lines of every measurement, kept as benchmarks/results/<time>-<commit>.jsonl, and
# the table (benchmarks/report.py) on stdout and in benchmarks/results/latest.txt.

mkdir -p benchmarks/results
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$([ -z "$(git status --porcelain -- Sources Package.swift 2>/dev/null)" ] || echo ' with uncommitted changes')
lines=benchmarks/results/$(date -u '+%Y%m%dT%H%M')-$commit.jsonl
python3 - "$RESULTS" "$commit$dirty" >"$lines" <<'PY'
import json, os, sys
for name in sorted(os.listdir(sys.argv[1])):
    if name.endswith(".json"):
        run, peer, rnd, _ = name.split(".")
        with open(os.path.join(sys.argv[1], name)) as f:
            result = json.loads(f.read())
        print(json.dumps({"run": run, "round": int(rnd), "commit": sys.argv[2], **result}, separators=(",", ":")))
PY
{
    echo "fanout-server vs nchan and NATS, $(date -u '+%Y-%m-%d %H:%M UTC'), $RUNS round(s), measurements took ${elapsed} s${TOKENS:+ (TOKENS=$TOKENS: fanout subscribers with signed tokens)}${CROWD:+ (CROWD=1: the crowd run only, $CROWD_RATE writes a second)}"
    echo "machine: $(nproc) cores, $(grep -m 1 'model name' /proc/cpuinfo | sed 's/.*: //'), Linux $(uname -r)," \
        "$(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), load average $load_before before, $(cut -d ' ' -f 1-3 /proc/loadavg) after"
    echo "versions: $("$NGINX" -v 2>&1 | sed 's/.*: //'), nchan $(dpkg-query -W -f '${Version}' libnginx-mod-nchan 2>/dev/null || echo '?')," \
        "$("$NATS_SERVER" --version 2>&1), fanout $commit$dirty"
    echo "raw results: $lines"
    echo
    python3 benchmarks/report.py "$lines"
} | tee "benchmarks/results/latest${CROWD:+-crowd}.txt"
if [ "${CROWD:-}" = 1 ]; then
    log "summary written to benchmarks/results/latest-crowd.txt"
else
    python3 benchmarks/chart.py "$lines" benchmarks/results/chart.svg
    log "summary written to benchmarks/results/latest.txt, chart to benchmarks/results/chart.svg"
fi

[ "$failures" -eq 0 ] || die "$failures run(s) failed"
