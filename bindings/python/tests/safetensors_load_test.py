"""zero.Engine.load_safetensors: pretrained weights from one .safetensors
file or a Hugging Face index of shards (written by the safetensors package),
F32 and BF16 sources, on thread ranks at stages 1 and 3; each rank reads only
what it holds; bad files fail on every rank naming the problem."""
import json

import numpy as np
import pytest
from safetensors import TensorSpec, serialize_file
from safetensors.numpy import save_file

import zero
from thread_ranks import on_ranks

SHAPES = {"w": (6, 7), "b": (7,), "emb": (40, 33), "frozen": (3,)}


def config(stage, **zero_opt):
    return {"zero_optimization": {"stage": stage, **zero_opt},
            "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
            "steps_per_print": 0, "comm_timeout_seconds": 60}


def make_engine(stage, shapes=SHAPES, comm=None, **zero_opt):
    eng = zero.Engine(config(stage, **zero_opt), comm=comm)
    for name, shape in shapes.items():
        eng.register_param(name, np.zeros(shape, np.float32),
                           trainable=not name.endswith("frozen"))
    eng.finalize()
    return eng


def tensors(seed=0, shapes=SHAPES):
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}


def to_bf16_bits(a):
    """bf16 bits of `a` (truncated: any bf16 value will do) and the fp32
    value each stands for."""
    bits = (np.ascontiguousarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32).reshape(a.shape)


def save_bf16(path, ts, prefix=""):
    keep = []
    specs = {}
    for n, a in ts.items():
        bits, _ = to_bf16_bits(a)
        keep.append(bits)
        specs[prefix + n] = TensorSpec(dtype="bfloat16", shape=a.shape,
                                       data_ptr=bits.ctypes.data, data_len=bits.nbytes)
    serialize_file(specs, str(path), metadata=None)


def write_index(dirpath, ts, prefix="", split=("w", "b")):
    """Two shards and model.safetensors.index.json."""
    first = {prefix + n: a for n, a in ts.items() if n in split}
    second = {prefix + n: a for n, a in ts.items() if n not in split}
    save_file(first, str(dirpath / "model-00001-of-00002.safetensors"))
    save_file(second, str(dirpath / "model-00002-of-00002.safetensors"))
    wm = {n: "model-00001-of-00002.safetensors" for n in first}
    wm.update({n: "model-00002-of-00002.safetensors" for n in second})
    index = dirpath / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": wm}))
    return index


# Stage 3 with the default persistence threshold keeps these small params
# whole on every rank; "3s" (threshold 0) shards every one of them.
STAGES = [0, 1, 2, 3, "3s"]


def load_and_read(stage, path, world=1, shapes=SHAPES, **load_kw):
    opts = {}
    if stage == "3s":
        stage, opts = 3, {"stage3_param_persistence_threshold": 0}

    def fn(r, comm):
        with make_engine(stage, shapes, comm=comm, **opts) as eng:
            eng.load_safetensors(path, **load_kw)
            got = {n: eng.read_master(n) for n in shapes}
            # The working copy too (stage 3: gathered from every rank's slice).
            views = {n: np.array(eng.gather(n), dtype=np.float32) for n in shapes}
            for n in shapes:
                eng.release(n)
            return got, views
    return on_ranks(world, fn)


def assert_equal(got, want):
    assert sorted(got) == sorted(want)
    for n in want:
        np.testing.assert_array_equal(got[n], want[n], err_msg=n)


@pytest.mark.parametrize("world", [1, 3, 4])
@pytest.mark.parametrize("stage", STAGES)
def test_single_file_f32_loads_exactly(tmp_path, stage, world):
    want = tensors(1)
    path = tmp_path / "model.safetensors"
    save_file(want, str(path))
    for got, views in load_and_read(stage, path, world):
        assert_equal(got, want)
        assert_equal(views, want)  # fp32 engine: the working copy is exact


@pytest.mark.parametrize("world", [1, 3, 4])
@pytest.mark.parametrize("stage", STAGES)
def test_indexed_bf16_shards_load_widened(tmp_path, stage, world):
    ts = tensors(2)
    want = {n: to_bf16_bits(a)[1] for n, a in ts.items()}
    save_bf16(tmp_path / "model-00001-of-00002.safetensors",
              {n: ts[n] for n in ("w", "b")}, prefix="model.")
    save_bf16(tmp_path / "model-00002-of-00002.safetensors",
              {n: ts[n] for n in ("emb", "frozen")}, prefix="model.")
    wm = {"model." + n: "model-0000%d-of-00002.safetensors" % (1 if n in ("w", "b") else 2)
          for n in ts}
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": wm}))
    for got, views in load_and_read(stage, index, world, prefix_strip="model."):
        assert_equal(got, want)
        assert_equal(views, want)


def test_indexed_f32_with_prefix_add_and_extra_tensors(tmp_path, capfd):
    ts = tensors(3)
    index = write_index(tmp_path, {**ts, "lm_head.unused": np.ones((2,), np.float32)})
    shapes = {"net." + n: s for n, s in SHAPES.items()}
    (got, _), = load_and_read(3, index, 1, shapes=shapes, prefix_add="net.")
    assert_equal(got, {"net." + n: a for n, a in ts.items()})
    assert "lm_head.unused" in capfd.readouterr().err


def test_missing_tensor_fails_on_every_rank_or_is_allowed(tmp_path):
    ts = tensors(4)
    del ts["b"]
    path = tmp_path / "partial.safetensors"
    save_file(ts, str(path))

    def fn(r, comm):
        with make_engine(1, comm=comm) as eng:
            with pytest.raises(zero.NotFoundError, match="'b'"):
                eng.load_safetensors(path)
            np.testing.assert_array_equal(eng.read_master("w"), 0)  # nothing written
            eng.load_safetensors(path, allow_missing=True)
            np.testing.assert_array_equal(eng.read_master("w"), ts["w"])
            np.testing.assert_array_equal(eng.read_master("b"), 0)
        return True
    assert on_ranks(3, fn) == [True] * 3


def test_wrong_shape_fails_on_every_rank_naming_both_shapes(tmp_path):
    ts = tensors(5)
    ts["emb"] = ts["emb"].reshape(33, 40)
    path = tmp_path / "bad_shape.safetensors"
    save_file(ts, str(path))

    def fn(r, comm):
        with make_engine(3, comm=comm) as eng:
            with pytest.raises(zero.InvalidArgumentError) as e:
                eng.load_safetensors(path)
            msg = str(e.value)
            assert "'emb'" in msg and "[33, 40]" in msg and "[40, 33]" in msg, msg
            assert "bad_shape.safetensors" in msg, msg
        return True
    assert on_ranks(4, fn) == [True] * 4


def test_truncated_file_fails_on_every_rank_naming_it(tmp_path):
    path = tmp_path / "cut.safetensors"
    save_file(tensors(6), str(path))
    data = path.read_bytes()
    path.write_bytes(data[:-10])

    def fn(r, comm):
        with make_engine(1, comm=comm) as eng:
            with pytest.raises(zero.DataLossError, match="cut.safetensors"):
                eng.load_safetensors(path)
        return True
    assert on_ranks(3, fn) == [True] * 3


def test_stage3_rank_reads_only_its_slice(tmp_path):
    shapes = {"big": (1100, 1031), "small": (5,)}  # big: 4.5 MB, several chunks
    ts = tensors(7, shapes)
    path = tmp_path / "big.safetensors"
    save_file(ts, str(path))
    world = 4

    def fn(r, comm):
        with make_engine(3, shapes, comm=comm,
                         stage3_param_persistence_threshold=0) as eng:
            n = eng.load_safetensors(path)
            assert_equal({k: eng.read_master(k) for k in shapes}, ts)
            return n
    read = on_ranks(world, fn)
    total = sum(a.nbytes for a in ts.values())
    assert sum(read) == total, read  # the slices partition every param
    for n in read:
        assert n <= total // world + 4096, read
    # Stage 1: the working copy is whole on every rank, so each reads it all.
    read1 = on_ranks(2, lambda r, comm: _load_bytes(1, shapes, comm, path))
    assert read1 == [total, total]


def _load_bytes(stage, shapes, comm, path):
    with make_engine(stage, shapes, comm=comm) as eng:
        return eng.load_safetensors(path)


def test_refused_while_gathered(tmp_path):
    path = tmp_path / "m.safetensors"
    save_file(tensors(8), str(path))
    with make_engine(1) as eng:
        eng.gather("w")
        with pytest.raises(zero.FailedPreconditionError, match="gathered"):
            eng.load_safetensors(path)
        eng.release("w")
        eng.load_safetensors(path)
