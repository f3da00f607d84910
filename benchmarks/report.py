#!/usr/bin/env python3
"""The table of a compare.sh run, from its JSON lines.

    python3 benchmarks/report.py benchmarks/results/<run>.jsonl

Each line is one measurement: fanout-bench's JSON plus "run" (small, large, idle, …, with
"-sse" for Server-Sent Events subscribers) and "round" (compare.sh repeats every measurement
RUNS times, interleaving the peers). Every figure shown is the median over the rounds; each
ratio column (fanout / nchan, fanout / NATS) is the median of the per-round ratios (both
measured in the same round, minutes apart), with their lowest and highest in brackets. A peer
a run does not measure (NATS has no Server-Sent Events), or that the file has no run of at all
(one kept from before NATS was measured), has an empty column.
"""
import json
import statistics
import sys
from collections import defaultdict


def load(path):
    results = defaultdict(dict)  # (run, peer) -> {round: result}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                results[(r["run"], r["peer"])][r.get("round", 1)] = r
    return results


def value(result, path):
    for key in path:
        result = result.get(key) if isinstance(result, dict) else None
    return result


def rss_per_subscriber(r):
    if r.get("serverRssKiB") is None or r.get("serverRssBeforeKiB") is None or not r.get("connected"):
        return None
    return (r["serverRssKiB"] - r["serverRssBeforeKiB"]) / r["connected"]


def cpu_per_mutation(r):
    if r.get("serverCpuSeconds") is None or not r.get("acknowledged"):
        return None
    return r["serverCpuSeconds"] * 1e6 / r["acknowledged"]


def per_round(results, run, peer, figure):
    """{round: figure} for the measurements of (run, peer) that have it."""
    out = {}
    for rnd, r in results.get((run, peer), {}).items():
        v = figure(r) if callable(figure) else value(r, figure)
        if v is not None:
            out[rnd] = v
    return out


def fmt(v, decimals):
    return "-" if v is None else f"{v:,.{decimals}f}".replace(",", " ")


def median(values):
    values = list(values)
    return statistics.median(values) if values else None


WIDTH = 46
PEERS = ("fanout", "nchan", "nats")
# The peers each run measures; a peer not measured in a run has an empty column, one measured
# but missing (a failed run) shows "-".
RUNS = {f"{size}{suffix}": PEERS if suffix == "" else ("fanout", "nchan")
        for suffix in ("", "-sse") for size in ("small", "large", "idle")}
RUNS.update({"crowd": PEERS, "saturation": PEERS, "zero": PEERS, "mutations": ("fanout",), "store": ("fanout",),
             "sqlite-1": ("fanout",), "sqlite-4": ("fanout",)})


def own_fanout_cost(results):
    """The fan-out's own CPU per delivery: a run's server CPU less what its writes cost the
    same server with nobody listening (the zero run of the same round), per delivery."""
    def figure(r):
        zero = results.get(("zero", r["peer"]), {}).get(r.get("round", 1))
        per_write = cpu_per_mutation(zero) if zero else None
        if per_write is None or r.get("serverCpuSeconds") is None or not r.get("deliveries"):
            return None
        return (r["serverCpuSeconds"] * 1e6 - per_write * r["acknowledged"]) / r["deliveries"]
    return figure


def kernel_per_connection(r):
    return value(r, ("kernel", "kiBPerConnection"))


def memory_per_connection(r):
    rss, kernel = rss_per_subscriber(r), kernel_per_connection(r)
    return None if rss is None or kernel is None else rss + kernel


def header(title):
    print(f"{title:<{WIDTH}}{'fanout':>12}{'nchan':>12}{'NATS':>12}{'fanout/nchan':>22}{'fanout/NATS':>22}")


def ratio(a, b):
    """The median per-round ratio of a to b, with its lowest and highest when rounds differ."""
    ratios = [a[k] / b[k] for k in a if k in b and b[k]]
    if not ratios:
        return "-"
    spread = f" ({min(ratios):.2f}–{max(ratios):.2f})" if len(ratios) > 1 else ""
    return f"{median(ratios):.2f}×{spread}"


def measured(results, run):
    """The peers `run` measures that the file has measurements of, in any run."""
    return [peer for peer in RUNS.get(run, PEERS) if any(p == peer for _, p in results)]


def row(results, run, label, figure, decimals):
    peers = measured(results, run)
    values = {peer: per_round(results, run, peer, figure) for peer in PEERS if peer in peers}
    cells = [fmt(median(values[peer].values()), decimals) if peer in values else "" for peer in PEERS]
    ratios = [ratio(values["fanout"], values[peer]) if peer in values else "" for peer in PEERS[1:]]
    line = f"  {label:<{WIDTH - 2}}" + "".join(f"{c:>12}" for c in cells) + "".join(f"{r:>22}" for r in ratios)
    print(line.rstrip())


def loaded(results, run, title):
    header(title)
    own = own_fanout_cost(results)
    for label, path, decimals in [
        ("subscribers connected", ("connected",), 0),
        ("writes acknowledged", ("acknowledged",), 0),
        ("writes/s", ("mutationsPerSecond",), 0),
        ("deliveries/s", ("deliveriesPerSecond",), 0),
        ("latency p50 (ms)", ("latencyMs", "p50"), 2),
        ("latency p99 (ms)", ("latencyMs", "p99"), 2),
        ("latency max (ms)", ("latencyMs", "max"), 2),
        ("lost", ("lost",), 0),
        ("duplicated", ("duplicated",), 0),
        ("server CPU per delivery (µs)", ("serverCpuMicrosPerDelivery",), 2),
        ("  of which the fan-out's own (µs)", own, 2),
        ("bench CPU per delivery (µs)", ("clientCpuMicrosPerDelivery",), 2),
    ]:
        row(results, run, label, path, decimals)
    print()


def idle(results, run, title):
    header(title)
    row(results, run, "subscribers connected", ("connected",), 0)
    row(results, run, "RSS per idle subscriber (KiB)", rss_per_subscriber, 1)
    row(results, run, "kernel memory per connection (KiB)", kernel_per_connection, 1)
    row(results, run, "RSS + kernel per connection (KiB)", memory_per_connection, 1)
    row(results, run, "CPU per idle connection per second (µs)", ("idleCpuMicrosPerConnectionSecond",), 2)
    print()


def floors(results):
    """What a write costs each server with nobody listening, and the floors under fanout's."""
    header("Writes, nobody listening: 2 000 writes, 4 writers")
    row(results, "zero", "writes/s", ("mutationsPerSecond",), 0)
    row(results, "zero", "server CPU per write (µs)", cpu_per_mutation, 1)
    print()
    nchan = per_round(results, "zero", "nchan", cpu_per_mutation)
    print(f"{'The floors of a durable write':<{WIDTH}}{'CPU (µs)':>12}{'/ nchan publish':>22}")
    for label, run, peer, figure in [
        ("Hummingbird, a publish answered at once", "zero", "floor", cpu_per_mutation),
        ("SQLite alone, a transaction per write", "sqlite-1", "fanout", ("cpuMicrosPerWrite",)),
        ("SQLite alone, 4 writes a transaction", "sqlite-4", "fanout", ("cpuMicrosPerWrite",)),
        ("CartStore alone, sequential", "store", "fanout", ("storeCpuMicrosPerMutation",)),
    ]:
        values = per_round(results, run, peer, figure)
        if values:
            print(f"  {label:<{WIDTH - 2}}{fmt(median(values.values()), 1):>12}{ratio(values, nchan):>22}")
    print()




def crowd(results):
    rates = [r.get("rate") for r in results.get(("crowd", "fanout"), {}).values() if r.get("rate")]
    header(f"Crowd: 19 000 subscribers, 50 writes at {fmt(median(rates), 0) if rates else '?'}/s")
    for label, figure, decimals in [
        ("subscribers connected", ("connected",), 0),
        ("RSS per subscriber (KiB)", rss_per_subscriber, 1),
        ("one event to all: latency p50 (ms)", ("latencyMs", "p50"), 1),
        ("one event to all: latency p99 (ms)", ("latencyMs", "p99"), 1),
        ("one event to all: latency max (ms)", ("latencyMs", "max"), 1),
        ("lost + duplicated", lambda r: r.get("lost", 0) + r.get("duplicated", 0), 0),
        ("server CPU per delivery (µs)", ("serverCpuMicrosPerDelivery",), 2),
        ("bench CPU per delivery (µs)", ("clientCpuMicrosPerDelivery",), 2),
    ]:
        row(results, "crowd", label, figure, decimals)
    print()


def main(path):
    results = load(path)
    rounds = max((len(v) for v in results.values()), default=0)
    print(f"medians of {rounds} round(s); in brackets, the lowest and highest per-round ratio\n")
    if any(run == "crowd" for run, _ in results):
        crowd(results)
        if all(run == "crowd" for run, _ in results):
            return
    for suffix, name in (("", "WebSocket"), ("-sse", "Server-Sent Events")):
        loaded(results, f"small{suffix}", f"{name}: 100 subscribers × 2 000 events")
        loaded(results, f"large{suffix}", f"{name}: 1 000 subscribers × 500 events")
        idle_count = median(r.get("subscribers", 0) for r in results.get((f"idle{suffix}", "fanout"), {}).values())
        idle(results, f"idle{suffix}", f"{name}: {fmt(idle_count or 0, 0)} idle subscribers")
    header("Saturation: 1 000 subscribers, 16 writers")
    row(results, "saturation", "writes/s", ("mutationsPerSecond",), 0)
    row(results, "saturation", "deliveries/s", ("deliveriesPerSecond",), 0)
    row(results, "saturation", "latency p99 (ms)", ("latencyMs", "p99"), 2)
    row(results, "saturation", "server CPU per delivery (µs)", ("serverCpuMicrosPerDelivery",), 2)
    row(results, "saturation", "lost + duplicated", lambda r: r.get("lost", 0) + r.get("duplicated", 0), 0)
    print()
    if any(run == "zero" for run, _ in results):
        floors(results)
    else:  # a run kept from before the zero runs
        header("Mutations alone: no subscribers, 10 000 writes; the store alone (cartstore-bench)")
        row(results, "mutations", "writes/s", ("mutationsPerSecond",), 0)
        row(results, "mutations", "server CPU per mutation (µs)", cpu_per_mutation, 1)
        row(results, "store", "CartStore alone, CPU per mutation (µs)", ("storeCpuMicrosPerMutation",), 1)
    # A file has either the zero runs and floors (since 2026-11-28) or the mutations run before them.
    writes = {"zero", "sqlite-1", "sqlite-4"} if any(run == "zero" for run, _ in results) else {"mutations"}
    not_in_this_file = {"zero", "sqlite-1", "sqlite-4", "mutations"} - writes
    missing = [f"{run}.{peer}" for run in RUNS if run != "crowd" and run not in not_in_this_file
               for peer in measured(results, run) if not results.get((run, peer))]
    if missing:
        print(f"\nmissing runs (shown as -): {', '.join(missing)}")


if __name__ == "__main__":
    main(sys.argv[1])
