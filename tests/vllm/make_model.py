# SPDX-License-Identifier: MIT
"""Write a tiny Llama-architecture model with random weights into a folder:
2 layers, hidden size 64, 2 heads of 32 (both KV heads), vocabulary 1024,
float32. Made here from a fixed seed; nothing is downloaded.

usage: make_model.py DIR
"""
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM


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
    make(sys.argv[1])
