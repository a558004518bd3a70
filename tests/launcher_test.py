"""DeepSpeed hostfile and filter semantics of tools/zero_launch.py, and a real
2-rank launch on localhost through mpirun."""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import zero_launch as zl  # noqa: E402


class HostfileTest(unittest.TestCase):
    def test_parses_slots_and_comments(self):
        h = zl.parse_hostfile("# cluster\nworker1 slots=8\n\nworker2 slots=4  # half\n")
        self.assertEqual(list(h.items()), [("worker1", 8), ("worker2", 4)])

    def test_repeated_host_is_an_error(self):
        with self.assertRaisesRegex(zl.HostfileError, "line 2: host 'w1' is repeated"):
            zl.parse_hostfile("w1 slots=2\nw1 slots=2\n")

    def test_malformed_line_names_it(self):
        with self.assertRaisesRegex(zl.HostfileError, "line 1: expected 'HOST slots=N'"):
            zl.parse_hostfile("w1 gpus=2\n")

    def test_include_slots_and_whole_hosts(self):
        h = zl.parse_hostfile("w1 slots=4\nw2 slots=4\nw3 slots=4\n")
        self.assertEqual(dict(zl.select(h, include="w1:0,1@w3")), {"w1": 2, "w3": 4})

    def test_exclude(self):
        h = zl.parse_hostfile("w1 slots=4\nw2 slots=4\n")
        self.assertEqual(dict(zl.select(h, exclude="w1:3@w2")), {"w1": 3})

    def test_num_nodes_and_gpus(self):
        h = zl.parse_hostfile("w1 slots=8\nw2 slots=8\nw3 slots=8\n")
        self.assertEqual(dict(zl.select(h, num_nodes=2, num_gpus=2)), {"w1": 2, "w2": 2})

    def test_bad_filters(self):
        h = zl.parse_hostfile("w1 slots=2\n")
        with self.assertRaisesRegex(zl.HostfileError, "unknown host 'w9'"):
            zl.select(h, include="w9")
        with self.assertRaisesRegex(zl.HostfileError, "has 2 slots"):
            zl.select(h, include="w1:5")
        with self.assertRaisesRegex(zl.HostfileError, "mutually exclusive"):
            zl.select(h, include="w1", exclude="w1")

    def test_mpirun_command(self):
        cmd = zl.mpirun_command({"a": 2, "b": 3}, "/tmp/h", ["prog", "--x"], "a", 29500)
        self.assertEqual(cmd[:3], ["mpirun", "-n", "5"])
        self.assertIn("MASTER_PORT=29500", cmd)
        self.assertEqual(cmd[-2:], ["prog", "--x"])

    def test_launches_two_ranks_on_localhost(self):
        with tempfile.NamedTemporaryFile("w", suffix=".hostfile", delete=False) as f:
            f.write("localhost slots=2\n")
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_btl="self,vader")
        out = subprocess.run(
            [sys.executable, zl.__file__, "--hostfile", f.name, "sh", "-c",
             "echo rank=$OMPI_COMM_WORLD_RANK size=$OMPI_COMM_WORLD_SIZE"],
            capture_output=True, text=True, env=env, timeout=120)
        os.unlink(f.name)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(sorted(out.stdout.split("\n")[:2]), ["rank=0 size=2", "rank=1 size=2"])


if __name__ == "__main__":
    unittest.main()
