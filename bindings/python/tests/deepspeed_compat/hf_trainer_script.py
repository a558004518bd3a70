"""A tiny causal-LM fine-tune with HF Trainer and ``deepspeed=ds_config.json``,
unchanged whichever ``deepspeed`` is importable (zero's layer or the real
one). Writes per-step losses (rank 0) and the saved model to OUT.

    hf_trainer_script.py --deepspeed DS_CONFIG --out OUT [--model gpt2|llama]
"""
import argparse
import json
import os

import torch


def tiny_model(kind):
    import transformers
    torch.manual_seed(0)
    if kind == "llama":
        cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
                                       num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, max_position_embeddings=32)
        return transformers.LlamaForCausalLM(cfg)
    cfg = transformers.GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=32,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(cfg)


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n=32, length=12, vocab=96):
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepspeed", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--weight_decay", type=float, default=0.0)
    ap.add_argument("--local_rank", type=int, default=-1)  # what `deepspeed` passes
    a = ap.parse_args()
    import transformers

    losses = []  # this rank's loss of every micro-batch, full precision

    class Recording(transformers.Trainer):
        def compute_loss(self, model, inputs, *a, **kw):
            out = super().compute_loss(model, inputs, *a, **kw)
            loss = out[0] if isinstance(out, tuple) else out
            losses.append(float(loss.detach()))
            return out

    model = tiny_model(a.model)
    args = transformers.TrainingArguments(
        output_dir=os.path.join(a.out, "trainer"), per_device_train_batch_size=2,
        gradient_accumulation_steps=json.load(open(a.deepspeed)).get("gradient_accumulation_steps", 1),
        max_steps=a.steps, learning_rate=1e-2, warmup_steps=2, logging_steps=1, weight_decay=a.weight_decay,
        save_strategy="no", report_to=[], deepspeed=a.deepspeed, seed=0,
        dataloader_drop_last=True, disable_tqdm=True, use_cpu=not torch.cuda.is_available())
    trainer = Recording(model=model, args=args, train_dataset=Tokens())
    trainer.train()
    trainer.save_model(os.path.join(a.out, "model"))
    import deepspeed
    rank = torch.distributed.get_rank()
    with open(os.path.join(a.out, f"losses.{rank}.json"), "w") as f:
        json.dump({"losses": losses, "deepspeed": deepspeed.__file__,
                   "world": torch.distributed.get_world_size()}, f)


if __name__ == "__main__":
    main()
