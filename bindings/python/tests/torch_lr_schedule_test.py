"""zero.torch's learning rates are the runtime's (zero.Engine.lr_for_step,
C ABI zero_engine_lr_for_step): for every scheduler the runtime parses, over
steps that cross the warmup and the end of the schedule, against DeepSpeed's
runtime/lr_schedules.py written out below in its own stateful shape (the
scheduler steps after each optimizer step; the lr at construction is its
value at last_batch_iteration -1)."""
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402
import zero  # noqa: E402
import zero.torch as zt  # noqa: E402


class DeepSpeedSchedule:
    """WarmupLR, WarmupDecayLR and WarmupCosineLR as DeepSpeed's classes
    compute them (inverse_log_warm_up times log, the warmup clamp at 2)."""

    def __init__(self, sched, lr):
        p = dict((sched or {}).get("params") or {})
        self.type = (sched or {}).get("type")
        self.org_lr = lr
        self.min_lr = p.get("warmup_min_lr", 0.0)
        self.max_lr = lr if p.get("warmup_max_lr") == "auto" else p.get("warmup_max_lr", 0.001)
        self.warmup = max(2, p.get("warmup_num_steps", 1000))
        self.inverse_log_warm_up = 1.0 / math.log(self.warmup)
        self.linear = p.get("warmup_type", "log") == "linear"
        self.total = p.get("total_num_steps", -1)
        self.warmup_min_ratio = p.get("warmup_min_ratio", 0.0)
        self.cos_min_ratio = p.get("cos_min_ratio", 0.0001)
        self.last_batch_iteration = -1

    def step(self):
        self.last_batch_iteration += 1

    def _warmup_gamma(self):
        it = self.last_batch_iteration
        return it / self.warmup if self.linear else self.inverse_log_warm_up * math.log(it + 1)

    def get_lr(self):
        it = self.last_batch_iteration
        if self.type is None:
            return self.org_lr
        if self.type == "WarmupCosineLR":
            if it < 0:
                return 0.0
            if it < self.warmup:
                ratio = self.warmup_min_ratio + self._warmup_gamma() * (1.0 - self.warmup_min_ratio)
            else:
                real_last = it - self.warmup + 1
                real_total = self.total - self.warmup
                ratio = (1 + math.cos(math.pi * real_last / real_total)) / 2
                ratio = max(0.0, self.cos_min_ratio + (1.0 - self.cos_min_ratio) * ratio)
            return self.org_lr * ratio
        if it < 0:
            return self.min_lr
        if it < self.warmup:
            gamma = self._warmup_gamma()
        elif self.type == "WarmupLR":
            gamma = 1.0
        else:
            gamma = max(0.0, float(self.total - it) / float(max(1.0, self.total - self.warmup)))
        return self.min_lr + (self.max_lr - self.min_lr) * gamma


SCHEDULES = [
    None,
    {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-4, "warmup_max_lr": 1e-3,
                                    "warmup_num_steps": 5}},
    {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": "auto",
                                    "warmup_num_steps": 4, "warmup_type": "linear"}},
    {"type": "WarmupLR", "params": {"warmup_min_lr": 2e-4, "warmup_max_lr": 1e-3,
                                    "warmup_num_steps": 1}},  # clamped to 2
    {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 1e-5, "warmup_max_lr": 2e-3,
                                         "warmup_num_steps": 3, "total_num_steps": 8}},
    {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 3, "total_num_steps": 8,
                                         "warmup_type": "linear"}},
    {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 3, "total_num_steps": 9}},
    {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 4, "total_num_steps": 10,
                                          "warmup_min_ratio": 0.1, "cos_min_ratio": 0.05,
                                          "warmup_type": "linear"}},
]
STEPS = 12  # past every warmup and total_num_steps above


def _id(s):
    return "none" if s is None else f"{s['type']}-{'-'.join(map(str, s['params'].values()))}"


@pytest.mark.parametrize("sched", SCHEDULES, ids=_id)
def test_zero_torch_lrs_are_the_runtimes_and_deepspeeds(sched):
    cfg = dict(torch_model.ds_config(1))
    if sched is not None:
        cfg["scheduler"] = sched
    ref = DeepSpeedSchedule(sched, torch_model.LR)
    engine, optimizer, _, lr_scheduler = zt.initialize(
        model=torch_model.make_model(), config=cfg)
    with engine:
        assert (lr_scheduler is None) == (sched is None)
        for t, (x, y) in enumerate(torch_model.make_data(STEPS)):
            want = engine.get_lr()[0]
            assert want == engine.zero.lr_for_step(t)
            assert want == pytest.approx(ref.get_lr(), rel=1e-12, abs=1e-18), t
            assert optimizer.param_groups[0]["lr"] == want
            if lr_scheduler is not None:
                assert lr_scheduler.get_last_lr() == [want]
                assert lr_scheduler.last_batch_iteration == t - 1
            engine.backward(torch_model.loss_fn(engine(x), y))
            info = engine.step()
            assert info.boundary and info.global_step == t + 1
            assert info.lr == want  # the update ran with the lr zero.torch reported
            ref.step()
        # Any step may be asked, taken or not; a negative one is refused.
        ref = DeepSpeedSchedule(sched, torch_model.LR)
        for t in range(40):
            assert engine.zero.lr_for_step(t) == pytest.approx(ref.get_lr(), rel=1e-12,
                                                               abs=1e-18), t
            ref.step()
        with pytest.raises(zero.InvalidArgumentError, match="step -1 is negative"):
            engine.zero.lr_for_step(-1)

