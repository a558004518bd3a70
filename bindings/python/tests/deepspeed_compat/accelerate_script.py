"""A tiny causal-LM training loop with accelerate and DeepSpeed, unchanged
whichever ``deepspeed`` is importable (zero's layer or the real one).

    accelerate_script.py --out OUT [--plugin DS_CONFIG]

--plugin: ``Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=...))``;
without it a plain ``Accelerator()`` configured by the launcher's variables
(``accelerate launch --use_deepspeed --deepspeed_config_file ...``, or
zero-launch with the same flags). Writes each rank's micro-batch losses and
the saved model to OUT."""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_trainer_script import Tokens, tiny_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--plugin")
    ap.add_argument("--model", default="gpt2")
    a = ap.parse_args()
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin, DummyOptim, DummyScheduler

    if a.plugin:
        accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=a.plugin))
    else:
        accelerator = Accelerator()
    model = tiny_model(a.model)
    loader = torch.utils.data.DataLoader(Tokens(), batch_size=2, shuffle=False)
    optimizer = DummyOptim(model.parameters(), lr=1e-2)
    scheduler = DummyScheduler(optimizer, total_num_steps=4, warmup_num_steps=2)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    losses = []
    model.train()
    for batch in loader:
        with accelerator.accumulate(model):
            loss = model(**batch).loss
            losses.append(float(loss.detach()))
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    accelerator.wait_for_everyone()
    state = accelerator.get_state_dict(model)
    accelerator.unwrap_model(model).save_pretrained(
        os.path.join(a.out, "model"), is_main_process=accelerator.is_main_process,
        save_function=accelerator.save, state_dict=state)
    import deepspeed
    rank = torch.distributed.get_rank()
    with open(os.path.join(a.out, f"losses.{rank}.json"), "w") as f:
        json.dump({"losses": losses, "deepspeed": deepspeed.__file__,
                   "world": torch.distributed.get_world_size(),
                   "skipped": bool(optimizer.step_was_skipped)}, f)


if __name__ == "__main__":
    main()
