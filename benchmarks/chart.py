#!/usr/bin/env python3
"""A chart of a compare.sh run: server CPU per delivery and p99 latency against subscribers,
fanout, nchan and NATS, WebSocket (solid) and Server-Sent Events (dashed; NATS has none),
medians over the rounds.

    python3 benchmarks/chart.py benchmarks/results/<run>.jsonl benchmarks/results/chart.svg

Plain SVG, written by hand (no plotting library on the machine), readable in light and dark.
"""
import math
import statistics
import sys
from html import escape

from report import load, per_round

SIZES = [("small", 100), ("large", 1000)]
SERIES = [  # (peer, run suffix, label, colour, dash)
    ("fanout", "", "fanout WebSocket", "#2f6fdf", ""),
    ("fanout", "-sse", "fanout SSE", "#2f6fdf", "6 4"),
    ("nchan", "", "nchan WebSocket", "#d9822b", ""),
    ("nchan", "-sse", "nchan EventSource", "#d9822b", "6 4"),
    ("nats", "", "NATS WebSocket", "#2a9d5c", ""),
]
PANELS = [
    ("server CPU per delivery (µs)", ("serverCpuMicrosPerDelivery",)),
    ("latency p99, write → receipt (ms)", ("latencyMs", "p99")),
]
W, H = 380, 260           # one panel
LEFT, RIGHT, TOP, BOTTOM = 52, 16, 34, 40


def points(results, peer, suffix, figure):
    out = []
    for run, subscribers in SIZES:
        values = per_round(results, run + suffix, peer, figure).values()
        if values:
            out.append((subscribers, statistics.median(values)))
    return out


def nice_step(rough):
    """The smallest of 1, 2, 2.5 or 5 × 10^k that is at least `rough`."""
    magnitude = 10 ** math.floor(math.log10(rough))
    return next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= rough)


def panel(results, index, title, figure):
    x0 = index * W
    lines = [s + (points(results, s[0], s[1], figure),) for s in SERIES]
    step = nice_step(max([v for *_, pts in lines for _, v in pts] + [1]) * 1.1 / 4)
    top = step * 4
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(subscribers):  # two sizes, evenly spaced on a log axis
        return x0 + LEFT + (0.1 + 0.8 * (0 if subscribers == SIZES[0][1] else 1)) * plot_w

    def py(v):
        return TOP + plot_h * (1 - v / top)

    svg = [f'<text x="{x0 + LEFT}" y="20" class="title">{escape(title)}</text>',
           f'<line x1="{x0 + LEFT}" y1="{TOP + plot_h}" x2="{x0 + W - RIGHT}" y2="{TOP + plot_h}" class="axis"/>',
           f'<line x1="{x0 + LEFT}" y1="{TOP}" x2="{x0 + LEFT}" y2="{TOP + plot_h}" class="axis"/>']
    for i in range(5):
        v = step * i
        svg.append(f'<line x1="{x0 + LEFT}" y1="{py(v):.1f}" x2="{x0 + W - RIGHT}" y2="{py(v):.1f}" class="grid"/>')
        svg.append(f'<text x="{x0 + LEFT - 6}" y="{py(v) + 4:.1f}" class="tick" text-anchor="end">{v:g}</text>')
    for _, subscribers in SIZES:
        svg.append(f'<text x="{px(subscribers):.1f}" y="{TOP + plot_h + 16}" class="tick" text-anchor="middle">{subscribers:,}</text>'.replace(",", " "))
    svg.append(f'<text x="{x0 + LEFT + plot_w / 2}" y="{H - 6}" class="tick" text-anchor="middle">subscribers</text>')
    for _, _, label, colour, dash, pts in lines:
        if not pts:
            continue
        path = " ".join(f"{px(s):.1f},{py(v):.1f}" for s, v in pts)
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        svg.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash_attr}/>')
        for s, v in pts:
            svg.append(f'<circle cx="{px(s):.1f}" cy="{py(v):.1f}" r="3" fill="{colour}"><title>{escape(label)}, {s} subscribers: {v:.2f}</title></circle>')
    return svg


def main(source, target):
    results = load(source)
    legend_y = H + 8
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W * len(PANELS)}" height="{H + 30}" '
           f'viewBox="0 0 {W * len(PANELS)} {H + 30}" font-family="sans-serif">',
           '<style>.title{font-size:13px;font-weight:600;fill:#555}.tick{font-size:11px;fill:#777}'
           '.axis{stroke:#888}.grid{stroke:#8884;stroke-width:0.5}.legend{font-size:11px;fill:#666}</style>']
    for index, (title, figure) in enumerate(PANELS):
        svg += panel(results, index, title, figure)
    x = LEFT
    # A kept run from before a peer was measured has no line for it, and no legend entry.
    for peer, suffix, label, colour, dash in SERIES:
        if not any(points(results, peer, suffix, figure) for _, figure in PANELS):
            continue
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        svg.append(f'<line x1="{x}" y1="{legend_y + 8}" x2="{x + 24}" y2="{legend_y + 8}" stroke="{colour}" stroke-width="2"{dash_attr}/>')
        svg.append(f'<text x="{x + 30}" y="{legend_y + 12}" class="legend">{escape(label)}</text>')
        x += 40 + 7 * len(label)
    svg.append("</svg>")
    with open(target, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
