#!/usr/bin/env python3
"""SVG bar charts of bench/multinode_bench.sh's JSON lines (no plotting
library needed): inter- and intra-node bytes per step, step time and final
loss against plain stage 3, one group of bars per mode.

    plot_multinode.py RESULTS.jsonl OUT.svg
"""
import json
import sys


def bars(title, modes, series, unit, x0, y0, w, h):
    """series: [(label, colour, [value per mode])]."""
    out = [f'<text x="{x0}" y="{y0 - 8}" font-size="13" font-weight="bold">{title}</text>']
    top = max([v for _, _, vals in series for v in vals] + [1e-12])
    n, k = len(modes), len(series)
    gw = w / n
    bw = gw * 0.8 / k
    out.append(f'<line x1="{x0}" y1="{y0 + h}" x2="{x0 + w}" y2="{y0 + h}" stroke="black"/>')
    for i, m in enumerate(modes):
        for j, (_, colour, vals) in enumerate(series):
            v = vals[i]
            bh = h * v / top
            x = x0 + i * gw + gw * 0.1 + j * bw
            out.append(f'<rect x="{x:.1f}" y="{y0 + h - bh:.1f}" width="{bw:.1f}" '
                       f'height="{bh:.1f}" fill="{colour}"/>')
            out.append(f'<text x="{x + bw / 2:.1f}" y="{y0 + h - bh - 2:.1f}" font-size="8" '
                       f'text-anchor="middle">{v:.3g}</text>')
        out.append(f'<text x="{x0 + i * gw + gw / 2:.1f}" y="{y0 + h + 12}" font-size="9" '
                   f'text-anchor="middle">{m}</text>')
    for j, (label, colour, _) in enumerate(series):
        out.append(f'<rect x="{x0 + w - 150}" y="{y0 + j * 12}" width="8" height="8" fill="{colour}"/>')
        out.append(f'<text x="{x0 + w - 138}" y="{y0 + j * 12 + 8}" font-size="9">{label} ({unit})</text>')
    return out


def main():
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    modes = [r["mode"] for r in rows]
    w, h = 720, 150
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w + 80}" height="{4 * (h + 60) + 40}" '
           'font-family="sans-serif">',
           f'<text x="40" y="20" font-size="14">zero: {rows[0]["nodes"]} nodes x '
           f'{rows[0]["ranks"] // rows[0]["nodes"]} ranks, Psi = {rows[0]["psi"]}, '
           f'{rows[0]["steps"]} steps</text>']
    y = 60
    svg += bars("inter-node bytes per step", modes,
                [("inter", "#c0392b", [r["inter_bytes_per_step"] / 1e3 for r in rows])], "kB", 40, y, w, h)
    y += h + 60
    svg += bars("intra-node bytes per step", modes,
                [("intra", "#2980b9", [r["intra_bytes_per_step"] / 1e3 for r in rows])], "kB", 40, y, w, h)
    y += h + 60
    svg += bars("step time", modes, [("step", "#27ae60", [r["step_ms"] for r in rows])], "ms", 40, y, w, h)
    y += h + 60
    svg += bars("final loss vs plain stage 3", modes,
                [("|rel diff|", "#8e44ad", [abs(r["loss_vs_stage3"]) * 100 for r in rows])], "%", 40, y, w, h)
    svg.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(svg))


if __name__ == "__main__":
    main()
