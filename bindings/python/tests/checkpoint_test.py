"""zero.Engine save/load, zero.export_safetensors, param_info and the
resolved gradient_accumulation_steps, on one rank and on thread ranks."""
import os

import numpy as np
import pytest
from safetensors.numpy import load_file

import zero
from thread_ranks import on_ranks

STEPS, SAVE_AT = 6, 3
SHAPES = {"w": (3, 5), "b": (5,), "frozen": (2,)}


def config(stage=1, **extra):
    cfg = {"zero_optimization": {"stage": stage},
           "optimizer": {"type": "AdamW",
                         "params": {"lr": 0.05, "weight_decay": 0.01}},
           "steps_per_print": 0, "comm_timeout_seconds": 60}
    cfg.update(extra)
    return cfg


def make_engine(stage=1, comm=None, **extra):
    eng = zero.Engine(config(stage, **extra), comm=comm)
    rng = np.random.default_rng(0)
    eng.register_param("w", rng.standard_normal(SHAPES["w"]))
    eng.register_param("b", rng.standard_normal(SHAPES["b"]))
    eng.register_param("frozen", np.array([1.0, 2.0]), trainable=False)
    eng.finalize()
    return eng


def grads(step, rank=0):
    """A different gradient per step (and per rank)."""
    rng = np.random.default_rng(100 + 10 * step + rank)
    return {n: rng.standard_normal(SHAPES[n]).astype(np.float32)
            for n in ("w", "b")}


def train(eng, first, last, rank=0):
    for step in range(first, last):
        for name, g in grads(step, rank).items():
            eng.set_grad(name, g)
        eng.step()


def masters(eng):
    return {n: eng.read_master(n) for n in SHAPES}


def assert_bitwise_equal(got, want):
    assert sorted(got) == sorted(want)
    for n in want:
        np.testing.assert_array_equal(got[n], want[n], err_msg=n)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_resume_from_a_save_matches_the_uninterrupted_run(tmp_path, stage):
    with make_engine(stage) as eng:
        train(eng, 0, STEPS)
        want = masters(eng)
    with make_engine(stage) as eng:
        train(eng, 0, SAVE_AT)
        eng.save(tmp_path, "mid")
    with make_engine(stage) as eng:
        eng.load(tmp_path)  # tag None: latest
        assert eng.stats()["global_step"] == SAVE_AT
        train(eng, SAVE_AT, STEPS)
        assert_bitwise_equal(masters(eng), want)


def test_loaded_values_show_in_views_gathered_before_the_load(tmp_path):
    with make_engine(1) as eng:
        train(eng, 0, 2)
        eng.save(tmp_path, "t")
        saved = eng.read_master("w")
    with make_engine(1) as eng:
        w = eng.gather("w")
        eng.release("w")  # load needs every param released
        eng.load(tmp_path, "t")
        again = eng.gather("w")
        assert again.ctypes.data == w.ctypes.data  # stages 0-2: stable
        np.testing.assert_array_equal(w, saved)
        eng.release("w")


def test_load_without_optimizer_states_restarts_the_moments(tmp_path):
    with make_engine(1) as eng:
        train(eng, 0, SAVE_AT)
        eng.save(tmp_path, "t")
    with make_engine(1) as full, make_engine(1) as fresh:
        full.load(tmp_path, "t")
        fresh.load(tmp_path, "t", load_optimizer_states=False)
        assert_bitwise_equal(masters(fresh), masters(full))
        train(full, SAVE_AT, SAVE_AT + 1)
        train(fresh, SAVE_AT, SAVE_AT + 1)
        assert not np.array_equal(full.read_master("w"), fresh.read_master("w"))


def test_allow_missing_keeps_params_the_checkpoint_lacks(tmp_path):
    with make_engine(1) as eng:
        train(eng, 0, 1)
        eng.save(tmp_path, "t")
        want = masters(eng)

    def with_extra():
        eng = zero.Engine(config(1))
        for n, shape in SHAPES.items():
            eng.register_param(n, np.zeros(shape), trainable=n != "frozen")
        eng.register_param("extra", np.full(4, 7.0))
        eng.finalize()
        return eng

    with with_extra() as eng:
        with pytest.raises(zero.FailedPreconditionError, match="'extra'"):
            eng.load(tmp_path, "t")
    with with_extra() as eng:
        eng.load(tmp_path, "t", allow_missing=True)
        np.testing.assert_array_equal(eng.read_master("extra"), np.full(4, 7.0))
        assert_bitwise_equal({n: eng.read_master(n) for n in SHAPES}, want)


def test_two_thread_ranks_at_stage_3_save_and_one_rank_at_stage_1_resumes(tmp_path):
    def rank_main(r, comm):
        with make_engine(3, comm=comm) as eng:
            train(eng, 0, SAVE_AT, rank=r)
            eng.save(tmp_path, "t")

    on_ranks(2, rank_main)
    assert {"rank_00000.bin", "rank_00001.bin"} <= set(os.listdir(tmp_path / "t"))
    with make_engine(1) as eng:
        eng.load(tmp_path, "t")
        assert eng.stats()["global_step"] == SAVE_AT
        train(eng, SAVE_AT, STEPS)  # trains on from the resharded state


def test_save_mid_accumulation_is_refused(tmp_path):
    with make_engine(1, gradient_accumulation_steps=2,
                     train_micro_batch_size_per_gpu=1) as eng:
        train(eng, 0, 1)  # one micro-step of two
        with pytest.raises(zero.FailedPreconditionError, match="micro-step"):
            eng.save(tmp_path, "t")


def test_missing_tag_raises_not_found(tmp_path):
    with make_engine(1) as eng:
        with pytest.raises(zero.NotFoundError):
            eng.load(tmp_path, "nope")
        with pytest.raises(zero.NotFoundError, match="latest"):
            eng.load(tmp_path)


def test_corrupt_shard_raises_data_loss_naming_the_file(tmp_path):
    with make_engine(2) as eng:
        train(eng, 0, 2)
        eng.save(tmp_path, "t")
    shard = tmp_path / "t" / "rank_00000.bin"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x10
    shard.write_bytes(bytes(data))
    with make_engine(2) as eng:
        with pytest.raises(zero.DataLossError, match="rank_00000.bin"):
            eng.load(tmp_path, "t")
    with pytest.raises(zero.DataLossError, match="rank_00000.bin"):
        zero.export_safetensors(tmp_path, "t", tmp_path / "out.safetensors")


def test_export_equals_read_master(tmp_path):
    with make_engine(2) as eng:
        train(eng, 0, 2)
        eng.save(tmp_path, "t")
        want = masters(eng)
    out = tmp_path / "model.safetensors"
    zero.export_safetensors(tmp_path, "t", out)
    tensors = load_file(str(out))
    assert sorted(tensors) == sorted(want)
    for n, t in tensors.items():
        assert t.dtype == np.float32 and t.shape == SHAPES[n]
        np.testing.assert_array_equal(t, want[n], err_msg=n)


def test_bf16_export_is_the_rounded_master(tmp_path):
    with make_engine(2) as eng:
        train(eng, 0, 2)
        eng.save(tmp_path, "t")
        want = eng.read_master("w")
    out = tmp_path / "model_bf16.safetensors"
    zero.export_safetensors(tmp_path, None, out, dtype="bf16")  # None: latest
    raw = out.read_bytes()
    header_len = int.from_bytes(raw[:8], "little")
    assert b'"w":{"dtype":"BF16","shape":[3,5]' in raw[8:8 + header_len]
    with pytest.raises(zero.InvalidArgumentError, match="dtype"):
        zero.export_safetensors(tmp_path, None, out, dtype="int8")
    # The bits, read past the header (numpy has no bfloat16).
    import json
    header = json.loads(raw[8:8 + header_len])
    lo, hi = header["w"]["data_offsets"]
    bits = np.frombuffer(raw[8 + header_len + lo:8 + header_len + hi], np.uint16)
    np.testing.assert_array_equal(bits, zero.float32_to_bf16(want).ravel())


def test_param_info_is_what_was_registered():
    with zero.Engine(config(3, bf16={"enabled": True})) as eng:
        eng.register_param("layer.weight", np.ones((2, 3, 4)))
        eng.register_param("scalar", np.float32(3.0))
        eng.register_param("frozen", np.ones(5), trainable=False,
                           dtype=zero.DType.F32)
        eng.finalize()
        assert eng.param_info(0) == zero.ParamInfo(
            0, "layer.weight", (2, 3, 4), zero.DType.BF16, True)
        assert eng.param_info("scalar") == zero.ParamInfo(
            1, "scalar", (), zero.DType.BF16, True)
        assert eng.param_info(2) == zero.ParamInfo(
            2, "frozen", (5,), zero.DType.F32, False)
        assert eng.params == [eng.param_info(i) for i in range(3)]
        with pytest.raises(zero.InvalidArgumentError):
            eng.param_info(3)
        with pytest.raises(zero.NotFoundError):
            eng.param_info("nope")


@pytest.mark.parametrize("gas_config, want", [
    ({}, 1),
    ({"gradient_accumulation_steps": 4}, 4),
    ({"gradient_accumulation_steps": "auto", "train_batch_size": 12,
      "train_micro_batch_size_per_gpu": 3}, 4),
    ({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2}, 4),
])
def test_gradient_accumulation_steps_is_resolved_by_the_runtime(gas_config, want):
    with zero.Engine(config(1, **gas_config)) as eng:
        assert eng.gradient_accumulation_steps == want


# ---- progress (C ABI 1.6, zero.progress) ---------------------------------

BIG = 1_500_000  # fp32 elements: 18 MB of Adam state, several 4 MiB reports


def big_engine(**extra):
    eng = zero.Engine(config(1, **extra))
    eng.register_param("big", np.linspace(-1, 1, BIG, dtype=np.float32))
    return eng


def record(calls, stop_at=None):
    def fn(what, done, total):
        calls.append((what, done, total))
        return stop_at is None or len(calls) < stop_at
    return fn


def assert_rises_to(calls, what, total):
    seen = [c for c in calls if c[0] == what]
    assert seen, (what, calls)
    assert all(t == total for _, _, t in seen), seen
    dones = [d for _, d, _ in seen]
    assert dones == sorted(set(dones)) and dones[-1] == total, seen


def test_progress_of_save_load_export_reshard(tmp_path):
    calls = []
    with big_engine() as eng:
        eng.finalize()
        eng.save(tmp_path, "t", progress=record(calls))
        state = 3 * 4 * BIG  # master, exp_avg, exp_avg_sq
        assert_rises_to(calls, "save", state)
        assert len(calls) >= 4
        eng.load(tmp_path, "t", progress=record(calls))
        assert_rises_to(calls, "load", state)
        n = len(calls)
        eng.save(tmp_path, "quiet", progress=False)
        assert len(calls) == n
    zero.export_safetensors(tmp_path, "t", tmp_path / "m.safetensors", progress=record(calls))
    assert_rises_to(calls, "export", 4 * BIG)
    zero.reshard(tmp_path, "t", tmp_path / "re", 2, progress=record(calls))
    # Each of the 2 new ranks reads the old rank's whole sections (their
    # checksums cover them): twice the state.
    assert_rises_to(calls, "reshard", 2 * 3 * 4 * BIG)
    assert load_file(str(tmp_path / "m.safetensors"))["big"].shape == (BIG,)


def test_progress_cancel_raises_and_keeps_earlier_tags(tmp_path):
    class Stop(Exception):
        pass

    def boom(what, done, total):
        raise Stop(what)

    with big_engine() as eng:
        eng.finalize()
        eng.save(tmp_path, "good", progress=False)
        with pytest.raises(zero.CancelledError, match="cancelled by the progress callback"):
            eng.save(tmp_path, "bad", progress=record([], stop_at=2))
        with pytest.raises(Stop, match="save") as info:
            eng.save(tmp_path, "bad", progress=boom)
        assert isinstance(info.value.__cause__, zero.CancelledError)
        assert not (tmp_path / "bad").exists()
        assert (tmp_path / "latest").read_text().strip() == "good"
        eng.save(tmp_path, "after", progress=False)  # the engine goes on
    with pytest.raises(zero.CancelledError):
        zero.export_safetensors(tmp_path, "good", tmp_path / "x.safetensors",
                                progress=lambda *a: False)
    assert not (tmp_path / "x.safetensors").exists()


def test_progress_line_on_a_terminal(tmp_path, monkeypatch):
    import io
    from zero.progress import Reporter, TerminalLine

    class Tty(io.StringIO):
        def isatty(self):
            return True

    line = TerminalLine.format("save", 45, 100, 1.0)
    assert line.startswith("\rsave:  45%|" + "█" * 9 + " " * 11 + "|") and "MB/s]" in line
    assert Reporter(None, stream=io.StringIO()).callback is None  # not a terminal: silent
    assert Reporter(None, show=False, stream=Tty()).callback is None  # not rank 0
    tty = Tty()
    monkeypatch.setattr("sys.stderr", tty)
    with big_engine() as eng:
        eng.finalize()
        eng.save(tmp_path, "t")  # progress=None: the line, on a terminal
    text = tty.getvalue()
    assert text.count("\n") == 1 and text.endswith("]\n"), text
    assert "\rsave: 100%|" + "█" * 20 + "|" in text, text


def test_progress_of_nvme_preallocation(tmp_path):
    nvme = {"device": "nvme", "nvme_path": str(tmp_path)}
    calls = []
    with big_engine(zero_optimization={"stage": 1, "sub_group_size": 300_000,
                                       "offload_optimizer": nvme}) as eng:
        eng.finalize(progress=record(calls))
        st = eng.stats()
        assert_rises_to(calls, "nvme preallocate", st["nvme_bytes"])
        assert_rises_to(calls, "nvme initialize", st["nvme_write_bytes"])
        chunks = -(-st["padded_numel"] // 300_000)
        assert len([c for c in calls if c[0] == "nvme initialize"]) == chunks  # one per chunk


@pytest.mark.parametrize("stage", [1, 3])
def test_async_save_with_keep_last_resumes_bitwise(tmp_path, stage):
    with make_engine(stage) as eng:
        train(eng, 0, STEPS)
        want = masters(eng)
    with make_engine(stage) as eng:
        for step in range(STEPS):
            if step in (1, 2, SAVE_AT):  # training goes on between saves
                eng.save(tmp_path, f"s{step}", asynchronous=True, keep_last=2)
            train(eng, step, step + 1)
        eng.wait_checkpoint()
    assert (tmp_path / "latest").read_text() == f"s{SAVE_AT}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "s2", f"s{SAVE_AT}"]
    with make_engine(stage) as eng:
        eng.load(tmp_path)
        assert eng.stats()["global_step"] == SAVE_AT
        train(eng, SAVE_AT, STEPS)
        assert_bitwise_equal(masters(eng), want)


def test_preemption_without_exit_saves_and_raises_cancelled(tmp_path):
    import signal
    with make_engine(2) as eng:
        eng.set_preemption(tmp_path, exit=False)
        train(eng, 0, 2)
        os.kill(os.getpid(), signal.SIGTERM)  # handled by the engine: a flag
        with pytest.raises(zero.CancelledError, match="every rank finished global step 3"):
            train(eng, 2, 3)
        eng.set_preemption(None)  # the previous handler is back
        want = masters(eng)
    assert (tmp_path / "latest").read_text() == "global_step3\n"
    with make_engine(2) as eng:
        eng.load(tmp_path)
        assert_bitwise_equal(masters(eng), want)
