#!/usr/bin/env bash
# The request path, measured from outside: server CPU per request for the HTTP routes a client
# uses most, with wrk (Debian's `wrk`) holding CONNECTIONS keep-alive connections for SECONDS
# each. CPU is the server process's user + system time from /proc, so the client's own work
# is not counted. Usage: bash benchmarks/requests.sh   (a release build first, like compare.sh)
#
# Environment: CONNECTIONS (default 4), SECONDS_EACH (default 8), SCRATCH (build folder,
# default .build-release), SERVER (a fanout-server binary to measure instead of building one:
# an A/B of two builds), PEERS=1 (then `GET /healthz` is also measured on a one-route
# Hummingbird server, `hummingbird-floor`, as Hummingbird runs connections and on their loops,
# and the same answer from nginx's `return 200`: the floors fanout's HTTP layer stands on).
# Durability is as shipped (full).
set -euo pipefail
# The benchmark executables exist only with this set (Package.swift).
export FANOUT_BENCHMARKS=1
cd "$(dirname "$0")/.."
source benchmarks/lib.sh   # free_port, child_of

export PATH="/opt/swift/usr/bin:/opt/swift/bin:$PATH"
SCRATCH=${SCRATCH:-.build-release}
CONNECTIONS=${CONNECTIONS:-4}
SECONDS_EACH=${SECONDS_EACH:-8}
command -v wrk >/dev/null || { echo "requests.sh: wrk is missing (apt-get install wrk)" >&2; exit 1; }

if [ -z "${SERVER:-}" ]; then
    swift build -c release --scratch-path "$SCRATCH" --product fanout-server >&2
    SERVER="$SCRATCH/release/fanout-server"
fi
if [ "${PEERS:-}" = 1 ]; then
    swift build -c release --scratch-path "$SCRATCH" --product hummingbird-floor >&2
fi
folder=$(mktemp -d -t fanout-requests.XXXXXX)
peers=()
trap 'kill "$pid" "${peers[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$folder"' EXIT
"$SERVER" --port 0 --db "$folder/db.sqlite" --log-level warning > "$folder/out" 2>&1 &
pid=$!
until grep -q '^listening on http://' "$folder/out"; do
    kill -0 "$pid" 2>/dev/null || { cat "$folder/out" >&2; exit 1; }
    sleep 0.1
done
base=$(sed -n 's/^listening on \(http:[^ ]*\).*/\1/p' "$folder/out" | head -1)

# One cart with one line, one event in the log.
curl -sf -X POST -H 'Content-Type: application/json' -d '{"sku":"x","quantity":1,"unitPriceCents":1}' "$base/carts/a/items" >/dev/null
cat > "$folder/patch.lua" <<'LUA'
wrk.method = "PATCH"
wrk.body = '{"quantity":2}'
wrk.headers["Content-Type"] = "application/json"
LUA

ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/${measured:-$pid}/stat"; }

echo "fanout-server request path: $CONNECTIONS connections, ${SECONDS_EACH} s each, $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
echo "| request | requests/s | server CPU per request (µs) |"
echo "| --- | ---: | ---: |"
measure() { # label, then wrk's arguments
    local label=$1
    shift
    local before after output requests
    before=$(cpu)
    output=$(wrk -t2 -c"$CONNECTIONS" -d"${SECONDS_EACH}s" "$@" 2>&1)
    after=$(cpu)
    requests=$(awk '/requests in/ {print $1}' <<<"$output")
    python3 - "$label" "$requests" "$SECONDS_EACH" "$before" "$after" "$ticks" <<'PY'
import sys
label, requests, seconds, before, after, ticks = sys.argv[1], *map(float, sys.argv[2:])
print(f"| {label} | {requests / seconds:,.0f} | {(after - before) / ticks / requests * 1e6:.1f} |")
PY
}
measure "GET /healthz" "$base/healthz"
measure "GET /carts/{id} (one line)" "$base/carts/a"
measure "GET /carts (one cart)" "$base/carts"
measure "GET /events?since=0&limit=1" "$base/events?since=0&limit=1"
measure "PATCH /carts/{id}/items/{sku}" -s "$folder/patch.lua" "$base/carts/a/items/x"

[ "${PEERS:-}" = 1 ] || exit 0
# The floors: the same /healthz answer from Hummingbird alone and from nginx.
for mode in "" --on-loop; do
    "$SCRATCH/release/hummingbird-floor" --port 0 $mode >"$folder/floor$mode" 2>&1 &
    peers+=($!)
    measured=$!
    until grep -q '^listening on http://' "$folder/floor$mode"; do sleep 0.1; done
    measure "GET /healthz, hummingbird-floor ${mode:-(a task per connection on the pool)}" \
        "$(sed -n 's/^listening on \(http:[^ ]*\).*/\1/p' "$folder/floor$mode")/healthz"
done
NGINX=$(command -v nginx 2>/dev/null || echo /usr/sbin/nginx)
if [ ! -x "$NGINX" ]; then
    echo "(nginx is missing: apt-get install nginx-light, or run benchmarks/compare.sh once)"
    exit 0
fi
port=$(free_port)
mkdir -p "$folder/nginx"
cat >"$folder/nginx/nginx.conf" <<EOF
worker_processes 1;
pid $folder/nginx/nginx.pid;
events { worker_connections 1024; }
http {
    access_log off;
    server {
        listen 127.0.0.1:$port;
        location = /healthz { default_type application/json; return 200 '{"status":"ok"}'; }
    }
}
EOF
"$NGINX" -p "$folder/nginx" -c "$folder/nginx/nginx.conf" -e "$folder/nginx/error.log" -g 'daemon off;' >"$folder/nginx/out" 2>&1 &
peers+=($!)
master=$!
measured=
for _ in $(seq 100); do
    measured=$(child_of "$master")
    [ -n "$measured" ] && curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
    sleep 0.1
done
[ -n "$measured" ] || { cat "$folder/nginx/out" "$folder/nginx/error.log" >&2; exit 1; }
measure "GET /healthz, nginx return 200 (its worker)" "http://127.0.0.1:$port/healthz"
