"""The local sampler: tokens/s with 64 envs' requests batched vs one request at a time.

The default local model (byte-level GPT-2, random weights) and 64 tic-tac-toe prompts of
60 to 200 bytes, built with ``ByteRenderer`` as the envs build them. Batched: all requests
are sent at once (``asyncio.gather`` of ``sample_async``), as concurrent envs send them,
and the sampler serves them in shared forward passes. Sequential: the same requests, each
awaited before the next is sent. Every request is seeded, so both modes sample the same
tokens; tokens/s counts the tokens actually sampled. Rounds alternate the two modes; the
median of each is kept.

    python -m bench.sampler [--envs 64] [--max-tokens 8] [--threads N] [--rounds 3] [--json]
"""

from __future__ import annotations

import asyncio
import random
import time

import torch
from tinker import types

from arena.renderers import ByteRenderer, ByteTokenizer
from bench.common import emit, median, parser
from trainer.local import LocalModelConfig, LocalSamplingClient, create_local_sampling_client


def tictactoe_prompt(rng: random.Random, renderer: ByteRenderer) -> types.ModelInput:
    """A tic-tac-toe turn as an env shows it, 60 to 200 bytes long."""
    cells = [rng.choice(["X", "O", " ", " "]) for _ in range(9)]
    mark = rng.choice("XO")
    free = [str(i) for i, c in enumerate(cells) if c == " "] or ["4"]
    rows = [
        "|".join(c if c != " " else str(3 * r + k) for k, c in enumerate(cells[3 * r :][:3]))
        for r in range(3)
    ]
    parts = [
        f"[GAME] You are '{mark}'.",
        "Board:\n" + "\n-+-+-\n".join(rows),
        "Moves: " + ", ".join(f"[{m}]" for m in free),
    ]
    if rng.random() < 0.7:
        parts.insert(1, f"[Player {rng.randint(0, 1)}] [{rng.choice(free)}]")
    if rng.random() < 0.5:
        parts.insert(0, "[GAME] Tic-tac-toe: get three in a row. Answer with a cell, e.g. [4].")
    text = "\n".join(parts)[:196]
    return renderer.build_generation_prompt([{"role": "user", "content": text}])


def prompts(num_envs: int, seed: int) -> list[types.ModelInput]:
    """``num_envs`` prompts (seeded)."""
    rng = random.Random(seed)
    renderer = ByteRenderer()
    return [tictactoe_prompt(rng, renderer) for _ in range(num_envs)]


def params(max_tokens: int, seed: int) -> types.SamplingParams:
    """Seeded sampling at temperature 1, stopping at EOS or ``max_tokens``."""
    return types.SamplingParams(
        max_tokens=max_tokens, temperature=1.0, seed=seed, stop=[ByteTokenizer.EOS]
    )


async def batched(client: LocalSamplingClient, obs: list[types.ModelInput], max_tokens: int) -> int:
    """Send every request at once; return the tokens sampled."""
    responses = await asyncio.gather(
        *(client.sample_async(ob, 1, params(max_tokens, i)) for i, ob in enumerate(obs))
    )
    return sum(len(r.sequences[0].tokens) for r in responses)


async def sequential(
    client: LocalSamplingClient, obs: list[types.ModelInput], max_tokens: int
) -> int:
    """Send the requests one at a time; return the tokens sampled."""
    total = 0
    for i, ob in enumerate(obs):
        response = await client.sample_async(ob, 1, params(max_tokens, i))
        total += len(response.sequences[0].tokens)
    return total


def measure(
    client: LocalSamplingClient, mode: str, obs: list[types.ModelInput], max_tokens: int
) -> tuple[float, int]:
    """Tokens/s of one run in ``mode`` and the forward passes it took."""
    run = batched if mode == "batched" else sequential
    passes = client.stats.forward_passes
    started = time.perf_counter()
    tokens = asyncio.run(run(client, obs, max_tokens))
    return tokens / (time.perf_counter() - started), client.stats.forward_passes - passes


def main() -> None:
    args_parser = parser(__doc__.splitlines()[0])
    args_parser.add_argument("--envs", type=int, default=64, help="concurrent requests")
    args_parser.add_argument("--max-tokens", type=int, default=8, help="tokens per request")
    args_parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's own)"
    )
    args = args_parser.parse_args()
    config = LocalModelConfig(torch_threads=args.threads, max_batch_size=max(64, args.envs))
    client = create_local_sampling_client(config)
    obs = prompts(args.envs, seed=0)
    lengths = [ob.length for ob in obs]
    measure(client, "batched", obs[:4], args.max_tokens)  # warm-up
    rates: dict[str, list[float]] = {"batched": [], "sequential": []}
    passes: dict[str, int] = {}
    for _ in range(args.rounds):
        for mode in ("batched", "sequential"):
            rate, passes[mode] = measure(client, mode, obs, args.max_tokens)
            rates[mode].append(rate)
    batched_tps, sequential_tps = median(rates["batched"]), median(rates["sequential"])
    ratio = batched_tps / sequential_tps
    print(
        f"{args.envs} envs, prompts {min(lengths)}-{max(lengths)} tokens, "
        f"max_tokens {args.max_tokens}, torch threads {torch.get_num_threads()}"
    )
    print(
        f"batched {batched_tps:8.1f} tokens/s ({passes['batched']} forward passes)   "
        f"sequential {sequential_tps:8.1f} tokens/s ({passes['sequential']} forward passes)   "
        f"ratio {ratio:.2f}"
    )
    emit(
        {
            "envs": args.envs,
            "max_tokens": args.max_tokens,
            "torch_threads": torch.get_num_threads(),
            "batched_tokens_per_s": round(batched_tps, 1),
            "sequential_tokens_per_s": round(sequential_tps, 1),
            "batched_forward_passes": passes["batched"],
            "sequential_forward_passes": passes["sequential"],
            "ratio": round(ratio, 3),
        },
        args.json,
    )


if __name__ == "__main__":
    main()
