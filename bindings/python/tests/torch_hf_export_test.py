"""``zero-ckpt export --hf``: a zero checkpoint saved by zero.torch at 2 and
3 thread ranks, written in Hugging Face's layout, is the layout
engine.save_pretrained writes from the live engine (the same files, index
and config.json; every tensor bit for bit), and from_pretrained of it holds
the engine's master weights exactly and gives the same logits. Peak memory
of the export is measured against one shard file: under it, on a 48 MB
checkpoint cut into 8 MB shards.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")
import hf_models  # noqa: E402
import zero  # noqa: E402
import zero.torch as zt  # noqa: E402
from thread_ranks import on_ranks  # noqa: E402

ROWS, LEN = 6, 9  # global batch divisible by 2 and 3 ranks
SHARD = "8KB"


def cli():
    return os.path.join(os.environ["TEST_SRCDIR"], "zero", "tools", "zero-ckpt")


def config(stage, world):
    return {"train_batch_size": ROWS, "train_micro_batch_size_per_gpu": ROWS // world,
            "steps_per_print": 0, "comm_timeout_seconds": 120,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
            "zero_optimization": {"stage": stage,
                                  "stage3_param_persistence_threshold": 0}}


def trained_and_saved(tmp_path, name, stage, world):
    """One step at ``world`` thread ranks, then save_checkpoint to
    tmp/ckpt and save_pretrained to tmp/live; the engine's master weights."""
    ids = torch.randint(0, hf_models.VOCAB, (ROWS, LEN),
                        generator=torch.Generator().manual_seed(3))
    models = [hf_models.seeded(hf_models.BUILDERS[name]) for _ in range(world)]
    mb = ROWS // world

    def run(rank, comm):
        engine = zt.initialize(models[rank], config(stage, world), comm=comm)
        try:
            out = engine(**hf_models.batch(name, ids[rank * mb:(rank + 1) * mb]))
            engine.backward(out.loss)
            engine.step()
            engine.save_checkpoint(str(tmp_path / "ckpt"), tag="t")
            engine.save_pretrained(tmp_path / "live", max_shard_size=SHARD)
            return engine.full_state_dict()
        finally:
            engine.close(keep_values=False)  # the values were read above

    return type(models[0]), ids, on_ranks(world, run)[0]


def export(*args):
    r = subprocess.run([cli(), "export", "--hf", *map(str, args)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("name,stage", [("gpt2", 3), ("llama", 1), ("bert", 2), ("t5", 3)])
def test_export_equals_save_pretrained_and_loads(tmp_path, name, stage, world):
    cls, ids, master = trained_and_saved(tmp_path, name, stage, world)
    out, live = tmp_path / "out", tmp_path / "live"
    export(tmp_path / "ckpt", "t", out, "--max-shard-size", SHARD)

    assert sorted(os.listdir(out)) == sorted(os.listdir(live))
    assert (out / "config.json").is_file()
    assert (out / "config.json").read_text() == (live / "config.json").read_text()
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert index == json.loads((live / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 2 and files[-1].endswith(f"-of-{len(files):05d}.safetensors")
    for f in files:
        got = safetensors_torch.load_file(str(out / f))
        want = safetensors_torch.load_file(str(live / f))
        assert sorted(got) == sorted(want), f
        for k in want:
            assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), (f, k)

    loaded = cls.from_pretrained(str(out)).eval()
    reference = cls.from_pretrained(str(live)).eval()
    for k, p in loaded.named_parameters():
        assert torch.equal(p.detach(), master[k]), k
    with torch.no_grad():
        got = loaded(**hf_models.batch(name, ids)).logits
        want = reference(**hf_models.batch(name, ids)).logits
    assert torch.equal(got, want)


def test_export_of_one_file_and_a_chosen_dtype(tmp_path):
    """Under the shard size: model.safetensors alone, no index (as
    save_pretrained); --bf16 rounds the master values."""
    cls, _, master = trained_and_saved(tmp_path, "llama", 0, 2)
    out = tmp_path / "bf16"
    export(tmp_path / "ckpt", out, "--bf16")  # TAG from DIR/latest
    assert sorted(os.listdir(out)) == ["config.json", "generation_config.json",
                                       "model.safetensors"]
    tensors = safetensors_torch.load_file(str(out / "model.safetensors"))
    assert sorted(tensors) == sorted(master)
    for k, v in tensors.items():
        assert v.dtype == torch.bfloat16 and torch.equal(v, master[k].to(torch.bfloat16)), k
    for k, p in cls.from_pretrained(str(out)).named_parameters():
        assert torch.equal(p.detach(), master[k].to(torch.bfloat16).float()), k


def peak_rss_kb(argv):
    """Peak resident memory of ``argv`` run as the only child of a fresh
    interpreter (RUSAGE_CHILDREN's maxrss is that child's)."""
    code = ("import resource, subprocess, sys\n"
            "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    r = subprocess.run([sys.executable, "-c", code, *map(str, argv)],
                       capture_output=True, text=True, check=True)
    return int(r.stdout.split()[-1])


def test_export_peak_memory_is_under_one_shard(tmp_path):
    """A 48 MB checkpoint (48 params of 1 MB, frozen: saved whole by rank 0)
    exported in 8 MB shards: the export's peak RSS over the same binary's
    `inspect` of that checkpoint stays under one shard file (6x less than
    the model)."""
    eng = zero.Engine({"optimizer": {"type": "SGD", "params": {"lr": 0.1}},
                       "steps_per_print": 0, "zero_optimization": {"stage": 1}})
    rng = np.random.default_rng(0)
    for i in range(48):
        eng.register_param(f"layers.{i}.weight", rng.standard_normal((512, 512)),
                           trainable=False)
    eng.register_param("head.weight", rng.standard_normal((4, 4)))
    eng.finalize()
    eng.save(str(tmp_path / "big"), "t")
    eng.close()
    shard = 8 * 10 ** 6
    base = peak_rss_kb([cli(), "inspect", tmp_path / "big"])
    peak = peak_rss_kb([cli(), "export", "--hf", tmp_path / "big", tmp_path / "hf",
                        "--max-shard-size", "8MB"])
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 7  # 48 MB in 8 MB files
    assert index["metadata"]["total_size"] == 48 * 512 * 512 * 4 + 16 * 4
    grown = (peak - base) * 1024
    print(f"export peak RSS {peak} KiB, inspect {base} KiB: +{grown / 1e6:.1f} MB "
          f"for 8 MB shards of a 48 MB model")
    assert grown < shard, (peak, base)


def test_hf_options_outside_export_hf_are_usage_errors(tmp_path):
    for argv in (["inspect", tmp_path, "--hf"], ["export", tmp_path, "x.safetensors",
                                                 "--config", tmp_path],
                 ["export", "--hf", tmp_path, "out", "--max-shard-size", "5XB"]):
        r = subprocess.run([cli(), *map(str, argv)], capture_output=True, text=True)
        assert r.returncode == 2 and "usage:" in r.stderr, (argv, r.stderr)
