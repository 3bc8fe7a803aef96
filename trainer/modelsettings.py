"""Settings that fit a real model: what ``arena train --model NAME`` uses where the command
line leaves a setting at its default.

The defaults of ``TrainConfig`` are the built-in model's (a 3-layer GPT-2 that takes a
thousand steps a minute). A real language model on the local backend (``--model smollm2``,
a GGUF file, a Hugging Face directory) takes seconds to minutes a step, starts out
answering mostly invalid moves, and holds gigabytes in memory; the table below is what
worked for SmolLM2-135M (docs/training.md, "Training it"; docs/benchmarks.md, "The real
model"), per device kind. A setting given on the command line is kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

from trainer.config import TrainConfig, split_games
from trainer.familydefaults import FAMILY_DEFAULTS, game_family

REAL_MODEL_SETTINGS: dict[str, Any] = {
    "lora_rank": 16,
    "learning_rate": 2e-4,
    "max_tokens": 6,
    "observation_format": "compact",
    "sample_timeout_s": 1800.0,
    "move_timeout_s": 1800.0,
    "eval_every": 10,
    "eval_games": 100,
    "edge_eval_games": 400,
    "constant_groups_batch_baseline": True,
}
"""A real model on any device. Why each one:

- the league (``--opponents league``, as for the built-in model): warmed up on the compact
  view, the model answers legal moves from the start, so its games against the bots and
  its past selves teach; in pure self-play (``--opponents self``) it turned deterministic
  within 13 steps and played one game 16 times a step, every group alike (steps 13-22 of
  its 10 minutes taught nothing);
- ``lora_rank 16`` with ``learning_rate 2e-4`` and the exact KL toward a slowly moving
  magnet at the game family's coefficients (``FAMILY_DEFAULTS``, as for the built-in
  model): at 1e-3 without it the compact model played better for 20 steps (wins against
  random 0.28 -> 0.62), then its answers broke (36 % invalid at step 30, every game lost);
  at 5e-4 each optimizer step moved the policy by 0.8-1.6 nats an answer
  (``policy/step_kl``) and its entropy fell from 0.95 to 0.25 in 4 steps;
- ``max_tokens 6``: a move (``[4]``) and the end-of-turn token are 4 tokens;
- ``observation_format compact`` and a warm-up of 16 supervised steps on random legal moves
  (``COMPACT_WARMUP``): about 40 tokens a prompt, most of them the chat template's system
  prompt (computed once), against 219-820 for the whole transcript (``full``) and 220-350
  for the rules and the latest board (``last``); measured on tic-tac-toe (docs/benchmarks.md,
  "The real model: observation formats"): after the warm-up it starts where ``full`` got to
  after 9 steps, and plays 2.5x the games a minute;
- move and sampling clocks of 30 minutes: an evaluation asks hundreds of answers at once;
- evaluations of 100 games every 10 steps, 400 at the start and the end;
- ``constant_groups_batch_baseline``: 16 games a step fall often into groups whose games
  all end alike (the same invalid answer in every game): centred on the batch they
  still teach."""

DEVICE_SETTINGS: dict[str, dict[str, Any]] = {
    "cpu": {"group_size": 4, "batch_size": 4, "max_steps_off_policy": 0},
    "gpu": {"group_size": 8, "batch_size": 8},
}
"""By device kind: games a step, 16 on a CPU (a step of 16 games took 10 s to 5 minutes on
2 cores), 64 on a GPU; and on a CPU the step's games play before it trains, not while the
previous step trains: sampler and trainer each want every core, and two torch thread
teams on the same cores slow each other down more than they overlap."""


COMPACT_WARMUP: dict[str, Any] = {"warmup_steps": 16, "warmup_games": 200}
"""A real model given the compact view (``--observation-format compact``) first learns its
answer format, as the built-in model does, on random legal moves (64 a step); with
``--sft-from`` the recorded answers teach it instead."""


def device_kind(device: str) -> str:
    """``gpu`` where ``device`` names or (``auto``) finds a CUDA GPU or Apple's MPS, else
    ``cpu``."""
    if device.startswith(("cuda", "mps")):
        return "gpu"
    if device == "auto":
        import torch

        mps = getattr(torch.backends, "mps", None)
        if torch.cuda.is_available() or (mps is not None and mps.is_available()):
            return "gpu"
    return "cpu"


def fit_to_model(
    values: Mapping[str, Any], given: Collection[str] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``values`` (``TrainConfig`` settings, as the command line gives them) with the real
    model's settings where a setting was not ``given`` (None: where it is at its field's
    default), and the settings chosen that way. Unchanged for the built-in model and the
    hosted backend."""
    out = dict(values)
    backend = out.get("backend", "local")
    if backend != "local" or not out.get("model"):
        return out, {}
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}

    def kept(name: str) -> bool:
        return name in given if given is not None else out.get(name) != defaults[name]

    chosen: dict[str, Any] = {}
    device = DEVICE_SETTINGS[device_kind(str(out.get("device", "auto")))]
    for name, value in {**REAL_MODEL_SETTINGS, **device}.items():
        if not kept(name):
            out[name] = chosen[name] = value
    family = FAMILY_DEFAULTS[game_family(split_games(str(out.get("game_id", "")))[0])]
    for name in ("kl_reverse_coef", "kl_forward_coef", "magnet_rate"):
        if not kept(name):
            out[name] = chosen[name] = getattr(family, name)
    # chosen or given, the compact format is learnt (from the recorded answers with sft_from)
    if out.get("observation_format") == "compact" and not out.get("sft_from"):
        for name, value in COMPACT_WARMUP.items():
            if not kept(name):
                out[name] = chosen[name] = value
    return out, chosen


def settings_line(model: str, device: str, chosen: Mapping[str, Any]) -> str:
    """One line naming the settings chosen for the model (``arena train`` prints it)."""
    shown = ", ".join(f"--{k.replace('_', '-')} {_text(v)}" for k, v in chosen.items())
    return f"settings for {model} on {device_kind(device)}: {shown} (any of them can be given)"


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and value >= 10:
        return str(int(value))
    return str(value)
