# Helpers shared by benchmarks/compare.sh and benchmarks/requests.sh (sourced, not run).

# A free TCP port on 127.0.0.1.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The pid whose parent is $1 (nginx's only worker), read from /proc so procps is not needed;
# processes may exit while the list is read, so unreadable entries are skipped.
child_of() {
    local stat line fields
    for stat in /proc/[0-9]*/stat; do
        { read -r line <"$stat"; } 2>/dev/null || continue
        read -ra fields <<<"${line##*) }"     # after the command name: state, ppid, …
        if [ "${fields[1]}" = "$1" ]; then
            line=${stat#/proc/}
            echo "${line%/stat}"
            return
        fi
    done
}
