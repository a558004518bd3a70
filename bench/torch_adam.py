#!/usr/bin/python3
"""torch.optim.Adam / AdamW step time on N fp32 params (one flat tensor), the
CPU baseline for bench/cpu_adam_bench. JSON lines on stdout.

Usage: /usr/bin/python3 bench/torch_adam.py [N] [reps]  (needs python3-torch)
"""
import json
import os
import sys
import time

import torch


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000_000
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count()))
    torch.set_num_threads(threads)
    p = torch.nn.Parameter(torch.linspace(-0.5, 0.5, n))
    p.grad = torch.linspace(-1e-3, 1e-3, n)
    for name, cls, kw in [("torch_adam", torch.optim.Adam, {}),
                          ("torch_adamw", torch.optim.AdamW, {"weight_decay": 0.01})]:
        opt = cls([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, **kw)
        opt.step()  # creates the state
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            opt.step()
            best = min(best, time.perf_counter() - t0)
        print(json.dumps({"bench": "cpu_adam", "kernel": name, "params": n,
                          "threads": threads, "torch": torch.__version__,
                          "seconds": round(best, 5), "params_per_s": n / best,
                          "gb_per_s": round(n * 28 / best / 1e9, 3)}), flush=True)
        del opt


if __name__ == "__main__":
    main()
