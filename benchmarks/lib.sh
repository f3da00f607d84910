# Helpers shared by the benchmark scripts (sourced, not run).

# release_build PRODUCT…: builds the products (release, in $SCRATCH) and sets BUILT to their
# folder and BIN to the fanout-server's: SERVER's folder when SERVER names a binary (any build,
# for an A/B of two; fanout-server is then not built), else BUILT.
release_build() {
    local product
    for product in "$@"; do
        [ "$product" = fanout-server ] && [ -n "${SERVER:-}" ] && continue
        swift build -c release --scratch-path "$SCRATCH" --product "$product" >&2
    done
    BUILT=$(swift build -c release --scratch-path "$SCRATCH" --show-bin-path)
    if [ -n "${SERVER:-}" ]; then BIN=$(dirname "$SERVER"); else BIN=$BUILT; fi
}

# A free TCP port on 127.0.0.1.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The pids whose parent is $1, at most $2 of them (all when not given), read from /proc so
# procps is not needed; processes may exit while the list is read, so unreadable entries are
# skipped.
children_of() {
    local stat line fields found=0
    for stat in /proc/[0-9]*/stat; do
        { read -r line <"$stat"; } 2>/dev/null || continue
        read -ra fields <<<"${line##*) }"     # after the command name: state, ppid, …
        if [ "${fields[1]}" = "$1" ]; then
            line=${stat#/proc/}
            echo "${line%/stat}"
            found=$((found + 1))
            [ -z "${2:-}" ] || [ "$found" -lt "$2" ] || return 0
        fi
    done
}

# The pid whose parent is $1 (nginx's only worker, the process perf started).
child_of() {
    children_of "$1" 1
}

# scratch_folder NAME: makes $TMP (a fresh folder) and empties `pids`; at exit the fanout
# servers in `pids` are stopped and $TMP removed, and the script's status kept.
scratch_folder() {
    TMP=$(mktemp -d -t "fanout-$1.XXXXXX")
    pids=()
    trap scratch_cleanup EXIT
}

scratch_cleanup() {
    local status=$?
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
    exit "$status"
}

# A throwaway PostgreSQL cluster (for nodes.sh and writes.sh): `postgres_cluster NAME` makes
# $TMP (a fresh folder), starts the cluster in $TMP/pg on a free port of 127.0.0.1 (as the
# postgres user when run as root), sets PGBIN and PGPORT, and at exit stops it, the fanout
# servers in `pids`, and removes $TMP.
postgres_cluster() {
    TMP=$(mktemp -d -t "fanout-$1.XXXXXX")
    chmod 755 "$TMP"
    pids=()
    PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    [ -x "$PGBIN/initdb" ] || { echo "$1.sh: PostgreSQL is not installed (apt-get install postgresql)" >&2; exit 1; }
    as_postgres=()
    [ "$(id -u)" -ne 0 ] || { as_postgres=(runuser -u postgres --); chown postgres "$TMP"; }
    trap postgres_cleanup EXIT
    PGPORT=$(free_port)
    "${as_postgres[@]}" "$PGBIN/initdb" -D "$TMP/pg" -U fanout -A trust -E UTF8 --locale C >/dev/null
    "${as_postgres[@]}" "$PGBIN/pg_ctl" start -w -D "$TMP/pg" -l "$TMP/pg.log" \
        -o "-p $PGPORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$TMP -c max_connections=200" >/dev/null
}

postgres_cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    "${as_postgres[@]}" "$PGBIN/pg_ctl" stop -m immediate -D "$TMP/pg" >/dev/null 2>&1 || true
    rm -rf "$TMP"
}

# start_server NAME DB [ARGUMENTS…]: a fanout-server from $BIN on a free port, its output in
# $TMP/NAME.out and .err; sets URL and PID (added to `pids`).
start_server() {
    local name=$1 db=$2
    shift 2
    "$BIN/fanout-server" --port 0 --db "$db" --log-level warning "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
    PID=$!
    pids+=("$PID")
    for _ in $(seq 200); do grep -q "listening on" "$TMP/$name.out" 2>/dev/null && break; sleep 0.05; done
    URL=$(sed -n 's/^listening on //p' "$TMP/$name.out")
    [ -n "$URL" ] || { cat "$TMP/$name.err" >&2; echo "$name did not start" >&2; exit 1; }
}
