"""accelerate with DeepSpeed on zero's DeepSpeed layer against the same
script on the real DeepSpeed (DS_ACCELERATOR=cpu), 2 ranks: a tiny GPT-2
training loop with ``accelerator.accumulate`` (gradient accumulation 2: the
engine's set_gradient_accumulation_boundary path), DummyOptim and
DummyScheduler, and accelerate's stage-3 save recipe
(``save_pretrained(state_dict=accelerator.get_state_dict(model))`` on every
rank). Two ways in: ``Accelerator(deepspeed_plugin=DeepSpeedPlugin(...))``
launched by zero-launch, and a plain ``Accelerator()`` configured by
``zero-launch --num_processes 2 --use_deepspeed --deepspeed_config_file ...``
(accelerate launch's flags) against the real ``accelerate launch``. Every
rank's micro-batch losses and the saved weights agree to 1e-5."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ds_compat_harness as H  # noqa: E402

SCRIPT = os.path.join(H.HERE, "accelerate_script.py")


def config(stage):
    zo = {"stage": stage}
    if stage == 3:
        zo["stage3_gather_16bit_weights_on_model_save"] = True
    return {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
            "gradient_clipping": 1.0,
            "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto",
                                                      "torch_adam": True}},
            "scheduler": {"type": "WarmupDecayLR", "params": {
                "warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto",
                "total_num_steps": "auto"}},
            "zero_optimization": zo}


def check(tmp_path, py):
    runs = {w: H.rank_losses(str(tmp_path / w)) for w in ("real", "zero")}
    for rank in range(2):
        real, zero = runs["real"][rank], runs["zero"][rank]
        assert "zero_deepspeed" in zero["deepspeed"] and "site-packages" in real["deepspeed"]
        assert real["world"] == zero["world"] == 2
        assert len(real["losses"]) == len(zero["losses"]) > 4
        worst = max(abs(a - b) for a, b in zip(real["losses"], zero["losses"]))
        assert worst <= 1e-5, (rank, real["losses"], zero["losses"])
        assert real["skipped"] is zero["skipped"] is False  # optimizer.overflow
    return H.compare_saved(py, str(tmp_path / "real" / "model"), str(tmp_path / "zero" / "model"), 1e-5)


@pytest.mark.parametrize("stage", [2, 3])
def test_accelerate_deepspeed_plugin_matches_real_deepspeed(tmp_path, stage):
    py = H.venv_python()
    H.need_mpirun()
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(json.dumps(config(stage)))
    for which in ("real", "zero"):
        out = tmp_path / which
        out.mkdir()
        H.launch(which, ["--num_gpus", "2"],
                 [py, "-u", SCRIPT, "--out", str(out), "--plugin", str(cfg)], str(out))
    print(f"DeepSpeedPlugin stage {stage}: saved weights differ by at most {check(tmp_path, py)}")


def test_accelerate_launch_flags_on_zero_launch_match_accelerate_launch(tmp_path):
    """The reference is the real `accelerate launch` (torchrun) with the same flags."""
    import subprocess
    py = H.venv_python()
    H.need_mpirun()
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(json.dumps(config(3)))
    flags = ["--num_processes", "2", "--num_machines", "1", "--use_deepspeed",
             "--deepspeed_config_file", str(cfg), "--mixed_precision", "no",
             "--main_process_port", str(H.free_port())]
    (tmp_path / "real").mkdir()
    (tmp_path / "zero").mkdir()
    env = H.env_for("real")
    r = subprocess.run([os.path.join(os.path.dirname(py), "accelerate"), "launch"] + flags +
                       [SCRIPT, "--out", str(tmp_path / "real")], env=env, capture_output=True,
                       text=True, timeout=400, cwd=str(tmp_path / "real"))
    assert r.returncode == 0, r.stderr[-6000:]
    H.launch("zero", flags, [py, "-u", SCRIPT, "--out", str(tmp_path / "zero")],
             str(tmp_path / "zero"))
    print(f"accelerate launch flags: saved weights differ by at most {check(tmp_path, py)}")
