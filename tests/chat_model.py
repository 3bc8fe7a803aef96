"""A small Hugging Face model directory with a real chat-template tokenizer, built offline.

Hosted models all have a chat template, so the tests of the hosted path need one too: a
byte-level BPE tokenizer trained here (``tokenizers``) on game text, Qwen's chat markup
(``<|im_start|>``, ``<|im_end|>``) as special tokens, a Jinja chat template in Qwen's
layout, and a tiny GPT-2 over that vocabulary. Nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""Qwen's chat layout."""

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

_CORPUS = [
    "[GAME] You are Player 0 in Tic Tac Toe. Your goal is to win three in a row.",
    "[GAME] You are Player 1 in Tic Tac Toe. On your turn, you mark an empty square.",
    " 0 | 1 | 2 \n---+---+---\n 3 | 4 | 5 \n---+---+---\n 6 | 7 | 8 ",
    " X | O | X \n O | X | O \n Available Moves: '[0]', '[1]', '[2]', '[3]', '[4]' ",
    "Submit [0], [1], [2], [3], [4], [5], [6], [7] or [8]. Player 0 made a move. [check] "
    "[bet] [call] [fold] Kuhn Poker card J Q K chips pot",
    "user assistant system Invalid move. The game is over. Player wins. Draw.",
]


def write_chat_tokenizer(path: Path) -> Any:
    """Train the tokenizer (with ``chat_template``), save it to ``path`` and return it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    core.train_from_iterator(_CORPUS * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(path)
    return tokenizer


def write_chat_model_dir(path: Path, *, n_positions: int = 2048) -> None:
    """Write the tokenizer (with ``chat_template``) and a tiny GPT-2 to ``path``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = write_chat_tokenizer(path)
    settings = dict(
        vocab_size=len(tokenizer),
        n_layer=1,
        n_embd=32,
        n_head=2,
        n_positions=n_positions,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|im_start|>"),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(**settings)).save_pretrained(path)
