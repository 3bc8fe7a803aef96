"""How close is ``arena train`` to a plain PyTorch loop, on a quiet and on a busy machine?

Two figures, each a ratio against a baseline written here and run in the same process:

- **warm-up steps/s**: arena's warm-up (``trainer.warmup.warm_up`` on the local training
  client: datums in, ``forward_backward``, ``optim_step``) against a plain loop that trains
  the same model on the same examples (pre-padded tensors, one pass of 64, AdamW);
- **RL games/s**: arena's RL steps (``Trainer``, self-play on TicTacToe-v0, 8 groups of 8
  games, the local default model from the same warmed-up weights, no evaluation, the
  defaults otherwise: the KL penalty against the warmed-up weights) against a plain loop
  that plays the same games (a tic-tac-toe board in Python, the same compact prompts, every
  waiting game sampled in one batch with a KV cache), centres rewards per seat and group,
  runs the same reference pass (the frozen warmed-up weights score every sampled token;
  the KL penalty joins the advantages as the cookbook adds it) and trains with the same
  importance-sampling loss, no env stack;
- **RL games/s with branching**: arena's RL steps with ``--branches 4 --branch-points 2``
  against the same plain loop (which does not branch): the continuations' sampling is the
  price of per-move credit, and it is counted here (games/s counts the training games).

Then the same with one competing CPU-bound process running (started here), to show how
each slows down when the machine is busy.

    python -m bench.train [--rl-steps 12] [--warmup-steps 60] [--no-busy] [--json]
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from bench.common import emit
from bench.common import parser as bench_parser
from trainer.config import TrainConfig
from trainer.local import LocalModelConfig
from trainer.local.config import load_model

BOS, EOS, PAD = 256, 257, 258
LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def _spin() -> None:  # pragma: no cover - runs in the competing process
    while True:
        pass


@contextlib.contextmanager
def busy(enabled: bool) -> Iterator[None]:
    """One competing CPU-bound process while the block runs."""
    if not enabled:
        yield
        return
    process = multiprocessing.get_context("spawn").Process(target=_spin, daemon=True)
    process.start()
    try:
        time.sleep(0.5)
        yield
    finally:
        process.terminate()
        process.join()


# -- the plain loop -----------------------------------------------------------------------------


def prompt_tokens(board: list[str], mark: str) -> list[int]:
    """The compact tic-tac-toe prompt, as arena's byte renderer lays it out."""
    cells = "".join(c if c else str(i) for i, c in enumerate(board))
    return [BOS, *f"U:{mark}:{cells}\nA:".encode()]


def winner(board: list[str]) -> str:
    for a, b, c in LINES:
        if board[a] and board[a] == board[b] == board[c]:
            return board[a]
    return ""


@torch.no_grad()
def sample(
    model: Any, prompts: list[list[int]], max_tokens: int, generator: torch.Generator
) -> list[tuple[list[int], list[float]]]:
    """Batched sampling with a KV cache, left-padded prompts; stops at EOS."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    logits, cache = out.logits[:, -1].float(), out.past_key_values
    next_pos = mask.sum(dim=1, keepdim=True)
    tokens: list[list[int]] = [[] for _ in prompts]
    logprobs: list[list[float]] = [[] for _ in prompts]
    done = torch.zeros(len(prompts), dtype=torch.bool)
    for _ in range(max_tokens):
        logp = torch.log_softmax(logits, dim=-1)
        chosen = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)
        picked = logp.gather(1, chosen[:, None]).squeeze(1)
        for i, (t, lp) in enumerate(zip(chosen.tolist(), picked.tolist(), strict=True)):
            if not done[i]:
                tokens[i].append(t)
                logprobs[i].append(lp)
        done |= chosen == EOS
        if bool(done.all()):
            break
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
        out = model(
            input_ids=chosen[:, None], attention_mask=mask, position_ids=next_pos,
            past_key_values=cache, use_cache=True,
        )  # fmt: skip
        logits, cache = out.logits[:, -1].float(), out.past_key_values
        next_pos = next_pos + 1
    return list(zip(tokens, logprobs, strict=True))


def play_batch(
    model: Any, games: int, max_tokens: int, generator: torch.Generator
) -> list[tuple[int, list[int], list[int], list[float], float]]:
    """Self-play ``games`` games; rows of (game, prompt, action, logprobs, reward)."""
    boards = [[""] * 9 for _ in range(games)]
    to_move = ["X"] * games
    over = [False] * games
    moves: list[list[tuple[str, list[int], list[int], list[float]]]] = [[] for _ in range(games)]
    result: list[dict[str, float]] = [{} for _ in range(games)]
    while not all(over):
        live = [g for g in range(games) if not over[g]]
        prompts = [prompt_tokens(boards[g], to_move[g]) for g in live]
        for g, prompt, (action, lps) in zip(
            live, prompts, sample(model, prompts, max_tokens, generator), strict=True
        ):
            mark = to_move[g]
            moves[g].append((mark, prompt, action, lps))
            text = bytes(t for t in action if t < 256).decode(errors="replace").strip()
            cell = int(text) if text.isdigit() and len(text) == 1 else -1
            other = "O" if mark == "X" else "X"
            if not 0 <= cell < 9 or boards[g][cell]:
                over[g], result[g] = True, {mark: -1.0, other: 1.0}
                continue
            boards[g][cell] = mark
            if winner(boards[g]):
                over[g], result[g] = True, {mark: 1.0, other: -1.0}
            elif all(boards[g]):
                over[g], result[g] = True, {mark: 0.0, other: 0.0}
            to_move[g] = other
    return [
        (g, prompt, action, lps, result[g][mark])
        for g in range(games)
        for mark, prompt, action, lps in moves[g]
    ]


KL_COEF = 0.1
"""The KL penalty's coefficient: arena's default for the built-in model."""


def plain_rl_step(
    model: Any,
    optimizer: torch.optim.Optimizer,
    groups: int,
    games: int,
    max_tokens: int,
    generator: torch.Generator,
    reference: Any = None,
) -> int:
    """One RL step of the plain loop; returns the games played. With ``reference`` (a
    frozen model), the KL penalty against it joins the advantages."""
    rows = play_batch(model, groups * games, max_tokens, generator)
    # advantages: reward minus the mean of the same seat in the same group
    by_key: dict[tuple[int, int], list[float]] = {}
    seat_rewards: dict[tuple[int, str], float] = {}
    for g, prompt, _a, _lp, reward in rows:
        mark = chr(prompt[3])
        seat_rewards[(g, mark)] = reward
    for (g, mark), reward in seat_rewards.items():
        by_key.setdefault((g // games, ord(mark)), []).append(reward)
    means = {k: sum(v) / len(v) for k, v in by_key.items()}
    seqs, advs, olds, masks = [], [], [], []
    for g, prompt, action, lps, reward in rows:
        advantage = reward - means[(g // games, prompt[3])]
        if not action or (advantage == 0 and reference is None):
            continue
        full = prompt + action
        seqs.append(full)
        advs.append([0.0] * (len(prompt) - 1) + [advantage] * len(action))
        olds.append([0.0] * (len(prompt) - 1) + lps)
        masks.append([0.0] * (len(prompt) - 1) + [1.0] * len(action))
    if seqs:
        width = max(len(s) for s in seqs) - 1
        ids = torch.tensor([s[:-1] + [PAD] * (width - len(s) + 1) for s in seqs])
        targets = torch.tensor([s[1:] + [PAD] * (width - len(s) + 1) for s in seqs])

        def padded(values: list[list[float]]) -> torch.Tensor:
            return torch.tensor([v + [0.0] * (width - len(v)) for v in values])

        adv, old, mask = padded(advs), padded(olds), padded(masks)
        attention = torch.arange(width)[None, :] < torch.tensor([len(s) - 1 for s in seqs])[:, None]

        def logprobs(net: Any) -> torch.Tensor:
            logits = net(input_ids=ids, attention_mask=attention.long()).logits.float()
            return -torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), targets.flatten(), reduction="none"
            ).view_as(adv)

        if reference is not None:
            with torch.no_grad():
                diff = (old - logprobs(reference)) * mask
            adv = adv + KL_COEF * mask * (diff.sum() / mask.sum() - diff)
        logp = logprobs(model)
        ratio = torch.exp(torch.where(mask > 0, logp - old, torch.zeros_like(logp)))
        loss = -(ratio * adv * mask).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return groups * games


def plain_warmup(model: Any, examples: list[Any], steps: int, batch: int = 64) -> float:
    """The plain warm-up loop: steps per second on the same examples."""
    rows = [(d.model_input.to_ints(), d.loss_fn_inputs["target_tokens"].data,
             d.loss_fn_inputs["weights"].data) for d in examples]  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rng = random.Random(0)
    started = time.perf_counter()
    for _ in range(steps):
        chosen = rng.sample(rows, min(batch, len(rows)))
        width = max(len(r[0]) for r in chosen)
        ids = torch.tensor([r[0] + [PAD] * (width - len(r[0])) for r in chosen])
        targets = torch.tensor([list(r[1]) + [PAD] * (width - len(r[1])) for r in chosen])
        weights = torch.tensor([list(r[2]) + [0.0] * (width - len(r[2])) for r in chosen])
        attention = torch.tensor([[1] * len(r[0]) + [0] * (width - len(r[0])) for r in chosen])
        logits = model(input_ids=ids, attention_mask=attention).logits.float()
        logp = -torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), targets.flatten(), reduction="none"
        ).view_as(weights)
        (-(weights * logp).sum()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return steps / (time.perf_counter() - started)


# -- arena ------------------------------------------------------------------------------------


async def arena_warmup(examples: list[Any], steps: int) -> float:
    from trainer.local.service import LocalServiceClient
    from trainer.warmup import warm_up

    client = await LocalServiceClient(LocalModelConfig(seed=0)).create_lora_training_client(
        "arena/byte-gpt2",
        rank=0,  # every weight, as the plain loop trains
    )
    started = time.perf_counter()
    await warm_up(client, examples, steps=steps)
    rate = steps / (time.perf_counter() - started)
    client.close()
    return rate


def arena_rl(root: Path, steps: int, warm_dir: Path, **settings: Any) -> float:
    """Games per second of arena's RL steps (the first step, which sets up, not counted);
    ``settings``: more ``TrainConfig`` fields (branching)."""
    from storage.rundir import RunDirectory
    from trainer.train import Trainer

    log_dir = root / f"arena-{time.monotonic_ns()}"  # beside the cached warm-up in root
    log_dir.mkdir(parents=True)
    config = TrainConfig(
        log_dir=str(log_dir), num_batches=steps + 1, eval_every=0, save_every=0, db="",
        opponents="self", run_name="bench-train", **settings,
    )  # fmt: skip
    asyncio.run(Trainer(config).run())
    rows = RunDirectory(log_dir).metrics()
    timed = [r for r in rows if r["step"] >= 1 and "time/total" in r]
    seconds = sum(r["time/total"] for r in timed)
    return len(timed) * config.batch_size * config.group_size / seconds


def plain_rl(warm_state: Path, steps: int) -> float:
    """Games per second of the plain loop from the same warmed-up weights."""
    import safetensors.torch

    loaded = load_model(LocalModelConfig(seed=0))
    model = loaded.model
    safetensors.torch.load_model(model, str(warm_state / "model.safetensors"))
    reference = load_model(LocalModelConfig(seed=0)).model  # the KL reference: frozen
    safetensors.torch.load_model(reference, str(warm_state / "model.safetensors"))
    reference.eval().requires_grad_(False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    generator = torch.Generator().manual_seed(0)
    plain_rl_step(model, optimizer, 8, 8, 8, generator, reference)  # warm up the allocator
    started = time.perf_counter()
    games = sum(
        plain_rl_step(model, optimizer, 8, 8, 8, generator, reference) for _ in range(steps)
    )
    return games / (time.perf_counter() - started)


def measure(
    args: Any, root: Path, examples: list[Any], warm_dir: Path, warm_state: Path
) -> dict[str, float]:
    torch.set_num_threads(1)
    plain_w = plain_warmup(load_model(LocalModelConfig(seed=0)).model, examples, args.warmup_steps)
    arena_w = asyncio.run(arena_warmup(examples, args.warmup_steps))
    plain_g = plain_rl(warm_state, args.rl_steps)
    arena_g = arena_rl(root, args.rl_steps, warm_dir)
    branch_g = arena_rl(root, args.rl_steps, warm_dir, branches=4, branch_points=2)
    return {
        "rl_games_per_s_arena_branching": round(branch_g, 1),
        "rl_branching_ratio": round(branch_g / plain_g, 3),
        "warmup_steps_per_s_arena": round(arena_w, 2),
        "warmup_steps_per_s_plain": round(plain_w, 2),
        "warmup_ratio": round(arena_w / plain_w, 3),
        "rl_games_per_s_arena": round(arena_g, 1),
        "rl_games_per_s_plain": round(plain_g, 1),
        "rl_ratio": round(arena_g / plain_g, 3),
    }


def main() -> None:
    p = bench_parser(__doc__.splitlines()[0])
    p.add_argument("--rl-steps", type=int, default=12, help="timed RL steps per loop")
    p.add_argument("--warmup-steps", type=int, default=60, help="timed warm-up steps")
    p.add_argument("--no-busy", action="store_true", help="skip the busy-machine round")
    args = p.parse_args()
    from trainer.train import Trainer
    from trainer.warmup import collect_examples

    root = Path(tempfile.mkdtemp(prefix="arena-bench-train-"))
    try:
        examples = asyncio.run(collect_examples("TicTacToe-v0", 300))
        # One warmed-up model both loops start their RL from (the trainer's own cache).
        warm_log = root / "warm"
        config = TrainConfig(
            log_dir=str(warm_log),
            num_batches=1,
            eval_every=0,
            save_every=0,
            db="",
            opponents="self",
        )
        asyncio.run(Trainer(config).run())
        warm_dir = root / ".warmup-cache"
        warm_state = next(p for p in warm_dir.iterdir() if p.is_dir())
        results: dict[str, Any] = {"quiet": measure(args, root, examples, warm_dir, warm_state)}
        if not args.no_busy:
            with busy(True):
                results["busy"] = measure(args, root, examples, warm_dir, warm_state)
            for key in ("warmup_steps_per_s_arena", "rl_games_per_s_arena",
                        "warmup_steps_per_s_plain", "rl_games_per_s_plain"):  # fmt: skip
                results.setdefault("slowdown", {})[key] = round(
                    results["quiet"][key] / results["busy"][key], 2
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for phase in ("quiet", "busy"):
        if phase in results:
            r = results[phase]
            print(
                f"{phase:>5}: warm-up {r['warmup_steps_per_s_arena']} vs plain "
                f"{r['warmup_steps_per_s_plain']} steps/s (x{r['warmup_ratio']}); RL "
                f"{r['rl_games_per_s_arena']} vs plain {r['rl_games_per_s_plain']} games/s "
                f"(x{r['rl_ratio']}); with branching {r['rl_games_per_s_arena_branching']} "
                f"games/s (x{r['rl_branching_ratio']})"
            )
    if "slowdown" in results:
        print("busy slowdown (quiet / busy):", results["slowdown"])
    emit(results, args.json)


if __name__ == "__main__":
    main()
