#!/usr/bin/env bash
# Where a PostgreSQL write's server CPU goes: one fanout-server on a throwaway PostgreSQL
# cluster, wrk POSTing one item to a random cart of 1 000 over 64 connections (writes.lua), the
# server started under `perf record -e task-clock` (sampling a process perf attaches to later
# records nothing on this machine kind; one it starts works). Prints the server's CPU per
# acknowledged write, its samples by part (kernel, PostgresNIO, SwiftNIO, Hummingbird, fanout's
# own code, the Swift runtime, Foundation, libc; the part the sampled instruction is in, not its
# callers'), then the hottest functions.
# Usage: bash benchmarks/profile-writes.sh                  (builds fanout-server, release)
#        SERVER=/path/to/fanout-server bash benchmarks/profile-writes.sh   (any build: an A/B)
# Environment: SECONDS_EACH (10), CONNECTIONS (64), TOP (15 functions). Needs wrk, perf
# (Debian's linux-perf) and PostgreSQL's server programs.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:/opt/swift/bin:$PATH"
SCRATCH=${SCRATCH:-.build-release}
SECONDS_EACH=${SECONDS_EACH:-10}
CONNECTIONS=${CONNECTIONS:-64}
TOP=${TOP:-15}
source benchmarks/lib.sh   # release_build, free_port, postgres_cluster, start_server
for tool in wrk perf objcopy; do
    command -v "$tool" >/dev/null || { echo "profile-writes.sh: $tool is not installed" >&2; exit 1; }
done
release_build fanout-server

postgres_cluster profile
"$PGBIN/psql" -q -h 127.0.0.1 -p "$PGPORT" -U fanout -d postgres -c "CREATE DATABASE profile"
[ -x "$BIN/fanout-server" ] || { echo "profile-writes.sh: no fanout-server in $BIN" >&2; exit 1; }
# perf names no function of a binary carrying Swift's DWARF 5 here: it profiles a copy without
# the debug sections (the symbol table, which names the functions, stays).
objcopy --strip-debug "$BIN/fanout-server" "$TMP/fanout-server"
perf record -q -e task-clock -F 1999 -o "$TMP/perf.data" -- \
    "$TMP/fanout-server" --port 0 --db "postgres://fanout@127.0.0.1:$PGPORT/profile" --log-level warning \
    >"$TMP/server.out" 2>"$TMP/server.err" &
PERF=$!
pids+=("$PERF")
for _ in $(seq 200); do grep -q "listening on" "$TMP/server.out" 2>/dev/null && break; sleep 0.05; done
URL=$(sed -n 's/^listening on //p' "$TMP/server.out")
[ -n "$URL" ] || { cat "$TMP/server.err" >&2; echo "profile-writes.sh: the server did not start" >&2; exit 1; }
PID=$(child_of "$PERF")
ticks() { local line fields; read -r line <"/proc/$1/stat"; read -ra fields <<<"${line##*) }"; echo $((fields[11] + fields[12])); }

# A first short run fills the connection pools and prepares the statements (its samples are
# in the profile too: a tenth of them at most).
wrk -t 1 -c "$CONNECTIONS" -d 1s --timeout 10s -s benchmarks/writes.lua "$URL" >/dev/null
cpu0=$(ticks "$PID")
wrk -t 1 -c "$CONNECTIONS" -d "${SECONDS_EACH}s" --timeout 10s -s benchmarks/writes.lua "$URL" | tail -n 1 >"$TMP/wrk.json"
cpu1=$(ticks "$PID")
kill -TERM "$PID"; wait "$PERF" 2>/dev/null || true
perf script -i "$TMP/perf.data" -F ip,sym,dso 2>/dev/null | sed "s/^ *[0-9a-f]* //" | swift demangle >"$TMP/samples.txt"

python3 - "$TMP/wrk.json" "$cpu0" "$cpu1" "$(getconf CLK_TCK)" "$TMP/samples.txt" "$TOP" <<'PY'
import collections, json, re, sys
wrk_path, cpu0, cpu1, hz, samples_path, top = sys.argv[1:]
run = json.loads(open(wrk_path).read())
per_write = (int(cpu1) - int(cpu0)) / int(hz) / run["acknowledged"] * 1e6
print(f"{run['acknowledged'] / run['seconds']:.0f} writes/s, {per_write:.0f} µs server CPU per write, "
      f"p50 {run['p50']:.1f} ms, p99 {run['p99']:.1f} ms")
rules = [("kernel", lambda s, d: "kernel" in d or d.startswith("[vdso")),
         ("PostgresNIO", lambda s, d: "PostgresNIO" in s),
         ("SwiftNIO", lambda s, d: re.search(r"\bNIO(Core|Posix|HTTP1|WebSocket|Concurrency|Extras)?\.", s) is not None),
         ("Hummingbird", lambda s, d: "Hummingbird" in s),
         ("fanout", lambda s, d: re.search(r"\b(CartStore|CartStorePostgres|FanoutServer|FanoutProtocol|WeakObservers)\.", s) is not None),
         ("Swift runtime and stdlib", lambda s, d: "libswift" in d or s.startswith("swift_") or s.startswith("__swift_")
                                      or re.search(r"(^| of )Swift\.", s) is not None),
         ("Foundation", lambda s, d: "Foundation" in d or "Foundation" in s),
         ("service lifecycle, logging, metrics", lambda s, d: re.search(r"\b(ServiceLifecycle|Logging|CoreMetrics|Prometheus|AsyncAlgorithms|DequeModule|_NIOConcurrency)\.", s) is not None),
         ("libc", lambda s, d: "libc.so" in d or "libm.so" in d or "ld-linux" in d),
         ("other", lambda s, d: True)]
parts = collections.Counter()
symbols = collections.Counter()
total = 0
for line in open(samples_path):
    line = line.strip()
    if not line:
        continue
    m = re.match(r"^(.*?)\s*\((\S+)\)$", line)
    sym, dso = (m.group(1), m.group(2)) if m else (line, "")
    total += 1
    symbols[(sym[:120], dso.rsplit("/", 1)[-1])] += 1
    for name, rule in rules:
        if rule(sym, dso):
            parts[name] += 1
            break
print(f"{total} samples (task-clock, 1999 Hz, warm-up included), by the part the sampled instruction is in:")
for name, _ in rules:
    if parts[name]:
        print(f"  {name:<38}{100 * parts[name] / total:6.1f} %  ~{per_write * parts[name] / total:5.0f} µs per write")
others = collections.Counter()
for (sym, dso), n in symbols.items():
    if not any(rule(sym, dso) for name, rule in rules[:-1]):
        others[(sym, dso)] += n
print(f"the {top} hottest functions:")
for (sym, dso), n in symbols.most_common(int(top)):
    print(f"  {100 * n / total:5.1f} %  {sym}  ({dso})")
print("the hottest of the other part:")
for (sym, dso), n in others.most_common(5):
    print(f"  {100 * n / total:5.1f} %  {sym}  ({dso})")
PY
