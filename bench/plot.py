#!/usr/bin/env python3
"""Pictures from the benchmarks' JSON lines: where the bytes and
the time go, per ZeRO stage, at each rank count.

    /usr/bin/python3 bench/plot.py DIR

reads DIR/step_parts.jsonl (``torch_gpt_bench --observe`` with modes
compute_only, comm_onlyN, zeroN) and DIR/collectives.jsonl
(``collectives_bench``, any rank counts) and writes into DIR:

* ``memory_per_rank.png``: model-state bytes per rank by stage, measured
  (``zero_stats``) beside estimated (``zero.estimate``), stacked by kind;
* ``step_breakdown.png``: the full step's wall time by phase
  (``wall_clock_breakdown``: forward, backward, and the optimizer step's
  boundary reduce, norm, update, publish and the rest; they tile the step),
  with the whole step on the caller's clock (a black bar: at stages 0-2 the
  engine sees no call during the model's forward, so its phases start at the
  first gradient hand-off), beside the model's compute alone
  (``compute_only``) and the stage's collectives alone (``comm_onlyN``);
* ``collective_bandwidth.png``: bus bandwidth (ZeRO accounting, bytes
  per rank) of zero's collectives against raw MPI's, by message size.

matplotlib from Debian (python3-matplotlib, tools/install_deps.sh); rank
0's line where ranks differ, the fastest run where a run was repeated.
"""
from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from typing import Dict, List

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MEMORY_KINDS = [("param_bytes", "params"), ("grad_bytes", "grads"),
                ("master_bytes", "fp32 master"), ("optimizer_bytes", "optimizer"),
                ("buffer_bytes", "buffers")]
PHASES = [("forward_ms", "forward"), ("backward_ms", "backward"),
          ("boundary_reduce_ms", "boundary reduce"), ("norm_ms", "norm"),
          ("update_ms", "update"), ("publish_ms", "publish"),
          ("step_other_ms", "step, rest")]
COLORS = plt.rcParams["axes.prop_cycle"].by_key()["color"]


def read_jsonl(path: str) -> List[dict]:
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def rank0_fastest(rows: List[dict]) -> Dict[tuple, dict]:
    """(ranks, mode) -> rank 0's line of the run whose slowest rank was fastest."""
    runs: Dict[tuple, Dict[int, List[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if "mode" in r and "rank" in r and "error" not in r:
            runs[(r["ranks"], r["mode"])][r.get("run", 0)].append(r)
    out = {}
    for key, by_run in runs.items():
        best = min(by_run.values(), key=lambda rs: max(x["step_ms"] for x in rs))
        out[key] = min(best, key=lambda x: x["rank"])
    return out


def plot_memory(lines: Dict[tuple, dict], worlds: List[int], path: str) -> None:
    fig, axes = plt.subplots(1, len(worlds), figsize=(5.5 * len(worlds), 4), squeeze=False)
    for ax, w in zip(axes[0], worlds):
        stages = [s for s in range(4) if (w, f"zero{s}") in lines
                  and "measured" in lines[(w, f"zero{s}")]]
        for i, s in enumerate(stages):
            r = lines[(w, f"zero{s}")]
            for j, (src, hatch) in enumerate((("measured", ""), ("estimated", "//"))):
                bottom = 0.0
                for k, (kind, label) in enumerate(MEMORY_KINDS):
                    v = r[src][kind] / 2**20
                    ax.bar(i + (j - 0.5) * 0.38, v, 0.36, bottom=bottom, color=COLORS[k],
                           hatch=hatch, edgecolor="black", linewidth=0.4,
                           label=label if i == 0 and j == 0 else None)
                    bottom += v
        ax.set_xticks(range(len(stages)))
        ax.set_xticklabels([f"stage {s}\nmeasured | est." for s in stages])
        ax.set_ylabel("MiB per rank")
        ax.set_title(f"model state per rank, {w} ranks")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_breakdown(lines: Dict[tuple, dict], worlds: List[int], path: str) -> None:
    fig, axes = plt.subplots(1, len(worlds), figsize=(5.5 * len(worlds), 4.8), squeeze=False)
    for ax, w in zip(axes[0], worlds):
        stages = [s for s in range(4) if (w, f"zero{s}") in lines
                  and "breakdown_ms" in lines[(w, f"zero{s}")]]
        for i, s in enumerate(stages):
            b = dict(lines[(w, f"zero{s}")]["breakdown_ms"])
            b["step_other_ms"] = max(0.0, b["optimizer_ms"] - sum(
                b[k] for k in ("boundary_reduce_ms", "norm_ms", "update_ms", "publish_ms")))
            bottom = 0.0
            for k, (key, label) in enumerate(PHASES):
                ax.bar(i - 0.2, b[key], 0.38, bottom=bottom, color=COLORS[k],
                       label=label if i == 0 else None)
                bottom += b[key]
            # The caller's own clock for the whole step: at stages 0-2 the
            # engine sees no call during the model's forward (params stay
            # resident), so the phases start at the first gradient hand-off.
            ax.plot([i - 0.39, i - 0.01], [lines[(w, f"zero{s}")]["step_ms"]] * 2, color="black",
                    linewidth=2.5, label="whole step (caller's clock)" if i == 0 else None)
            comm = lines.get((w, f"comm_only{s}"))
            if comm:
                ax.bar(i + 0.2, comm["comm_ms"], 0.38, color="white", edgecolor="black",
                       hatch="xx", label="comm only" if i == 0 else None)
        compute = lines.get((w, "compute_only"))
        if compute:
            ax.axhline(compute["step_ms"], color="black", linestyle="--", linewidth=1,
                       label="compute only (fwd+bwd)")
        ax.set_xticks(range(len(stages)))
        ax.set_xticklabels([f"stage {s}" for s in stages])
        ax.set_ylabel("ms per step (rank 0)")
        ax.set_title(f"step time by phase, {w} ranks")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=8)
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_bandwidth(rows: List[dict], path: str) -> None:
    coll = [r for r in rows if r.get("bench") == "collective"]
    ops = sorted({r["op"] for r in coll})
    worlds = sorted({r["world"] for r in coll})
    fig, axes = plt.subplots(1, max(1, len(ops)), figsize=(4.2 * max(1, len(ops)), 3.8),
                             squeeze=False)
    for ax, op in zip(axes[0], ops):
        for k, w in enumerate(worlds):
            rs = sorted((r for r in coll if r["op"] == op and r["world"] == w),
                        key=lambda r: r["elems"])
            x = [4 * r["elems"] for r in rs]
            ax.plot(x, [r["ours_GBps"] for r in rs], "o-", color=COLORS[k],
                    label=f"zero, {w} ranks")
            ax.plot(x, [r["mpi_GBps"] for r in rs], "s--", color=COLORS[k], alpha=0.6,
                    label=f"raw MPI, {w} ranks")
        ax.set_xscale("log")
        ax.set_xlabel("message bytes (all ranks)")
        ax.set_ylabel("GB/s per rank")
        ax.set_title(op)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: List[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    d = argv[1]
    lines = rank0_fastest(read_jsonl(os.path.join(d, "step_parts.jsonl")))
    worlds = sorted({w for w, _ in lines})
    written = []
    if worlds:
        plot_memory(lines, worlds, os.path.join(d, "memory_per_rank.png"))
        plot_breakdown(lines, worlds, os.path.join(d, "step_breakdown.png"))
        written += ["memory_per_rank.png", "step_breakdown.png"]
    coll = read_jsonl(os.path.join(d, "collectives.jsonl"))
    if coll:
        plot_bandwidth(coll, os.path.join(d, "collective_bandwidth.png"))
        written.append("collective_bandwidth.png")
    print(json.dumps({"plot": d, "wrote": written}))
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
