"""Tiny Hugging Face models built from configs (no hub access): the stock
model classes at a few thousand params, dropout off so training compares
exactly with plain torch."""
import warnings

import torch

warnings.filterwarnings("ignore", message=".*GenerationMixin.*")

VOCAB = 64


def _tf():
    import transformers
    transformers.logging.set_verbosity_error()
    return transformers


def llama():
    tf = _tf()
    return tf.AutoModelForCausalLM.from_config(tf.LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64))


def mistral():
    tf = _tf()
    return tf.AutoModelForCausalLM.from_config(tf.MistralConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
        sliding_window=None))


def gpt2():
    tf = _tf()
    return tf.AutoModelForCausalLM.from_config(tf.GPT2Config(
        vocab_size=VOCAB, n_embd=16, n_layer=2, n_head=2, n_positions=64,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def opt():
    tf = _tf()
    return tf.AutoModelForCausalLM.from_config(tf.OPTConfig(
        vocab_size=VOCAB, hidden_size=16, ffn_dim=32, num_hidden_layers=2,
        num_attention_heads=2, max_position_embeddings=64, word_embed_proj_dim=16,
        dropout=0.0, attention_dropout=0.0))


def bert():
    tf = _tf()
    return tf.BertForMaskedLM(tf.BertConfig(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def t5():
    tf = _tf()
    return tf.T5ForConditionalGeneration(tf.T5Config(
        vocab_size=VOCAB, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_heads=2,
        dropout_rate=0.0, decoder_start_token_id=0))


BUILDERS = {"llama": llama, "gpt2": gpt2, "bert": bert, "t5": t5, "opt": opt}
CAUSAL = ("llama", "gpt2", "opt")


def batch(name, ids):
    """Model inputs with a loss for token ids ``ids`` (rows x len)."""
    if name == "t5":
        return {"input_ids": ids, "labels": ids.flip(1)}
    return {"input_ids": ids, "labels": ids}


def seeded(build, seed=0):
    torch.manual_seed(seed)
    return build()
