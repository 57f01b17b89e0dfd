# SPDX-License-Identifier: MIT
"""Write a tiny model with random weights into a folder, from a fixed seed;
nothing is downloaded. llama (the default): 2 layers, hidden size 64, 2
heads of 32 (both KV heads), vocabulary 1024, float32. gemma2: a hybrid of
2 sliding-window layers (window 64 tokens) and 2 full-attention layers,
alternating, 2 query heads of 32 and 1 KV head: vLLM's hybrid allocator
gives it a sliding and a full KV cache group. qwen3_next: Qwen3-Next's
linear attention (Gated DeltaNet, one key and one value head of 128, the
smallest head vLLM's CPU kernels take) and full attention, 2 layers each,
alternating, 4 small experts (vLLM's Qwen3-Next needs a mixture of
experts), bfloat16: vLLM gives it a state (MambaSpec) and a full KV cache
group.

usage: make_model.py DIR [llama|gemma2|qwen3_next]
"""
import sys

import torch
from transformers import (Gemma2Config, Gemma2ForCausalLM, LlamaConfig, LlamaForCausalLM,
                          Qwen3NextConfig, Qwen3NextForCausalLM)

WINDOW = 64


def make_gemma2(path):
    torch.manual_seed(1234)
    cfg = Gemma2Config(vocab_size=1024, hidden_size=64, intermediate_size=128,
                       num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
                       head_dim=32, max_position_embeddings=2048, torch_dtype="float32",
                       bos_token_id=1, eos_token_id=2, pad_token_id=0,
                       # vLLM's Gemma 2 has no lm_head of its own
                       tie_word_embeddings=True, initializer_range=INIT_RANGE,
                       sliding_window=WINDOW,
                       layer_types=["sliding_attention", "full_attention"] * 2)
    Gemma2ForCausalLM(cfg).save_pretrained(path, safe_serialization=True)


INIT_RANGE = 0.3


def make_qwen3_next(path):
    torch.manual_seed(1234)
    cfg = Qwen3NextConfig(vocab_size=1024, hidden_size=128, intermediate_size=128,
                          num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
                          head_dim=64, linear_num_key_heads=1, linear_num_value_heads=1,
                          linear_key_head_dim=128, linear_value_head_dim=128,
                          linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
                          moe_intermediate_size=64, shared_expert_intermediate_size=64,
                          max_position_embeddings=2048, torch_dtype="bfloat16",
                          bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                          initializer_range=INIT_RANGE,
                          layer_types=["linear_attention", "full_attention"] * 2)
    Qwen3NextForCausalLM(cfg).to(torch.bfloat16).save_pretrained(path, safe_serialization=True)


def make(path):
    torch.manual_seed(1234)
    cfg = LlamaConfig(vocab_size=1024, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                      max_position_embeddings=2048, torch_dtype="float32", bos_token_id=1,
                      eos_token_id=2, tie_word_embeddings=False,
                      # wide weights: clear argmax margins, so greedy tokens do not
                      # hang on rounding differences between prefill chunkings
                      initializer_range=0.3)
    LlamaForCausalLM(cfg).save_pretrained(path, safe_serialization=True)


if __name__ == "__main__":
    kind = sys.argv[2] if len(sys.argv) > 2 else "llama"
    {"llama": make, "gemma2": make_gemma2, "qwen3_next": make_qwen3_next}[kind](sys.argv[1])
