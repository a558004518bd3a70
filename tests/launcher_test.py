"""DeepSpeed hostfile and filter semantics of tools/zero_launch.py, and real
2-rank launches on localhost through mpirun: from a hostfile, and without
one (--num_procs) running a .py program that checks the torch-style
variables each rank gets."""
import json
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

    def test_hostile_hostfiles_are_errors_naming_the_line(self):
        cases = [
            ("w1 slots=99999999999999999999\n", "line 1: slots must be 1..65536"),
            ("w1 slots=0\n", "line 1: slots must be 1..65536, got 0"),
            ("w1 slots=\u0663\n", "line 1: expected 'HOST slots=N'"),  # Arabic-Indic 3
            ("-np slots=1\n", "line 1: host '-np' is not a host name"),
            ("a:b slots=1\n", "line 1: host 'a:b' is not a host name"),
            ("w1 slots=1\n# x\nw\x00 slots=1\n", "line 3: host 'w.x00' is not a host name"),
            # \x1c is no line break: one malformed line 1, not two hosts.
            ("w1 slots=1\x1cw2 slots=1\n", "line 1: expected 'HOST slots=N'"),
        ]
        for text, msg in cases:
            with self.assertRaisesRegex(zl.HostfileError, msg, msg=repr(text)):
                zl.parse_hostfile(text)

    def test_hostile_filters_are_errors(self):
        h = zl.parse_hostfile("w1 slots=4\nw2 slots=2\n")
        for spec, msg in [("w1:-1", "must be integers >= 0"),  # was slot -1
                          ("w1: 1", "must be integers >= 0"),
                          ("w1:1_0", "must be integers >= 0"),
                          ("w1:", "must be integers >= 0"),
                          ("w1:0@w1:1", "host 'w1' is repeated"),
                          ("w1:4", "has 4 slots, asked for slot 4")]:
            with self.assertRaisesRegex(zl.HostfileError, msg, msg=spec):
                zl.select(h, include=spec)
        with self.assertRaisesRegex(zl.HostfileError, "'w2' has 2 slots, asked for slot 5"):
            zl.select(h, exclude="w2:5")

    def test_hostfile_not_utf8_and_bad_port_exit_2(self):
        with tempfile.NamedTemporaryFile("wb", suffix=".hostfile", delete=False) as f:
            f.write(b"w1 slots=1\n\xff\xfe\n")
        try:
            r = subprocess.run([sys.executable, zl.__file__, "--hostfile", f.name, "--dry-run", "true"],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("not UTF-8 text", r.stderr)
            self.assertNotIn("Traceback", r.stderr)
        finally:
            os.unlink(f.name)
        r = subprocess.run([sys.executable, zl.__file__, "--hostfile", "/nonexistent", "--master_port", "70000", "--dry-run", "true"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--master_port must be 1..65535", r.stderr)

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

    def test_launch_agent_and_launcher_args(self):
        cmd = zl.mpirun_command({"a": 2}, "/tmp/h", ["prog"], launch_agent="agent.sh",
                                launcher_args="--mca btl self,tcp  --bind-to none")
        i = cmd.index("plm_rsh_agent")
        self.assertEqual(cmd[i - 1], "--mca")
        self.assertEqual(cmd[i + 1], os.path.abspath("agent.sh"))
        j = cmd.index("btl")
        self.assertEqual(cmd[j - 1:j + 4], ["--mca", "btl", "self,tcp", "--bind-to", "none"])
        self.assertLess(j, cmd.index("prog"))
        self.assertNotIn("plm_rsh_agent", zl.mpirun_command({"a": 2}, "/tmp/h", ["prog"]))

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


ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl="self,vader")

PROGRAM = """
import json, os, sys
keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES"]
# One write per rank: under -u print writes the newline apart, and two
# ranks' lines could interleave on a loaded machine.
sys.stdout.write(json.dumps(dict({k: os.environ.get(k) for k in keys}, argv=sys.argv[1:],
                                 exe=sys.executable, unbuffered="-u" in sys.orig_argv)) + "\\n")
"""


class RestartAndSlurmTest(unittest.TestCase):
    """The pieces of --max_restarts/--elastic and --launcher slurm (the real
    runs: //tests:restart_launch_test, //tests:slurm_test)."""

    def test_first_failed_rank_is_the_earliest_abnormal_end(self):
        with tempfile.TemporaryDirectory() as d:
            for rank, rc, t in ((0, -15, 10.5), (1, -9, 10.1), (2, 0, 9.0), (3, 1, 10.3)):
                with open(os.path.join(d, f"rank.{rank}"), "w") as f:
                    f.write(f"{rank} {rc} {t}\n")
            self.assertEqual(zl.first_failed_rank(d), 1)
            os.unlink(os.path.join(d, "rank.1"))
            self.assertEqual(zl.first_failed_rank(d), 3)
            self.assertEqual(zl.unrecorded_rank(d, 4), 1)

    def test_drop_rank_removes_its_slot(self):
        sel = zl.select_slots(zl.parse_hostfile("w1 slots=2\nw2 slots=2\n"))
        self.assertEqual(dict(zl.drop_rank(sel, 2)), {"w1": [0, 1], "w2": [1]})
        self.assertEqual(dict(zl.drop_rank(zl.drop_rank(sel, 0), 0)), {"w2": [0, 1]})

    def test_srun_command_and_slurm_rank_variables(self):
        cmd = zl.srun_command(["train.py", "--x"], "--oversubscribe")
        self.assertEqual(cmd[:3], ["srun", "--mpi=pmix", "--oversubscribe"])
        self.assertEqual(cmd[-2:], ["train.py", "--x"])
        self.assertIn(zl.RANK_SHIM_FLAG, cmd)
        env = zl.rank_env({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1",
                           "SLURM_NTASKS_PER_NODE": "2(x2)"})
        self.assertEqual(env, {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
                               "LOCAL_SIZE": "2"})

    def test_slurm_launcher_outside_an_allocation_is_refused(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        out = subprocess.run([sys.executable, zl.__file__, "--launcher", "slurm", "true"],
                             capture_output=True, text=True, env=env)
        self.assertEqual(out.returncode, 2)
        self.assertIn("inside a Slurm allocation", out.stderr)


class LaunchTest(unittest.TestCase):
    def run_launcher(self, *args, env=ENV):
        with tempfile.TemporaryDirectory() as d:
            prog = os.path.join(d, "show_env.py")
            with open(prog, "w") as f:
                f.write(PROGRAM)
            out = subprocess.run(
                [sys.executable, zl.__file__, "--hostfile", os.path.join(d, "none"),
                 *args, prog, "--flag", "x"],
                capture_output=True, text=True, env=env, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]

    def test_without_hostfile_runs_num_procs_python_ranks_with_torch_env(self):
        ranks = sorted(self.run_launcher("--num_procs", "2", "--master_port", "29611"),
                       key=lambda r: r["RANK"])
        self.assertEqual([r["RANK"] for r in ranks], ["0", "1"])
        for r in ranks:
            self.assertEqual(r["WORLD_SIZE"], "2")
            self.assertEqual(r["LOCAL_RANK"], r["RANK"])
            self.assertEqual(r["LOCAL_SIZE"], "2")
            self.assertEqual(r["MASTER_ADDR"], "127.0.0.1")
            self.assertEqual(r["MASTER_PORT"], "29611")
            self.assertEqual(r["argv"], ["--flag", "x"])
            self.assertEqual(r["exe"], sys.executable)  # a .py runs under this python
            self.assertTrue(r["unbuffered"])             # with -u
            self.assertIsNone(r["CUDA_VISIBLE_DEVICES"])  # no nvidia-smi here

    def test_include_on_this_host_and_master_addr(self):
        ranks = self.run_launcher("--num_gpus", "4", "--include", "localhost:1,3",
                                  "--master_addr", "10.1.2.3")
        self.assertEqual(sorted(r["RANK"] for r in ranks), ["0", "1"])
        self.assertEqual({r["MASTER_ADDR"] for r in ranks}, {"10.1.2.3"})
        self.assertEqual({r["MASTER_PORT"] for r in ranks}, {"29500"})

    def test_one_gpu_per_local_rank_when_nvidia_smi_exists(self):
        with tempfile.TemporaryDirectory() as bindir:
            smi = os.path.join(bindir, "nvidia-smi")
            with open(smi, "w") as f:
                f.write("#!/bin/sh\nfor i in 0 1 2 3; do echo \"GPU $i: Fake (UUID: GPU-$i)\"; done\n")
            os.chmod(smi, 0o755)
            env = dict(ENV, PATH=bindir + os.pathsep + ENV["PATH"])
            ranks = self.run_launcher("--exclude", "localhost:0,2", env=env)
        got = sorted((r["RANK"], r["CUDA_VISIBLE_DEVICES"]) for r in ranks)
        self.assertEqual(got, [("0", "1"), ("1", "3")])

    def test_rank_env_maps_ranks_to_host_slots(self):
        env = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
               "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
               zl.SLOTS_ENV: "0,2;5,7"}
        self.assertEqual(zl.rank_env(env), {
            "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_SIZE": "2",
            "CUDA_VISIBLE_DEVICES": "7"})

    def test_python_program_command(self):
        self.assertEqual(zl.program_command(["t.py", "a"]), [sys.executable, "-u", "t.py", "a"])
        self.assertEqual(zl.program_command(["sh", "a"]), ["sh", "a"])


if __name__ == "__main__":
    unittest.main()
