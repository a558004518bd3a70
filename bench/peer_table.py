#!/usr/bin/env python3
"""The CPU peer table: zero.torch against DeepSpeed, FSDP2 and torch DDP on
the GPT of torch_gpt_bench.py (examples/python/gpt_train.py, ~7M params,
fp32), at ZeRO stages 1-3 and with ``offload_optimizer: cpu``, at 2 and 4
ranks; step time, process CPU time and peak RSS, and the ratios.

    tools/install_current_torch.sh        # the peers' torch (once, cached)
    /usr/bin/python3 bench/peer_table.py [--ranks 2,4] [--steps 3]
        [--warmup 1] [--repeat 1] [--modes ...] [--markdown]

One ``torch_gpt_bench.py`` run under the venv's Python (current torch and
DeepSpeed; zero.torch imported there too, so every framework runs on the
same torch), each (ranks, mode) in fresh processes (mpirun), rounds
interleaving the modes. Its JSON lines pass through; then one line per
(ranks, row) with zero's figures and ``zero / peer`` for each peer of the
row: ``step_ms`` (wall; moves with the machine's other load),
``step_cpu_ms`` (the process's CPU per step, all threads) and
``peak_rss_mb``, each the maximum over ranks of the fastest round. Rows:

    stage 1   zero1         ds1          DDP + ZeroRedundancyOptimizer*
    stage 2   zero2         ds2          FSDP2 reshard_after_forward=False*
    stage 3   zero3         ds3          FSDP2 (fully_shard per block)
    offload   zero2_offload ds2_offload
    (* in the row when in --modes; every row also against DDP + AdamW)

``--markdown`` adds the table bench/README.md's "Current figures" shows.
At the defaults 20 mpirun runs: 39 minutes at load 25-40 on the 2-core
machine; most of each run is starting up, so near 10 minutes when idle (estimated).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from host_overhead_bench import VENV, venv_env  # noqa: E402

DEFAULT_MODES = ["ddp", "zero1", "ds1", "zero2", "ds2", "zero3", "ds3", "fsdp2",
                 "zero2_offload", "ds2_offload"]
# (row, zero's mode, its peers in column order); a peer not run is left out.
ROWS = [("stage 1", "zero1", ["ds1", "ddp_zero_redundancy", "ddp"]),
        ("stage 2", "zero2", ["ds2", "fsdp2_grad_op", "ddp"]),
        ("stage 3", "zero3", ["ds3", "fsdp2", "ddp"]),
        ("offload", "zero2_offload", ["ds2_offload", "ddp"])]
FIGURES = ("step_ms", "step_cpu_ms", "peak_rss_mb")
PEER_NAMES = {"ds": "DeepSpeed", "fsdp2": "FSDP2", "ddp_zero_redundancy": "DDP+ZeRO-1 opt",
              "ddp": "DDP"}


def ratios(summaries: Dict[int, Dict[str, dict]]) -> List[dict]:
    out = []
    for ranks in sorted(summaries):
        s = summaries[ranks]
        for row, zmode, peers in ROWS:
            z = s.get(zmode)
            if z is None:
                continue
            line = {"row": row, "ranks": ranks, "zero": zmode,
                    **{f"zero_{k}": z[k + "_max"] for k in FIGURES}}
            if "loss_max_abs_diff_vs_ddp" in z:
                line["zero_loss_max_abs_diff_vs_ddp"] = z["loss_max_abs_diff_vs_ddp"]
            for p in peers:
                if p in s:
                    line[p] = {k: round(z[k + "_max"] / s[p][k + "_max"], 3) for k in FIGURES}
            out.append(line)
    return out


def peer_name(mode: str) -> str:
    if mode.startswith("ds"):
        return "DeepSpeed"
    if mode.startswith("fsdp2"):
        return "FSDP2"
    return PEER_NAMES.get(mode, mode)


def markdown(lines: List[dict]) -> str:
    head = ("| ranks | row | zero step ms / CPU ms / peak RSS MB | vs DeepSpeed | "
            "vs FSDP2 or DDP+ZeRO-1 opt | vs DDP |\n|---|---|---|---|---|---|")
    rows = [head]
    for ln in lines:
        cells = []
        for prefix in ("ds", "other", "ddp"):
            peers = [p for _, z, ps in ROWS if z == ln["zero"] for p in ps]
            pick = [p for p in peers if p in ln and (
                p.startswith("ds") if prefix == "ds" else
                p == "ddp" if prefix == "ddp" else
                not p.startswith("ds") and p != "ddp")]
            cells.append("; ".join(
                f"{ln[p]['step_ms']:.2f} / {ln[p]['step_cpu_ms']:.2f} / "
                f"{ln[p]['peak_rss_mb']:.2f}" + ("" if prefix != "other" else
                                                 f" ({peer_name(p)})")
                for p in pick) or "—")
        rows.append(f"| {ln['ranks']} | {ln['row']} (`{ln['zero']}`) | "
                    f"{ln['zero_step_ms']:.0f} / {ln['zero_step_cpu_ms']:.0f} / "
                    f"{ln['zero_peak_rss_mb']:.0f} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--modes", default=",".join(DEFAULT_MODES))
    ap.add_argument("--venv", default=VENV, help="the current torch (tools/install_current_torch.sh)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per (ranks, mode) run")
    ap.add_argument("--markdown", action="store_true", help="also print the README table")
    args = ap.parse_args()

    env, venv_py, have_venv = venv_env(args.venv)
    if not have_venv:
        print(f"peer_table: no torch in {args.venv} (tools/install_current_torch.sh)",
              file=sys.stderr)
        return 2
    print(json.dumps({"bench": "peer_table", "date": time.strftime("%Y-%m-%d"),
                      "python": venv_py, "load_avg_start": os.getloadavg()}), flush=True)
    cmd = [venv_py, os.path.join(HERE, "torch_gpt_bench.py"), "--ranks", args.ranks,
           "--modes", args.modes, "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--repeat", str(args.repeat), "--timeout", str(args.timeout)]
    summaries: Dict[int, Dict[str, dict]] = {}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for raw in proc.stdout:
        print(raw, end="", flush=True)
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if "summary" in line:
            summaries.setdefault(line["ranks"], {})[line["summary"]] = line
    rc = proc.wait()
    lines = ratios(summaries)
    for ln in lines:
        print(json.dumps(ln), flush=True)
    print(json.dumps({"peer_table_done": True, "load_avg_end": os.getloadavg()}), flush=True)
    if args.markdown:
        print(markdown(lines))
    return rc


if __name__ == "__main__":
    sys.exit(main())
