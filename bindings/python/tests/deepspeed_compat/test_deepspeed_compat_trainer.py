"""HF Trainer with ``deepspeed=ds_config.json`` on zero's DeepSpeed layer
against the same Trainer on the real DeepSpeed (DS_ACCELERATOR=cpu): a tiny
GPT-2 or Llama built from its config, 2 ranks launched by zero-launch,
ZeRO stages 0-3. Every rank's loss of every micro-batch agrees to 1e-5 and
the saved models load with from_pretrained and agree to 1e-5. Without an
optimizer block ("client" below) the Trainer passes its own torch AdamW, which
zero's layer maps onto the runtime's; its no-decay param group with
weight_decay > 0, and its own lr schedule (no scheduler block), are refused.

Runs in any Python with pytest; the training runs in the current-torch venv
(tools/install_current_torch.sh, see ds_compat_harness.venv_python)."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ds_compat_harness as H  # noqa: E402

SCRIPT = os.path.join(H.HERE, "hf_trainer_script.py")

OPTIMIZER = {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                         "weight_decay": "auto", "torch_adam": True}}
# (stage, gradient accumulation steps, scheduler, model); "client": no
# optimizer block, the Trainer's own AdamW
CASES = [
    (0, 1, "WarmupLR", "gpt2"),
    (1, 2, "WarmupLR", "gpt2"),
    (2, 1, "WarmupDecayLR", "llama"),
    (3, 2, "WarmupDecayLR", "gpt2"),
    (3, 1, "WarmupLR", "llama"),
    (2, 1, "client WarmupDecayLR", "llama"),
    (3, 2, "client WarmupLR", "gpt2"),
]


def ds_config(stage, gas, scheduler):
    client = scheduler is None or scheduler.startswith("client ")
    scheduler = scheduler and scheduler.split()[-1]
    sched = {"warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto"}
    if scheduler == "WarmupDecayLR":
        sched["total_num_steps"] = "auto"
    zo = {"stage": stage}
    if stage == 3:
        zo["stage3_gather_16bit_weights_on_model_save"] = True
    cfg = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": gas,
           "gradient_clipping": 1.0, "zero_optimization": zo}
    if not client:
        cfg["optimizer"] = OPTIMIZER
    if scheduler is not None:
        cfg["scheduler"] = {"type": scheduler, "params": sched}
    return cfg


@pytest.mark.parametrize("stage,gas,scheduler,model", CASES,
                         ids=[f"stage{s}-gas{g}-{m}" + ("-client" if c.startswith("client") else "")
                              for s, g, c, m in CASES])
def test_trainer_matches_real_deepspeed(tmp_path, stage, gas, scheduler, model):
    py = H.venv_python()
    H.need_mpirun()
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(json.dumps(ds_config(stage, gas, scheduler)))
    runs = {}
    for which in ("real", "zero"):
        out = tmp_path / which
        out.mkdir()
        r = H.launch(which, ["--num_gpus", "2"],
                     [py, "-u", SCRIPT, "--deepspeed", str(cfg), "--out", str(out), "--model", model],
                     str(out))
        runs[which] = H.rank_losses(str(out))
        if which == "zero":  # zero's layer said it is the active deepspeed
            assert "zero's DeepSpeed compatibility layer is active" in r.stderr
    for rank in range(2):
        real, zero = runs["real"][rank], runs["zero"][rank]
        assert "zero_deepspeed" in zero["deepspeed"] and "site-packages" in real["deepspeed"]
        assert real["world"] == zero["world"] == 2
        assert len(real["losses"]) == len(zero["losses"]) == 4 * gas
        worst = max(abs(a - b) for a, b in zip(real["losses"], zero["losses"]))
        assert worst <= 1e-5, (rank, real["losses"], zero["losses"])
    diff = H.compare_saved(py, str(tmp_path / "real" / "model"), str(tmp_path / "zero" / "model"), 1e-5)
    print(f"stage {stage} gas {gas} {model}: saved weights differ by at most {diff}")


@pytest.mark.parametrize("scheduler,weight_decay,message", [
    ("client WarmupLR", "0.1", "param group 1 has weight_decay=0.0, param group 0 weight_decay=0.1"),
    (None, "0.0", "cannot take an lr set on the optimizer"),
], ids=["no-decay-group", "trainer-schedule"])
def test_trainer_client_optimizer_refusals(tmp_path, scheduler, weight_decay, message):
    """No optimizer block and weight_decay > 0: the Trainer's AdamW has a
    weight_decay=0 group (biases, norms) the runtime cannot apply. No
    scheduler block either: the Trainer's schedule, built on the returned
    optimizer, sets an lr the runtime cannot take. Every rank fails naming
    it, before any update, instead of training something else."""
    py = H.venv_python()
    H.need_mpirun()
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(json.dumps(ds_config(2, 1, scheduler)))
    r = H.launch("zero", ["--num_gpus", "2"],
                 [py, "-u", SCRIPT, "--deepspeed", str(cfg), "--out", str(tmp_path),
                  "--weight_decay", weight_decay], str(tmp_path), check=False)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr[-3000:]
    assert not (tmp_path / "model").exists()
