"""zero.torch's stage-3 hooks with one runtime call per gather unit (C ABI
1.15, zero_engine_gather_into_many / zero_engine_release_many): bit for bit
the training of one call per param (1 rank and 3 thread ranks: uneven
shards; per module and per block), one gather and one release call per unit
and pass in the steady state, and a refused block gathers nothing (the
runtime's batch is all or nothing, so is the hook's state). The raw binding
over numpy arrays too: a bad id in the middle names the entry."""
import os
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402
import zero  # noqa: E402
import zero.torch as zt  # noqa: E402
from thread_ranks import on_ranks  # noqa: E402


class _Counting:
    """The binding's engine with its calls counted by name."""

    def __init__(self, c):
        self._inner, self.calls = c, {}

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def counted(*a, **k):
            self.calls[name] = self.calls.get(name, 0) + 1
            return attr(*a, **k)

        return counted


def _train(batched, rank=0, world=1, comm=None, policy=None, counting=False, model=None,
           data=None):
    # Thread ranks build their model and data before starting: make_model
    # seeds torch's one global generator, which concurrent ranks would share.
    model = torch_model.make_model() if model is None else model
    data = torch_model.make_data(torch_model.STEPS) if data is None else data
    cfg = torch_model.ds_config(3, 1, world)
    cfg["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    with zt.initialize(model, cfg, comm=comm, wrap_policy=policy) as engine:
        engine._batched_calls = batched
        counter = None
        for t, (x, y) in enumerate(data):
            if counting and t == 2:  # past the warm-up steps
                counter = engine.zero._c = _Counting(engine.zero._c)
            xs, ys = x.chunk(world)[rank], y.chunk(world)[rank]
            engine.backward(torch_model.loss_fn(engine(xs), ys))
            engine.step()
        if counter is not None:
            engine.zero._c = counter._inner
        assert all(c == 0 for c in engine._gather_count)
        units = sum(1 for idx in engine._module_params.values() if idx)
        return engine.full_state_dict(), counter, units


@pytest.mark.parametrize("policy", [None, torch.nn.Linear])
def test_block_calls_train_bitwise_like_per_param_calls(policy):
    want, _, _ = _train(False, policy=policy)
    got, _, _ = _train(True, policy=policy)
    for name in want:
        assert torch.equal(got[name], want[name]), name
    torch_model.assert_params_close(got, torch_model.train_reference())


def test_block_calls_on_three_thread_ranks():
    models = [[torch_model.make_model() for _ in range(3)] for _ in range(2)]
    data = torch_model.make_data(torch_model.STEPS)

    def rank_main(r, comm):
        want, _, _ = _train(False, r, 3, comm, model=models[0][r], data=data)
        got, _, _ = _train(True, r, 3, comm, model=models[1][r], data=data)
        return all(torch.equal(got[n], want[n]) for n in want)

    assert on_ranks(3, rank_main) == [True] * 3


def test_one_gather_and_one_release_call_per_unit_and_pass():
    steps = torch_model.STEPS - 2
    _, batched, units = _train(True, counting=True)
    # Forward and backward each gather and release every unit once.
    assert batched.calls.get("gather_into_many") == 2 * units * steps
    assert batched.calls.get("release_many") == 2 * units * steps
    assert "gather_into" not in batched.calls and "release" not in batched.calls
    _, single, _ = _train(False, counting=True)
    params = sum(1 for _ in torch_model.make_model().parameters())
    assert single.calls.get("gather_into") == 2 * params * steps
    assert "gather_into_many" not in single.calls


def test_refused_block_leaves_nothing_gathered():
    """A live budget below one unit's params: the runtime refuses the
    block naming the entry and param (past the units that fit), and the hook holds nothing (counts zero, the
    params still their placeholders, the pool's buffers back)."""
    model = torch_model.make_model()
    cfg = torch_model.ds_config(3)
    # Every param fits alone; the hidden Linear's weight and bias do not.
    budget = max(p.numel() for p in model.parameters())
    assert budget == model[3].weight.numel()
    cfg["zero_optimization"].update(stage3_param_persistence_threshold=0,
                                    stage3_max_live_parameters=budget)
    x, _ = torch_model.make_data(1)[0]
    with zt.initialize(model, cfg) as engine:
        with pytest.raises(zero.OutOfMemoryError, match=r"gather_into_many, entry 1: gather '3\.bias'"):
            engine(x)
        assert all(c == 0 for c in engine._gather_count)
        assert all(p.stride() == (0,) * p.dim() for p in model.parameters())
        assert engine._gather_pool.free_bytes() > 0


def test_binding_refuses_a_bad_id_in_the_middle():
    with zero.Engine({"zero_optimization": {"stage": 3,
                                            "stage3_param_persistence_threshold": 0},
                      "steps_per_print": 0}) as e:
        a = e.register_param("a", np.arange(6, dtype=np.float32))
        b = e.register_param("b", np.arange(10, dtype=np.float32))
        e.finalize()
        outs = [np.zeros(6, np.float32), np.zeros(10, np.float32)]
        ids = np.array([b, 7, a], np.int32)
        dsts = np.array([outs[1].ctypes.data, outs[0].ctypes.data, outs[0].ctypes.data],
                        np.uintp)
        nbytes = np.array([40, 24, 24], np.uintp)
        with pytest.raises(zero.InvalidArgumentError, match="entry 1: .*no param with id 7"):
            e._c.gather_into_many(ids.ctypes.data, 3, int(e.dtype), dsts.ctypes.data,
                                  nbytes.ctypes.data)
        assert e.stats()["live_gathered_bytes"] == 0
        ids[1] = a
        ids = ids[:2].copy()
        dsts = np.array([outs[1].ctypes.data, outs[0].ctypes.data], np.uintp)
        e._c.gather_into_many(ids.ctypes.data, 2, int(e.dtype), dsts.ctypes.data,
                              nbytes.ctypes.data)
        np.testing.assert_array_equal(outs[1], np.arange(10))
        np.testing.assert_array_equal(outs[0], np.arange(6))
        e._c.release_many(ids.ctypes.data, 2)
        with pytest.raises(zero.FailedPreconditionError, match="entry 0: release 'b'"):
            e._c.release_many(ids.ctypes.data, 2)
