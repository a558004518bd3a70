"""Stock Hugging Face models (tiny, built from configs) through zero.torch at
2 thread ranks, against plain torch as the reference:

* zero.torch.Init() construction gives each param and buffer the bits plain
  construction with the same seed gives (the model's own _init_weights
  replayed one param at a time), at stages 0-3, and leaves the generator
  where plain construction leaves it;
* pretrained= with Init loads every param from the file;
* training from an Init-built model gives plain torch's AdamW losses and
  weights (fp32, the same global batch);
* the ds_config activation_checkpointing section on models with a cache
  object (Llama, Mistral) and GPT-2: the losses and weights of the run
  without it (the cache is off while training, as HF's own checkpointing).
"""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
pytest.importorskip("transformers")
import hf_models  # noqa: E402
import zero.torch as zt  # noqa: E402
from thread_ranks import on_ranks  # noqa: E402

WORLD = 2
ROWS, LEN, STEPS, LR = 4, 9, 3, 1e-2


def config(stage, **extra):
    cfg = {"train_batch_size": ROWS, "train_micro_batch_size_per_gpu": ROWS // WORLD,
           "steps_per_print": 0,
           "optimizer": {"type": "AdamW", "params": {"lr": LR, "betas": [0.9, 0.999],
                                                     "eps": 1e-8, "weight_decay": 0.0}},
           "zero_optimization": {"stage": stage,
                                 "stage3_param_persistence_threshold": 0}}
    cfg.update(extra)
    return cfg


def built_under_init(name, n=WORLD):
    models = []
    for _ in range(n):
        torch.manual_seed(0)
        with zt.Init():
            models.append(hf_models.BUILDERS[name]())
    return models


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("name", sorted(hf_models.BUILDERS))
def test_init_equals_plain_construction(name, stage):
    ref = hf_models.seeded(hf_models.BUILDERS[name])
    after_plain = torch.default_generator.get_state()
    models = built_under_init(name)
    assert torch.equal(torch.default_generator.get_state(), after_plain)
    assert all(p.is_meta for p in models[0].parameters())

    def run(rank, comm):
        engine = zt.initialize(models[rank], config(stage), comm=comm)
        try:
            return engine.full_state_dict(), dict(engine.module.named_buffers())
        finally:
            engine.close(keep_values=False)  # the values were read above

    for params, buffers in on_ranks(WORLD, run):
        want = dict(ref.named_parameters())
        assert set(params) == set(want)
        for k, p in want.items():
            assert torch.equal(params[k], p.detach()), (name, stage, k)
        for k, b in ref.named_buffers():
            assert torch.equal(buffers[k], b), (name, stage, k)


def test_init_with_pretrained_takes_every_param_from_the_file(tmp_path):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    src = hf_models.seeded(hf_models.llama, seed=7)
    path = tmp_path / "model.safetensors"
    safetensors_torch.save_file({k: v.detach().contiguous()
                                 for k, v in src.state_dict().items()
                                 if k in dict(src.named_parameters())}, str(path))
    models = built_under_init("llama")

    def run(rank, comm):
        engine = zt.initialize(models[rank], config(3), comm=comm, pretrained=str(path))
        try:
            return engine.full_state_dict()
        finally:
            engine.close(keep_values=False)  # the values were read above

    for params in on_ranks(WORLD, run):
        for k, p in src.named_parameters():
            assert torch.equal(params[k], p.detach()), k


def batches(seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, hf_models.VOCAB, (ROWS, LEN), generator=g)
            for _ in range(STEPS)]


def plain_torch(name, data):
    model = hf_models.seeded(hf_models.BUILDERS[name])
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0)
    losses = []
    for ids in data:
        loss = model(**hf_models.batch(name, ids)).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, {k: p.detach().clone() for k, p in model.named_parameters()}


def zero_run(models, name, data, cfg):
    mb = ROWS // WORLD

    def run(rank, comm):
        engine = zt.initialize(models[rank], cfg, comm=comm)
        try:
            losses = []
            for ids in data:
                out = engine(**hf_models.batch(name, ids[rank * mb:(rank + 1) * mb]))
                engine.backward(out.loss)
                engine.step()
                losses.append(out.loss.item())
            return losses, engine.full_state_dict(), list(engine.checkpointed_modules)
        finally:
            engine.close(keep_values=False)  # the values were read above

    res = on_ranks(WORLD, run, timeout=300)
    losses = [sum(r[0][i] for r in res) / WORLD for i in range(len(data))]
    return losses, res[0][1], res[0][2]


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("name", ["llama", "gpt2", "t5"])
def test_training_from_init_equals_plain_torch(name, stage):
    data = batches()
    want_losses, want = plain_torch(name, data)
    losses, params, _ = zero_run(built_under_init(name), name, data, config(stage))
    assert losses == pytest.approx(want_losses, abs=1e-5), (losses, want_losses)
    for k, p in want.items():
        assert torch.allclose(params[k], p, atol=1e-5, rtol=0), k


@pytest.mark.parametrize("name,stage", [("llama", 0), ("llama", 3), ("mistral", 0),
                                        ("mistral", 3), ("gpt2", 0), ("gpt2", 3)])
def test_activation_checkpointing_section_on_cache_models(name, stage):
    build = getattr(hf_models, name)
    data = batches(seed=2)
    runs = []
    for section in (None, {}):
        extra = {} if section is None else {"activation_checkpointing": section}
        models = [hf_models.seeded(build) for _ in range(WORLD)]
        runs.append(zero_run(models, name, data, config(stage, **extra)))
    (plain_losses, plain, none), (losses, params, wrapped) = runs
    assert none == [] and len(wrapped) == 2, wrapped
    assert losses == pytest.approx(plain_losses, abs=1e-6)
    for k, p in plain.items():
        assert torch.allclose(params[k], p, atol=1e-6, rtol=0), k


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("name", sorted(hf_models.BUILDERS))
def test_save_pretrained_then_from_pretrained_logits_equal(tmp_path, name, stage):
    """One training step, then engine.save_pretrained in shards of 8 KB:
    from_pretrained of that directory gives the engine's logits and its
    master weights."""
    pytest.importorskip("safetensors")
    data = batches(seed=3)[:1]
    ids = data[0]
    models = [hf_models.seeded(hf_models.BUILDERS[name]) for _ in range(WORLD)]
    mb = ROWS // WORLD

    def run(rank, comm):
        engine = zt.initialize(models[rank], config(stage), comm=comm)
        try:
            out = engine(**hf_models.batch(name, ids[rank * mb:(rank + 1) * mb]))
            engine.backward(out.loss)
            engine.step()
            written = engine.save_pretrained(tmp_path, max_shard_size="8KB")
            engine.eval()
            with torch.no_grad():
                logits = engine(**hf_models.batch(name, ids)).logits
            return written, logits, engine.full_state_dict()
        finally:
            engine.close(keep_values=False)  # the values were read above

    res = on_ranks(WORLD, run)
    written = res[0][0]
    assert res[1][0] == []
    assert any(p.endswith("model.safetensors.index.json") for p in written), written
    assert len(written) > 2 and (tmp_path / "config.json").is_file()
    loaded = type(models[0]).from_pretrained(str(tmp_path))
    loaded.eval()
    for k, p in loaded.named_parameters():
        assert torch.equal(p.detach(), res[0][2][k]), k
    with torch.no_grad():
        logits = loaded(**hf_models.batch(name, ids)).logits
    for r in range(WORLD):
        assert torch.allclose(logits, res[r][1], atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_generation_at_stage3_gathers_each_param_once(name):
    """32 greedy tokens at stage 3: plain torch's tokens with and without
    engine.gathered_for_generation(); the runtime's collective count per
    param is at least 32 without it (one gather per forward; GPT-2's tied
    embedding twice, by the embedding and the head) and 1 with it."""
    ref = hf_models.seeded(hf_models.BUILDERS[name])
    prompt = torch.randint(0, hf_models.VOCAB, (1, 4),
                           generator=torch.Generator().manual_seed(5))
    kw = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)
    want = ref.generate(prompt, **kw)
    models = [hf_models.seeded(hf_models.BUILDERS[name]) for _ in range(WORLD)]

    def run(rank, comm):
        engine = zt.initialize(models[rank], config(3), comm=comm)
        engine.eval()
        out = {}
        try:
            for mode in ("per_forward", "once"):
                before = engine.zero.stats()["collective_calls"]
                with torch.no_grad():
                    if mode == "once":
                        with engine.gathered_for_generation():
                            tokens = engine.module.generate(prompt, **kw)
                    else:
                        tokens = engine.module.generate(prompt, **kw)
                calls = engine.zero.stats()["collective_calls"] - before
                out[mode] = (calls / len(engine._params), tokens)
            return out
        finally:
            engine.close(keep_values=False)

    for out in on_ranks(WORLD, run):
        assert out["per_forward"][0] >= 32 and out["once"][0] == 1, out
        assert torch.equal(out["per_forward"][1], want)
        assert torch.equal(out["once"][1], want)


def test_strict_config_accepts_16bit_save_key_and_save_16bit_model_saves(tmp_path):
    """"zero_allow_untested_keys": false with
    stage3_gather_16bit_weights_on_model_save true at stage 3: initialize
    accepts it (the key takes effect) and save_16bit_model writes a state
    dict from_pretrained's model takes, equal to the master weights."""
    cfg = config(3, zero_allow_untested_keys=False)
    cfg["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = True
    models = [hf_models.seeded(hf_models.llama) for _ in range(WORLD)]

    def run(rank, comm):
        engine = zt.initialize(models[rank], cfg, comm=comm)
        try:
            return engine.save_16bit_model(str(tmp_path)), engine.full_state_dict()
        finally:
            engine.close(keep_values=False)

    res = on_ranks(WORLD, run)
    assert [r[0] for r in res] == [True, True]
    sd = torch.load(tmp_path / "pytorch_model.bin")
    plain = hf_models.seeded(hf_models.llama, seed=9)
    plain.load_state_dict(sd)
    for k, p in plain.named_parameters():
        assert torch.equal(p.detach(), res[0][1][k]), k


class _OwnInitCode(torch.nn.Module):
    """Init code beyond reset_parameters: a param made by arithmetic on a
    random factory, one written from another param, a value read back with
    float() mid-init, a buffer derived from factories, a Linear re-drawn, and
    the nn.init functions current torch skips on meta tensors (trunc_normal_,
    orthogonal_, dirac_, sparse_)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 4) * 0.02)
        self.b = torch.nn.Parameter(torch.zeros(4))
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("scale", torch.tensor([2.0]) * torch.arange(3).float())
        with torch.no_grad():
            self.b.add_(self.w.sum(0))
            self.b.mul_(float(self.w.abs().max()))
            torch.nn.init.orthogonal_(self.lin.weight)
            self.lin.weight[1].zero_()
        self.t = torch.nn.Parameter(torch.empty(6, 5))
        torch.nn.init.trunc_normal_(self.t, std=0.02)
        self.conv = torch.nn.Conv1d(4, 6, 3)
        torch.nn.init.dirac_(self.conv.weight)
        self.s = torch.nn.Parameter(torch.empty(5, 4))
        torch.nn.init.sparse_(self.s, 0.5)


@pytest.mark.parametrize("stage", [0, 3])
def test_init_replays_arbitrary_init_code(stage):
    ref = hf_models.seeded(_OwnInitCode)
    after_plain = torch.rand(3)
    models = []
    for _ in range(WORLD):
        torch.manual_seed(0)
        with zt.Init():
            models.append(_OwnInitCode())
    assert torch.equal(torch.rand(3), after_plain)

    def run(rank, comm):
        engine = zt.initialize(models[rank], config(stage), comm=comm)
        try:
            return engine.full_state_dict(), dict(engine.module.named_buffers())
        finally:
            engine.close(keep_values=False)  # the values were read above

    for params, buffers in on_ranks(WORLD, run):
        for k, p in ref.named_parameters():
            assert torch.equal(params[k], p.detach()), k
        assert torch.equal(buffers["scale"], ref.scale)


def test_init_runs_no_meta_kernel_for_inplace_ops_or_random_factories():
    # torch >= 2.0 implements many meta kernels in Python, and the first
    # one's torch._check imports sympy, torch._dynamo and triton (~150 MB of
    # RSS): Init runs in-place ops on recorded tensors on scratch CPU tensors
    # and takes a random factory's meta layout from its CPU draw instead.
    from torch.utils._pytree import tree_flatten
    from torch.utils._python_dispatch import TorchDispatchMode

    on_meta = []

    class MetaOps(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if any(isinstance(t, torch.Tensor) and t.is_meta
                   for t in tree_flatten((args, kwargs))[0]) or (
                       str(kwargs.get("device")) == "meta"):
                on_meta.append(func.overloadpacket.__name__)
            return func(*args, **kwargs)

    torch.manual_seed(0)
    with zt.Init(), MetaOps():
        model = _OwnInitCode()
        emb = torch.nn.Embedding(7, 4)
        torch.nn.init.normal_(emb.weight, std=0.02)
        r = torch.randn(3, 5, requires_grad=True)
    assert on_meta, "the dispatch mode saw no meta op: it measured nothing"
    from zero.torch.init_record import _METADATA_OPS  # t_, ...: no values, no kernel to avoid
    ran = sorted({n for n in on_meta if n not in _METADATA_OPS and (
        n.endswith("_") or n in ("randn", "normal", "randint"))})
    assert not ran, ran
    assert (r.is_meta, r.shape, r.stride(), r.dtype, r.requires_grad) == (
        True, (3, 5), (5, 1), torch.float32, True)
    assert model.w.is_meta and emb.weight.is_meta

    with zt.Init():
        w = torch.empty(3, 4)
        assert w.normal_() is w and torch.nn.init.zeros_(w) is w
        with pytest.raises(RuntimeError):
            w.copy_(torch.zeros(5))  # checked on the scratch tensor as without Init
