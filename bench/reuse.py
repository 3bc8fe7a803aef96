"""Each token computed once, on a game's successive turns: the real model's prompts as
self-play asks them, sampled with the local sampler's prefix cache, without it, and with
plain ``model.generate``; the seats' games trained with shared prefixes, without them, and
with a plain ``peft`` loop. SmolLM2-135M-Instruct (``make llm``), float32, on the CPU.

``--games`` tic-tac-toe games are played to the end by the model itself (the ``full``
observation through the chat template: each seat's prompt is its whole transcript, so a
seat's next prompt extends its previous prompt and answer; an answer that names no legal
move is replaced by a random legal move, so that every game goes on to its end). Every
round asks the seats to move in all live games at once. The prompts of the rounds are
recorded and asked again, round by round with the same seeds, of a sampler without the
cache (the same answers, to float rounding) and of ``model.generate`` (left-padded
batches, its own draws). Prompt tokens computed and reused are the samplers' own counts.

Training: each seat's game is one datum (its last prompt and answer; every answer of the
seat weighed, an advantage of +1 or -1 a seat), as the trainer merges a seat's turns. One
``forward_backward`` and ``optim_step`` with shared prefixes (``train_shared_prefix``),
without, and the plain loop of ``bench.realmodel`` on the same datums; the median of
``--rounds``.

    python -m bench.reuse [--model smollm2] [--games 8] [--max-tokens 6] [--rounds 2] [--json]
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from typing import Any

import torch
from tinker import types

from bench.common import emit, median, parser
from bench.realmodel import LEARNING_RATE, RANK, PlainPeftLoop, plain_generate


def play(
    sampler: Any, renderer: Any, games: int, max_tokens: int, seed: int
) -> tuple[list[list[types.ModelInput]], list[list[tuple[int, int]]], list[Any], float]:
    """Self-play ``games`` tic-tac-toe games with ``sampler``: the prompts of each round,
    which (game, seat) asked each one, every answer in order, and the seconds sampling."""
    from arena.renderers import seat_chat
    from arena.seatview import message_text
    from games.registry import make

    rng = random.Random(seed)
    sessions = [make("TicTacToe-v0", 2, seed=seed + g) for g in range(games)]
    rounds: list[list[types.ModelInput]] = []
    askers: list[list[tuple[int, int]]] = []
    answers: list[Any] = []
    seconds = 0.0
    stop = renderer.get_stop_sequences()
    while any(not s.done for s in sessions) and len(rounds) < 40:
        live = [(g, s.current_player()) for g, s in enumerate(sessions) if not s.done]
        prompts = [
            renderer.build_generation_prompt(seat_chat(sessions[g].seat_messages(p), p))
            for g, p in live
        ]
        found, took = sample_round(sampler, prompts, max_tokens, stop, seed=1000 * len(rounds))
        seconds += took
        for (g, p), sequence in zip(live, found, strict=True):
            message, _ = renderer.parse_response(list(sequence.tokens))
            text, legal = message_text(message), sessions[g].legal_moves(p) or ["[4]"]
            # An answer that names no legal move is replaced by a random one: the games go
            # on to the end, which is what this measures (a seat's successive turns).
            sessions[g].step(p, next((m for m in legal if m in text), rng.choice(legal)))
        rounds.append(prompts)
        askers.append(live)
        answers.extend(found)
    return rounds, askers, answers, seconds


def sample_round(
    sampler: Any, prompts: list[types.ModelInput], max_tokens: int, stop: Any, seed: int
) -> tuple[list[types.SampledSequence], float]:
    """One round's prompts sent at once (seeded per prompt): the answers and the seconds."""

    async def run() -> list[types.SampleResponse]:
        return await asyncio.gather(
            *(
                sampler.sample_async(
                    p,
                    1,
                    types.SamplingParams(
                        max_tokens=max_tokens, temperature=1.0, seed=seed + i, stop=stop
                    ),
                )
                for i, p in enumerate(prompts)
            )
        )

    started = time.perf_counter()
    responses = asyncio.run(run())
    return [r.sequences[0] for r in responses], time.perf_counter() - started


def seat_datums(
    rounds: Sequence[Sequence[types.ModelInput]],
    askers: Sequence[Sequence[tuple[int, int]]],
    answers: Sequence[Any],
    seed: int,
) -> list[types.Datum]:
    """One datum per seat's game: its last prompt and answer, every one of its answers
    that the last prompt repeats weighed with the seat's advantage (+1 or -1, seeded)."""
    rng = random.Random(seed)
    turns: dict[tuple[int, int], list[tuple[list[int], Any]]] = {}
    flat = iter(answers)
    for prompts, who in zip(rounds, askers, strict=True):
        for prompt, key in zip(prompts, who, strict=True):
            turns.setdefault(key, []).append((prompt.to_ints(), next(flat)))
    out = []
    for seat_turns in turns.values():
        last_prompt, last = seat_turns[-1]
        tokens = last_prompt + list(last.tokens)
        advantage = rng.choice((1.0, -1.0))
        old = [0.0] * len(tokens)
        adv = [0.0] * len(tokens)
        for prompt, answer in seat_turns:
            at, n = len(prompt), len(answer.tokens)
            if tokens[at : at + n] != list(answer.tokens):
                continue  # re-rendered differently: not weighed
            for k in range(n):  # position t predicts token t + 1
                old[at + k - 1] = float(answer.logprobs[k])
                adv[at + k - 1] = advantage
        n = len(tokens) - 1
        out.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={
                    "target_tokens": types.TensorData(data=tokens[1:], dtype="int64", shape=[n]),
                    "logprobs": types.TensorData(data=old[:n], dtype="float32", shape=[n]),
                    "advantages": types.TensorData(data=adv[:n], dtype="float32", shape=[n]),
                },
            )
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args_parser = parser(__doc__.splitlines()[0])
    args_parser.add_argument("--model", default="smollm2", help="the model (default: smollm2)")
    args_parser.add_argument("--games", type=int, default=8, help="games played at once")
    args_parser.add_argument("--max-tokens", type=int, default=6, help="tokens per answer")
    args = args_parser.parse_args(argv)

    from arena.renderers import RendererConfig
    from trainer.local import LocalModelConfig, load_model
    from trainer.local.sampler import LocalSamplingClient
    from trainer.local.service import LocalServiceClient

    loaded = load_model(LocalModelConfig(model_path=args.model, device="cpu"))
    renderer = RendererConfig(name="chat", tokenizer_path=args.model).build()
    reusing = LocalSamplingClient(loaded, prefix_cache_mb=1024)
    rounds, askers, answers, reuse_s = play(reusing, renderer, args.games, args.max_tokens, 0)
    stop = renderer.get_stop_sequences()
    plain = LocalSamplingClient(loaded, prefix_cache_mb=0)
    plain_s = sum(
        sample_round(plain, prompts, args.max_tokens, stop, seed=1000 * r)[1]
        for r, prompts in enumerate(rounds)
    )
    eos, pad = list(loaded.eos_token_ids), loaded.pad_token_id
    generate_s = sum(
        plain_generate(loaded.model, [p.to_ints() for p in prompts], args.max_tokens, pad, eos, r)[
            1
        ]
        for r, prompts in enumerate(rounds)
    )
    prompt_tokens = reusing.stats.prompt_tokens
    print(
        f"{args.games} games, {len(rounds)} rounds, {len(answers)} answers, "
        f"{prompt_tokens} prompt tokens: computed {reusing.stats.tokens_computed} with the "
        f"prefix cache ({reusing.stats.tokens_reused} reused), {plain.stats.tokens_computed} "
        "without",
        flush=True,
    )
    print(
        f"sampling: prefix cache {reuse_s:.1f} s, no cache {plain_s:.1f} s "
        f"({plain_s / reuse_s:.2f}x), generate {generate_s:.1f} s ({generate_s / reuse_s:.2f}x)",
        flush=True,
    )

    data = seat_datums(rounds, askers, answers, seed=0)
    tokens = sum(d.model_input.length for d in data)
    timings: dict[str, list[float]] = {"shared": [], "plain": [], "peft": []}
    counts: dict[str, float] = {}
    clients = {}
    for name, share in (("shared", True), ("plain", False)):
        config = LocalModelConfig(device="cpu", train_shared_prefix=share)
        clients[name] = LocalServiceClient(config).create_lora_training_client(
            args.model, rank=RANK
        )
    loop = PlainPeftLoop(loaded.model, pad)
    budget = clients["plain"].result().micro_batch_tokens
    for r in range(args.rounds + 1):  # the first round warms up
        for name in ("shared", "plain"):
            client = clients[name].result()
            t0 = time.perf_counter()
            out = client.forward_backward(data, "importance_sampling").result()
            client.optim_step(types.AdamParams(learning_rate=LEARNING_RATE)).result()
            if r:
                timings[name].append(time.perf_counter() - t0)
            if name == "shared":
                counts = out.metrics
        t0 = time.perf_counter()
        loop.step(data, budget)
        if r:
            timings["peft"].append(time.perf_counter() - t0)
    t = {k: median(v) for k, v in timings.items()}
    computed = counts.get("tokens_computed:sum", float(tokens))
    print(
        f"training {len(data)} datums, {tokens} tokens: shared prefixes {t['shared']:.1f} s "
        f"({computed:.0f} tokens computed), without {t['plain']:.1f} s "
        f"({t['plain'] / t['shared']:.2f}x), peft loop {t['peft']:.1f} s "
        f"({t['peft'] / t['shared']:.2f}x); torch threads {torch.get_num_threads()}"
    )
    emit(
        {
            "model": args.model,
            "games": args.games,
            "rounds": len(rounds),
            "answers": len(answers),
            "prompt_tokens": prompt_tokens,
            "sampler_tokens_computed": reusing.stats.tokens_computed,
            "sampler_tokens_reused": reusing.stats.tokens_reused,
            "sampling_s": round(reuse_s, 2),
            "sampling_no_cache_s": round(plain_s, 2),
            "generate_s": round(generate_s, 2),
            "train_tokens": tokens,
            "train_tokens_computed": computed,
            "train_shared_s": round(t["shared"], 2),
            "train_plain_s": round(t["plain"], 2),
            "train_peft_s": round(t["peft"], 2),
        },
        args.json,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
