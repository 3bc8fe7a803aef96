"""Tiny models of real open architectures, saved as Hugging Face directories, built offline.

``write_tiny_model_dir(path, "llama")`` writes a Llama-, Qwen2-, Qwen3- or GPT-2-architecture
causal LM of 100,000 to 260,000 parameters (random weights, seeded) with the chat
tokenizer of ``tests.chat_model`` (a byte-level BPE trained here with ``tokenizers``, Qwen's
chat markup and template). Nothing is downloaded; the directory loads with
``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tests.chat_model import write_chat_tokenizer

ARCHITECTURES = ("llama", "qwen2", "qwen3", "gpt2")


def tiny_config(arch: str, vocab_size: int, bos: int, eos: int, pad: int, **overrides: Any) -> Any:
    """A transformers config of ``arch`` with 2 layers, hidden size 64 (Qwen2 and
    Qwen3 about 100k parameters over the 400-token vocabulary, Llama 125k with its own
    output layer, GPT-2 257k with its 2,048 learned positions)."""
    from transformers import GPT2Config, LlamaConfig, Qwen2Config, Qwen3Config

    ids = dict(bos_token_id=bos, eos_token_id=eos, pad_token_id=pad, vocab_size=vocab_size)
    if arch == "gpt2":
        settings: dict[str, Any] = dict(n_layer=2, n_embd=64, n_head=4, n_positions=2048)
        return GPT2Config(**{**ids, **settings, **overrides})
    common: dict[str, Any] = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=arch != "llama",
    )
    if arch == "llama":
        return LlamaConfig(**{**ids, **common, **overrides})
    if arch == "qwen2":
        return Qwen2Config(**{**ids, **common, **overrides})
    if arch == "qwen3":
        return Qwen3Config(**{**ids, **common, "head_dim": 16, **overrides})
    raise ValueError(f"unknown architecture {arch!r}; choose {', '.join(ARCHITECTURES)}")


def write_tiny_model_dir(path: Path, arch: str, *, seed: int = 0, **overrides: Any) -> Path:
    """Write the chat tokenizer and a tiny ``arch`` model to ``path``; returns ``path``."""
    from transformers import AutoModelForCausalLM

    tokenizer = write_chat_tokenizer(path)
    config = tiny_config(
        arch,
        len(tokenizer),
        tokenizer.convert_tokens_to_ids("<|im_start|>"),
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
        **overrides,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(path)
    return path
