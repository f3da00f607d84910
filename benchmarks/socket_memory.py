#!/usr/bin/env python3
"""The kernel memory of a server's accepted connections, as compare.sh's idle runs report it.

    python3 benchmarks/socket_memory.py PORT

Prints one JSON object: the established TCP connections whose local port is PORT (`ss -tmn`),
their socket buffers in all (`skmem`: received and queued data, memory reserved ahead, options,
backlog; rb and tb are limits, t is part of w, d counts drops), the kernel objects one
connection holds whoever serves it (its TCP socket, socket inode, open file and dentry, and an
epoll entry where the kernel lists that cache apart: their object sizes from /proc/slabinfo),
and both per connection, in KiB. A server's memory per connection is then its RSS per
connection plus this.
"""
import json
import re
import subprocess
import sys

BUFFERS = ("r", "w", "f", "o", "bl")
OBJECTS = ("TCP", "sock_inode_cache", "filp", "dentry", "eppoll_epi")


def main(port):
    listed = subprocess.run(["ss", "-tmnH", "state", "established", f"( sport = :{port} )"],
                            check=True, capture_output=True, text=True).stdout
    sockets = 0
    buffers = 0
    for skmem in re.findall(r"skmem:\(([^)]*)\)", listed):
        sockets += 1
        for field in skmem.split(","):
            name, number = re.match(r"([a-z]+)(\d+)", field).groups()
            if name in BUFFERS:
                buffers += int(number)
    objects = 0
    with open("/proc/slabinfo") as f:
        for line in f:
            fields = line.split()
            # name active_objs num_objs objsize ...
            if len(fields) > 3 and fields[0] in OBJECTS:
                objects += int(fields[3])
    per_connection = (buffers / sockets + objects) / 1024 if sockets else None
    print(json.dumps({"sockets": sockets, "buffersKiB": round(buffers / 1024, 1), "objectBytesPerSocket": objects,
                      "kiBPerConnection": per_connection and round(per_connection, 2)}))


if __name__ == "__main__":
    main(int(sys.argv[1]))
