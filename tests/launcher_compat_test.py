"""tools/zero_launch.py takes what the `deepspeed` and `accelerate launch`
commands take and gives each rank what they give: deepspeed's
`--local_rank=N` after the program name (--local_rank_arg), --module,
--no_python; accelerate's --num_processes/--num_machines/--main_process_*
and its DeepSpeed flags as the ACCELERATE_* variables its ranks read (the
names of accelerate.utils.launch.prepare_deepspeed_cmd_env). Real 2-rank
launches on localhost through mpirun."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import zero_launch as zl  # noqa: E402

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl="self,vader")

PROGRAM = """
import json, os, sys
# One write per rank (print writes the newline apart: two ranks' lines could interleave).
sys.stdout.write(json.dumps(dict({k: v for k, v in os.environ.items()
                                  if k.startswith("ACCELERATE_") or k in (
                                      "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")},
                                 argv=sys.argv[1:], exe=sys.executable)) + "\\n")
"""


class LauncherCompatTest(unittest.TestCase):
    def run_launcher(self, *args, module=False):
        with tempfile.TemporaryDirectory() as d:
            name = "show_env_mod" if module else os.path.join(d, "show_env.py")
            with open(os.path.join(d, "show_env_mod.py") if module else name, "w") as f:
                f.write(PROGRAM)
            out = subprocess.run(
                [sys.executable, zl.__file__, "--hostfile", os.path.join(d, "none"),
                 *args, name, "--flag", "x"],
                capture_output=True, text=True, env=dict(ENV, PYTHONPATH=d), timeout=120, cwd=d)
        self.assertEqual(out.returncode, 0, out.stderr)
        ranks = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        return sorted(ranks, key=lambda r: r["RANK"])

    def test_local_rank_argument_as_deepspeed_passes_it(self):
        ranks = self.run_launcher("--num_gpus", "2", "--local_rank_arg", "--master_port", "29621")
        self.assertEqual([r["argv"] for r in ranks],
                         [["--local_rank=0", "--flag", "x"], ["--local_rank=1", "--flag", "x"]])
        for r in ranks:
            self.assertEqual(r["argv"][0], f"--local_rank={r['LOCAL_RANK']}")
        # deepspeed's --no_local_rank is zero-launch's default: the program's own arguments only.
        ranks = self.run_launcher("--num_gpus", "2", "--no_local_rank", "--master_port", "29622")
        self.assertEqual([r["argv"] for r in ranks], [["--flag", "x"]] * 2)

    def test_module_runs_python_dash_m_with_local_rank_after_the_module(self):
        ranks = self.run_launcher("--num_gpus", "2", "--module", "--local_rank_arg",
                                  "--master_port", "29623", module=True)
        self.assertEqual([r["argv"][0] for r in ranks], ["--local_rank=0", "--local_rank=1"])
        self.assertEqual({r["exe"] for r in ranks}, {sys.executable})

    def test_accelerate_launch_flags(self):
        ranks = self.run_launcher(
            "--num_processes", "2", "--num_machines", "1", "--main_process_ip", "127.0.0.1",
            "--main_process_port", "29624", "--use_deepspeed", "--deepspeed_config_file", "ds.json",
            "--zero_stage", "3", "--gradient_accumulation_steps", "2", "--gradient_clipping", "1.0",
            "--offload_optimizer_device", "none", "--zero3_init_flag", "true",
            "--zero3_save_16bit_model", "True", "--mixed_precision", "no")
        self.assertEqual([r["RANK"] for r in ranks], ["0", "1"])
        for r in ranks:
            self.assertEqual((r["WORLD_SIZE"], r["MASTER_ADDR"], r["MASTER_PORT"]),
                             ("2", "127.0.0.1", "29624"))
            self.assertEqual(r["argv"], ["--flag", "x"])  # accelerate passes no --local_rank
            got = {k: v for k, v in r.items() if k.startswith("ACCELERATE_")}
            self.assertEqual(got, {
                "ACCELERATE_USE_DEEPSPEED": "true",
                "ACCELERATE_DEEPSPEED_CONFIG_FILE": "ds.json",
                "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
                "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "2",
                "ACCELERATE_GRADIENT_CLIPPING": "1.0",
                "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "none",
                "ACCELERATE_DEEPSPEED_ZERO3_INIT": "true",
                "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "true",
                "ACCELERATE_MIXED_PRECISION": "no"})

    def test_refusals_name_the_flag(self):
        for args, msg in [
                (["--machine_rank", "1"], "--machine_rank 1: zero-launch starts the ranks of every host"),
                (["--zero_stage", "2"], "--zero_stage is a DeepSpeed flag of accelerate launch: give --use_deepspeed"),
                (["--num_processes", "3", "--num_machines", "2"], "not a multiple of --num_machines 2"),
                (["--local_rank_arg", "--no_local_rank"], "contradict each other"),
                (["--autotuning", "run"], "unrecognized arguments: --autotuning")]:
            out = subprocess.run([sys.executable, zl.__file__, "--dry-run", *args, "prog.py"],
                                 capture_output=True, text=True, env=ENV, timeout=60)
            self.assertEqual(out.returncode, 2, args)
            self.assertIn(msg, out.stderr, args)

    def test_program_command_forms(self):
        self.assertEqual(zl.program_command(["t.py", "a"], module=True),
                         [sys.executable, "-u", "-m", "t.py", "a"])
        self.assertEqual(zl.program_command(["t.py", "a"], no_python=True), ["t.py", "a"])
        cmd = zl.program_command(["t.py", "a"])
        self.assertEqual(zl.local_rank_at(cmd, ["t.py", "a"]), 3)  # after t.py


if __name__ == "__main__":
    unittest.main()
