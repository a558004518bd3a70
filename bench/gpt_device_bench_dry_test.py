"""bench/gpt_device_bench.py's dry run (DEVICE_CHECK_DRY_RUN=1: a tiny GPT
on the CPU) runs every mode tools/device_check.sh runs on a GPU, so the
script cannot rot between leases: plain torch and zero.torch at stages 0-3
and with offload_optimizer report a step, tokens/s and memory, the ratios
against torch come out of those figures, DeepSpeed's modes either run or
say "not available" (never a silent gap), overlapped offload either runs
or says the key was refused, and the whole run ends within its deadline."""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "gpt_device_bench.py")


def run(*args, seconds=240):
    env = dict(os.environ, DEVICE_CHECK_DRY_RUN="1", PYTHONPATH=os.pathsep.join(sys.path))
    t0 = time.time()
    p = subprocess.run([sys.executable, BENCH, "--seconds", str(seconds), "--steps", "2",
                        "--warmup", "1", *args], capture_output=True, text=True, env=env,
                       timeout=seconds + 120)
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    return p.returncode, lines, time.time() - t0, p.stderr


def test_dry_run_every_mode():
    rc, lines, secs, err = run()
    assert lines and lines[0]["kind"] == "gpt_device_bench" and lines[0]["dry_run"], err
    rows = {r["mode"]: r for r in lines if r["kind"] == "gpt_device"}
    zero_modes = ["torch", "zero0", "zero1", "zero2", "zero3", "zero_offload"]
    for m in zero_modes:
        r = rows[m]
        assert r["status"] == "ok", r
        assert r["step_ms"] > 0 and r["tokens_per_s"] > 0, r
        # tokens/s is the batch's tokens over the median step
        assert abs(r["tokens_per_s"] * r["step_ms"] / 1e3 - r["batch"] * r["seq"]) < 0.01 * (
            r["batch"] * r["seq"]), r
        assert r["loss_first"] > 0
    assert rows["zero_offload_overlap"]["status"] in ("ok", "not available"), rows
    for m in ["ds0", "ds1", "ds2", "ds3", "ds_offload"]:
        assert rows[m]["status"] in ("ok", "not available", "skipped"), rows[m]
        assert rows[m]["status"] != "skipped" or "dry run" in rows[m]["why"]
    ratios = {(r["mode"], r["vs"]): r for r in lines if r["kind"] == "gpt_device_ratio"}
    for m in zero_modes[1:]:
        r = ratios[(m, "torch")]
        assert abs(r["step_time"] - rows[m]["step_ms"] / rows["torch"]["step_ms"]) < 2e-3, r
    summary = lines[-1]
    assert summary["kind"] == "gpt_device_summary" and summary["failed"] == [], summary
    assert rc == 0, err[-2000:]


def test_deadline_skips_modes_that_would_not_fit():
    # 3 s: the first process cannot finish them all, and none overruns.
    rc, lines, secs, err = run("--modes", "torch,zero0,zero1,zero2,zero3", seconds=3)
    rows = [r for r in lines if r["kind"] == "gpt_device"]
    assert len(rows) == 5, lines
    assert any(r["status"] == "skipped" and "deadline" in r["why"] for r in rows), rows
    assert lines[-1]["kind"] == "gpt_device_summary"


if __name__ == "__main__":
    import pytest
    sys.exit(pytest.main(["-q", "-rs", "-p", "no:cacheprovider", os.path.abspath(__file__)]))
