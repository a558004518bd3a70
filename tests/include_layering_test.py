"""The layering of docs/ARCHITECTURE.md holds: kernels <- core <- capi <-
bindings, nothing includes upward, and the folders of core/ include each
other without a cycle (core/comm and core/device know nothing of each other;
core/backend pairs them)."""
import os
import re
import sys
import unittest

# The source tree itself (the runfile is a link into it), so every folder is
# seen without listing each as test data.
ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
LAYER = {"kernels": 0, "core": 1, "capi": 2, "bindings": 3}


def sources(top):
    for d, _, files in os.walk(os.path.join(ROOT, top)):
        for f in files:
            if f.endswith((".h", ".cc", ".c", ".cu", ".cuh")):
                p = os.path.join(d, f)
                with open(p, encoding="utf-8") as fh:
                    yield os.path.relpath(p, ROOT), fh.read()


def edges():
    out = []
    for top in LAYER:
        for path, text in sources(top):
            for inc in INCLUDE.findall(text):
                out.append((path, inc))
    return out


class LayeringTest(unittest.TestCase):
    def test_sources_found(self):
        self.assertGreater(sum(1 for _ in sources("core")), 40)

    def test_nothing_includes_upward(self):
        bad = []
        for path, inc in edges():
            a, b = path.split("/")[0], inc.split("/")[0]
            if b in LAYER and LAYER[b] > LAYER[a]:
                bad.append(f"{path} includes {inc}")
        self.assertEqual(bad, [])

    def test_no_cycle_between_core_folders(self):
        graph = {}
        for path, inc in edges():
            p, i = path.split("/"), inc.split("/")
            if p[0] == "core" and i[0] == "core" and len(p) > 2 and len(i) > 2 and p[1] != i[1]:
                graph.setdefault(p[1], set()).add(i[1])
        # Depth-first search for a back edge.
        state, cycle = {}, []

        def visit(n, stack):
            state[n] = 1
            for m in sorted(graph.get(n, ())):
                if state.get(m) == 1:
                    cycle.append(" -> ".join(stack + [n, m]))
                elif not state.get(m):
                    visit(m, stack + [n])
            state[n] = 2

        for n in sorted(graph):
            if not state.get(n):
                visit(n, [])
        self.assertEqual(cycle, [], f"include cycles between core/ folders: {cycle}")
        self.assertNotIn("device", graph.get("comm", set()))
        self.assertNotIn("comm", graph.get("device", set()))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
