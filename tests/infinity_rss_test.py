"""ZeRO-Infinity (docs/ARCHITECTURE.md, "Offload"): a stage-3 model with
params and optimizer on NVMe keeps host memory independent of its size. The
same model shape at three sizes (4, 8, 16 layers of 1024 x 1024: 4.2M to
16.8M params), one process each, fixed buffer sizes: the resident set after
finalize and after two steps, and the peak over a checkpoint save and load
that follow (streamed from and to the files), may grow by at most 0.25 bytes
per parameter between the smallest and the largest (the in-memory layout
needs 16, the engine before gradient streaming ~2 for bf16 gradient
partitions: the bound tells them apart while leaving ~3 MiB for allocator
noise over 12.6M params). glibc's mmap threshold is fixed at its initial
128 KiB (MALLOC_MMAP_THRESHOLD_) so that the resident set counts live
memory, not freed buffers glibc keeps once its dynamic threshold has risen
(which varies by several MiB from run to run, in no order with the size).
Disk: 12 bytes of fp32 master and moments + 2 of bf16 working copy + 2 of
bf16 gradient partition per parameter, and at most 18 with the 4 KiB
padding of each file region; atomic_step (two slots) doubles the state and
param files. The hard-coded numbers are the formula's, not measurements."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "infinity_rss_main")
SLOPE_BOUND = 0.25  # bytes per parameter


def run(layers, dtype="bf16", atomic=False, save=False):
    d = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    ck = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    try:
        extra = ["--save", ck] if save else []
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
        out = subprocess.run([HELPER, "--layers", str(layers), "--hidden", "1024", "--nvme", d,
                              "--dtype", dtype, "--steps", "2", "--atomic", "1" if atomic else "0"]
                             + extra,
                             capture_output=True, text=True, timeout=600, env=env)
        if out.returncode != 0:
            raise AssertionError(out.stderr)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(json.dumps(r))
        left = os.listdir(d)
        assert not left, left
        return r
    finally:
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(ck, ignore_errors=True)


class InfinityRssTest(unittest.TestCase):
    def test_host_memory_does_not_grow_with_the_model(self):
        runs = [run(l, save=True) for l in (4, 8, 16)]
        small, large = runs[0], runs[-1]
        dparams = large["params"] - small["params"]
        # The peak includes a checkpoint save and load of the NVMe state.
        for key in ("rss_after_finalize_kib", "rss_after_step_kib", "peak_rss_kib"):
            slope = (large[key] - small[key]) * 1024.0 / dparams
            print(json.dumps({"bench": "infinity_rss_slope", "what": key,
                              "bytes_per_param": round(slope, 4), "bound": SLOPE_BOUND}))
            self.assertLess(slope, SLOPE_BOUND, (key, runs))

    def test_disk_bytes_per_param(self):
        for dtype, es in (("bf16", 2), ("fp32", 4)):
            r = run(4, dtype)
            per = r["disk_bytes_per_param"]
            self.assertGreaterEqual(per, 12 + 2 * es, r)
            self.assertLessEqual(per, 12 + 2 * es + 0.05, r)  # 4 KiB padding per 1M-element region
            if dtype == "bf16":
                self.assertLessEqual(per, 18, r)
        a = run(4, "bf16", atomic=True)
        # Two slots of master, moments and working copy; one of gradients.
        self.assertGreaterEqual(a["disk_bytes_per_param"], 2 * (12 + 2) + 2, a)
        self.assertLessEqual(a["disk_bytes_per_param"], 2 * (12 + 2) + 2 + 0.1, a)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
