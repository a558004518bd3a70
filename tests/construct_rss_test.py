"""Sharded construction (docs/ARCHITECTURE.md, "The engine's life"): building
a stage-3 model from init specs on N thread ranks costs, at its peak, at
most 1.15x what the engines account for (model states + buffers) plus the
largest param in fp32 — and the peak does not grow with N at a fixed model
size. The old way (every rank registers full fp32 values) is measured too,
and must grow with N, so the measurement can tell them apart."""
import json
import os
import subprocess
import sys
import unittest

HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "construct_rss_helper")


def run(world, mode):
    out = subprocess.run([HELPER, str(world), mode], capture_output=True, text=True,
                         timeout=600, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    assert r["ok"] == 1, r
    return r


class ConstructRssTest(unittest.TestCase):
    def test_peak_within_accounting_and_flat_in_ranks(self):
        spec = {w: run(w, "spec") for w in (1, 2, 4)}
        for w, r in spec.items():
            bound = 1.15 * (r["accounted_bytes"] + r["largest_param_fp32_bytes"])
            print(json.dumps(r), "bound", int(bound))
            self.assertLessEqual(r["peak_growth_bytes"], bound, r)
        # 16 bytes per element of model states in all, whatever N; only the
        # per-rank buffers grow with N.
        growth = spec[4]["peak_growth_bytes"] - spec[1]["peak_growth_bytes"]
        buffers = spec[4]["accounted_bytes"] - spec[1]["accounted_bytes"]
        self.assertLessEqual(growth, 1.15 * max(buffers, 0) + 3 * spec[1]["largest_param_fp32_bytes"],
                             (spec[1], spec[4]))

    def test_old_way_grows_with_ranks(self):
        one, four = run(1, "values"), run(4, "values")
        print(json.dumps(one), json.dumps(four))
        # Each extra rank holds its own full fp32 copy until finalize (64 MiB here).
        self.assertGreater(four["peak_growth_bytes"] - one["peak_growth_bytes"],
                           2 * 8 * one["largest_param_fp32_bytes"])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
