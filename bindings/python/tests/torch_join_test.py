"""zero.torch's Join (uneven inputs, as DDP's Join with
divide_by_initial_world_size=True): ranks with fewer micro-batches shadow
their peers' micro-steps with zero gradients. Against the reference in which
the short ranks run a real forward and hand in zero gradients (loss times 0)
for their missing micro-steps: bit for bit (the same reductions and updates
on the same numbers), stages 0-3, 2 and 3 thread ranks, gradient
accumulation ending a short rank mid-window, and mpirun -np 2/3."""
import os
import shutil
import subprocess
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_join_worker as worker  # noqa: E402
import torch_model  # noqa: E402
import zero  # noqa: E402
import zero.torch as zt  # noqa: E402
from thread_ranks import on_ranks  # noqa: E402

CASES = [  # (world, micro-batches per rank, gradient accumulation steps)
    (2, [4, 3], 1),
    (3, [4, 3, 2], 1),
    (2, [6, 3], 2),  # rank 1's data ends inside an accumulation window
    (3, [2, 4, 4], 2),
]


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("world,counts,gas", CASES)
def test_join_equals_zero_gradients_for_the_missing_micro_steps(stage, world, counts, gas):
    def run(mode):
        models = [torch_model.make_model() for _ in range(world)]
        return on_ranks(world, lambda r, c: worker.train(stage, r, world, counts, gas, mode,
                                                         comm=c, model=models[r]), timeout=60)

    got, want, full = run("join"), run("zeros"), run("full")
    for r in range(world):
        params, shadow, seconds = got[r]
        assert shadow == max(counts) - counts[r]
        assert seconds < 30, f"rank {r}: {seconds:.1f} s"
        assert worker.bits_equal(params, want[r][0]), f"rank {r}"
        assert worker.bits_equal(params, got[0][0]), f"rank {r} differs from rank 0"
    # The shadows' zeros count in the average: not the run where every rank
    # had all the data.
    assert not worker.bits_equal(got[0][0], full[0][0])


def test_join_is_a_no_op_on_one_rank_and_when_disabled():
    data = worker.micro_batches(0, 1, 1, 3)
    with zt.initialize(torch_model.make_model(), torch_model.ds_config(2)) as engine:
        with zt.Join(engine) as join:
            for x, y in data:
                engine.backward(torch_model.loss_fn(engine(x), y))
                engine.step()
        assert join.shadow_steps == 0 and engine._join is None
        assert "grad_ready" not in engine.zero.__dict__  # nothing left recording


def test_leaving_inside_a_micro_step_is_an_error_on_every_rank():
    models = [torch_model.make_model() for _ in range(2)]

    def fn(r, c):
        engine = zt.initialize(models[r], torch_model.ds_config(1, world=2), comm=c)
        x, y = worker.micro_batches(r, 2, 1, 1)[0]
        try:
            with engine.join():
                engine.backward(torch_model.loss_fn(engine(x), y))
                if r == 0:
                    engine.step()
                    engine(x)  # rank 1 leaves before its step
            return None
        except zero.ZeroError as e:
            return str(e)
        finally:
            engine.close(keep_values=False)

    msgs = on_ranks(2, fn, timeout=60)
    assert "rank 1 left the Join inside a micro-step" in msgs[1]
    assert msgs[0] is not None and "rank 1 left the Join" in msgs[0], msgs


def test_a_rank_with_no_micro_step_inside_the_join_is_named():
    models = [torch_model.make_model() for _ in range(2)]

    def fn(r, c):
        engine = zt.initialize(models[r], torch_model.ds_config(0, world=2), comm=c)
        x, y = worker.micro_batches(r, 2, 1, 1)[0]
        try:
            with engine.join():
                if r == 0:
                    engine.backward(torch_model.loss_fn(engine(x), y))
                    engine.step()
            return None
        except zero.ZeroError as e:
            return str(e)
        finally:
            engine.close(keep_values=False)

    msgs = on_ranks(2, fn, timeout=60)
    assert all(m is not None and "rank 1 ran out of data before its first micro-step" in m
               for m in msgs), msgs


@pytest.mark.parametrize("np_,counts", [(2, "3,4"), (3, "4,2,3")])
def test_join_under_mpirun(np_, counts):
    mpirun = shutil.which("mpirun")
    assert mpirun, "openmpi-bin is required"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.setdefault("OMPI_MCA_plm_rsh_agent", "")  # no ssh: one node
    cmd = [mpirun, "-np", str(np_), "--oversubscribe", "--allow-run-as-root",
           "--mca", "btl", "self,vader", "-x", "PYTHONPATH",
           sys.executable, worker.__file__, "--counts", counts]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("equal bit for bit") == 4 * np_, proc.stdout
