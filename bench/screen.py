"""A screen that runs in seconds: the trainer's own update driving a lookup table.

Before a method costs 15 minutes of network training, screen it here. The policy is a
table, one row of move logits per observation (Kuhn-v0: the 12 information sets, card and
history; tic-tac-toe: the board), and it learns by self-play with the trainer's own code:
advantages centred per seat in each group (``trainer.data.seat_centered_advantages``,
constant groups dropped), the policy-gradient loss (``trainer.local.losses.token_losses``:
importance sampling or PPO's clip, against the logprobs of a sampler one step stale, as
``max_steps_off_policy=1`` plays), the exact KL toward a slowly moving magnet
(``trainer.local.magnet``: ``answer_kl``, ``Magnet``), the collapse guard, PPO epochs and
the cosine learning rate, all read from a ``TrainConfig`` (``--set FIELD=VALUE``, as
``bench.learn``'s variants). Groups of ``group_size`` games share their deal.

What a table cannot show: how a network generalises between observations, and invalid
answers (a table plays legal moves only). Its learning rate is the network's times
``--lr-scale`` (default 100: Adam moves a table's logit by about the learning rate a step,
and at 100x the network's 3e-4 a Kuhn decision turns near-deterministic within about 100
steps without a KL, as the network's do).

Yardsticks, exact (no sampling noise): Kuhn-v0's exploitability (NashConv / 2); on
tic-tac-toe the expected non-loss against the perfect bot (uniform over its best moves) and
the expected win against random, half in each seat, at temperature 1 and greedy.

    python -m bench.screen --game Kuhn-v0 --steps 3000 --seeds 0,1,2
    python -m bench.screen --game TicTacToe-v0 --steps 1250 --set kl_forward_coef=0.0
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench.common import emit
from games.textarena_games import kuhn_solver, tic_tac_toe
from trainer.config import TrainConfig
from trainer.data import seat_centered_advantages
from trainer.local.losses import check_loss, token_losses
from trainer.local.magnet import Magnet, answer_kl, kl_divergence

LR_SCALE = 100.0
"""The table's learning rate over the network's (see the module docstring)."""
ILLEGAL = -1e9
"""An illegal move's logit offset (finite: 0 x -inf would be NaN in the KL)."""
MAX_STEPS = 100_000
"""Most steps one screen runs."""


@dataclass
class Decision:
    """One move of a seat: the observation's row, the move, the sampler's logprob."""

    row: int
    move: int
    logprob: float


class Table(torch.nn.Module):
    """One row of move logits per observation (rows made as observations are seen)."""

    def __init__(self, rows: int, moves: int) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(torch.zeros(rows, moves))
        self.index: dict[str, int] = {}

    def row(self, key: str) -> int:
        if key not in self.index:
            if len(self.index) >= self.logits.shape[0]:
                raise ValueError(f"more than {self.logits.shape[0]} observations")
            self.index[key] = len(self.index)
        return self.index[key]


class Game:
    """A game the screen plays: its rows, its moves, a group of self-play games, the
    yardsticks of a policy (a function from observation to move probabilities)."""

    rows: int
    moves: int

    def play(
        self, policy: Callable[[str, list[int]], list[float]], rng: random.Random, deal: int
    ) -> tuple[list[list[tuple[str, int, list[int]]]], list[float]]:
        """One game: each seat's (observation, move, legal moves), and its rewards."""
        raise NotImplementedError

    def yardsticks(self, probs: Callable[[str, list[int]], list[float]]) -> dict[str, float]:
        raise NotImplementedError


class Kuhn(Game):
    """Kuhn poker, seat 0 first: observation card + history, moves p (check/fold), b."""

    rows, moves = 12, 2

    def play(self, policy, rng, deal):  # type: ignore[no-untyped-def]
        cards = random.Random(deal).sample(range(3), 2)
        seats: list[list[tuple[str, int, list[int]]]] = [[], []]
        history = ""
        while history not in ("pp", "bp", "bb", "pbp", "pbb"):
            mover = len(history) % 2
            key = kuhn_solver.CARDS[cards[mover]] + history
            move = _draw(policy(key, [0, 1]), rng)
            seats[mover].append((key, move, [0, 1]))
            history += "pb"[move]
        payoff = float(kuhn_solver._payoff((cards[0], cards[1]), history))
        return seats, [payoff, -payoff]

    def yardsticks(self, probs):  # type: ignore[no-untyped-def]
        policy = {}
        for infoset in kuhn_solver.INFOSETS:
            p = probs(infoset, [0, 1])
            policy[infoset] = {"p": p[0], "b": 1.0 - p[0]}
        return {"exploitability": kuhn_solver.exploitability(policy)}


class TicTacToe(Game):
    """Tic-tac-toe, X (seat 0) first: observation the board, moves the 9 cells."""

    rows, moves = 6000, 9

    def play(self, policy, rng, deal):  # type: ignore[no-untyped-def]
        board = [""] * 9
        seats: list[list[tuple[str, int, list[int]]]] = [[], []]
        mover = 0
        while not tic_tac_toe.winner(board) and "" in board:
            legal = [i for i, c in enumerate(board) if not c]
            key = _board_key(board)
            move = legal[_draw(policy(key, legal), rng)]
            seats[mover].append((key, move, legal))
            board[move] = "XO"[mover]
            mover = 1 - mover
        won = tic_tac_toe.winner(board)
        reward = 1.0 if won == "X" else -1.0 if won == "O" else 0.0
        return seats, [reward, -reward]

    def yardsticks(self, probs):  # type: ignore[no-untyped-def]
        out = {}
        for mode in ("t1", "greedy"):
            play = probs if mode == "t1" else _greedy(probs)
            non_loss = [_expect(play, seat, "optimal", [""] * 9, 0)[1] for seat in (0, 1)]
            win = [_expect(play, seat, "random", [""] * 9, 0)[0] for seat in (0, 1)]
            out[f"non_loss_vs_optimal_{mode}"] = sum(non_loss) / 2
            out[f"win_vs_random_{mode}"] = sum(win) / 2
        return out


def _board_key(board: Sequence[str]) -> str:
    return "".join(c or "." for c in board)


def _greedy(probs: Callable[[str, list[int]], list[float]]) -> Callable[..., list[float]]:
    def play(key: str, legal: list[int]) -> list[float]:
        p = probs(key, legal)
        best = max(range(len(p)), key=lambda i: p[i])
        return [1.0 if i == best else 0.0 for i in range(len(p))]

    return play


def _expect(
    probs: Callable[[str, list[int]], list[float]],
    seat: int,
    opponent: str,
    board: list[str],
    mover: int,
    memo: dict[str, tuple[float, float]] | None = None,
) -> tuple[float, float]:
    """The policy's exact (win, non-loss) chances in ``seat`` from ``board``."""
    memo = {} if memo is None else memo
    key = _board_key(board)
    if key in memo:
        return memo[key]
    won = tic_tac_toe.winner(board)
    if won or "" not in board:
        mine = won == "XO"[seat]
        return float(mine), float(mine or not won)
    legal = [i for i, c in enumerate(board) if not c]
    if mover == seat:
        weights = probs(key, legal)
    elif opponent == "random":
        weights = [1.0 / len(legal)] * len(legal)
    else:
        best = set(tic_tac_toe.best_moves(board, "XO"[mover]))
        weights = [1.0 / len(best) if i in best else 0.0 for i in legal]
    win = non_loss = 0.0
    for cell, w in zip(legal, weights, strict=True):
        if w <= 0:
            continue
        board[cell] = "XO"[mover]
        a, b = _expect(probs, seat, opponent, board, 1 - mover, memo)
        board[cell] = ""
        win, non_loss = win + w * a, non_loss + w * b
    memo[key] = (win, non_loss)
    return win, non_loss


def _draw(weights: list[float], rng: random.Random) -> int:
    return rng.choices(range(len(weights)), weights=weights)[0]


GAMES: dict[str, Callable[[], Game]] = {"Kuhn-v0": Kuhn, "TicTacToe-v0": TicTacToe}


class Screen:
    """Self-play of a table with the trainer's update, as ``config`` sets it."""

    def __init__(self, config: TrainConfig, game: Game, lr_scale: float = LR_SCALE) -> None:
        self.config, self.game, self.lr_scale = config, game, lr_scale
        torch.manual_seed(config.seed)
        self.rng = random.Random(config.seed)
        self.table = Table(game.rows, game.moves)
        self.optimizer = torch.optim.Adam(self.table.parameters(), lr=1.0)
        kl = config.decision_kl()
        self.kl = kl
        self.magnet = Magnet([self.table.logits], kl.magnet_rate if kl else 0.0)
        self.loss_fn = config.resolved_loss_fn()
        self.settings = check_loss(self.loss_fn, None)
        self.entropy: float | None = None
        self.sampler = self.table.logits.detach().clone()
        self._legal: dict[int, list[int]] = {}
        self._seen: dict[str, list[float]] = {}
        self._batch: tuple[list[Decision], list[float]] = ([], [])

    def probs(self, logits: torch.Tensor) -> Callable[[str, list[int]], list[float]]:
        def policy(key: str, legal: list[int]) -> list[float]:
            row = logits[self.table.row(key)]
            return torch.softmax(row[legal], -1).tolist()

        return policy

    def play_step(self) -> bool:
        """Play a step's groups and keep their decisions and advantages for ``learn``;
        False when every group was constant (nothing to learn)."""
        c = self.config
        seen: dict[str, list[float]] = {}
        plain = self.probs(self.sampler)

        def sampled(key: str, legal: list[int]) -> list[float]:
            if key not in seen:  # the sampler's rows are fixed for the step
                seen[key] = plain(key, legal)
            return seen[key]

        self._seen = seen
        decisions: list[Decision] = []
        advantages: list[float] = []
        for _ in range(c.batch_size):
            deal = self.rng.randrange(2**31)
            rewards: list[float] = []
            seats: list[int] = []
            moves: list[list[Decision]] = []
            for _ in range(c.group_size):
                per_seat, reward = self.game.play(sampled, self.rng, deal)
                for seat, played in enumerate(per_seat):
                    rewards.append(reward[seat])
                    seats.append(seat)
                    moves.append([self._decision(k, m, legal) for k, m, legal in played])
            centred = seat_centered_advantages(rewards, seats)
            if c.drop_constant_reward_groups and all(a == 0 for a in centred):
                continue
            for played, advantage in zip(moves, centred, strict=True):
                decisions += played
                advantages += [advantage] * len(played)
        self._batch = (decisions, advantages)
        return bool(decisions)

    def _decision(self, key: str, move: int, legal: list[int]) -> Decision:
        row = self.table.row(key)
        self._legal[row] = legal
        return Decision(row, move, math.log(max(self._seen[key][legal.index(move)], 1e-30)))

    def learn(self, progress: float) -> dict[str, float]:
        """One step (``ppo_epochs`` optimizer steps) on the batch ``play_step`` made."""
        decisions, advantages = self._batch
        rows = torch.tensor([d.row for d in decisions])
        moves = torch.tensor([d.move for d in decisions])
        mask = torch.full((self.game.rows, self.game.moves), ILLEGAL)
        for row, legal in self._legal.items():
            mask[row, legal] = 0.0
        scale = 1.0
        if self.config.entropy_floor and self.entropy is not None:
            scale = min(1.0, self.entropy / self.config.entropy_floor)
        inputs = {
            "logprobs": torch.tensor([d.logprob for d in decisions]).unsqueeze(0),
            "advantages": (torch.tensor(advantages) * scale).unsqueeze(0),
        }
        lr = self.config.learning_rate_at(progress) * self.lr_scale
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        before = torch.log_softmax((self.table.logits + mask)[rows].detach(), -1)
        out: dict[str, float] = {}
        for epoch in range(self.config.resolved_ppo_epochs()):
            logits = (self.table.logits + mask)[rows]
            logp = torch.log_softmax(logits, -1).gather(1, moves[:, None]).T
            loss = token_losses(self.loss_fn, logp, inputs, self.settings).sum()
            magnet_logp = torch.log_softmax((self.magnet.weights[0] + mask)[rows], -1)
            rev, fwd, ent = answer_kl(logits, magnet_logp)
            if self.kl is not None:
                loss = loss + (self.kl.reverse * rev + self.kl.forward * fwd).sum()
            if epoch == 0:
                self.entropy = float(ent.detach().mean())
                out = {
                    "kl/reverse": float(rev.detach().mean()),
                    "policy/answer_entropy": self.entropy,
                }
            self.optimizer.zero_grad()
            (loss / max(len(decisions), 1)).backward()
            self.optimizer.step()
            self.magnet.update()
        after = torch.log_softmax((self.table.logits + mask)[rows].detach(), -1)
        out["policy/step_kl"] = float(kl_divergence(before, after).mean())
        return out

    def run(self, steps: int, every: int) -> list[dict[str, float]]:
        """``steps`` steps; the yardsticks every ``every`` (and at the end)."""
        curve = [{"step": 0, **self.game.yardsticks(self.probs(self.table.logits.detach()))}]
        for step in range(steps):
            if self.play_step():
                self.learn(step / steps)
            # The next step's games play with these weights: one step off policy.
            self.sampler = self.table.logits.detach().clone()
            if (step + 1) % every == 0 or step + 1 == steps:
                figures = self.game.yardsticks(self.probs(self.table.logits.detach()))
                curve.append({"step": step + 1, **figures})
        return curve


def summarise(curve: list[dict[str, float]], key: str) -> dict[str, float]:
    """A curve's figure ``key``: start, end, the second half's mean, lowest and highest."""
    half = [row[key] for row in curve if row["step"] >= curve[-1]["step"] / 2]
    return {
        "start": curve[0][key],
        "end": curve[-1][key],
        "second_half_mean": statistics.fmean(half),
        "second_half_min": min(half),
        "second_half_max": max(half),
    }


def parse_settings(pairs: Sequence[str]) -> dict[str, Any]:
    """``FIELD=VALUE`` pairs as ``TrainConfig`` keyword arguments (values read as JSON
    where they parse, else as text). Raises ValueError for an unknown field."""
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    out: dict[str, Any] = {}
    for pair in pairs:
        name, _, text = pair.partition("=")
        if name not in fields or not text:
            raise ValueError(f"--set {pair!r}: give FIELD=VALUE with a TrainConfig field")
        try:
            out[name] = json.loads(text)
        except json.JSONDecodeError:
            out[name] = text
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="Kuhn-v0", choices=sorted(GAMES))
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--every", type=int, default=50, help="steps between yardsticks")
    parser.add_argument("--lr-scale", type=float, default=LR_SCALE)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--out", default="bench-results/screen")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not 1 <= args.steps <= MAX_STEPS:
        parser.error(f"--steps must be in 1..{MAX_STEPS}")
    try:
        settings = parse_settings(args.set)
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        configs = [TrainConfig(game_id=args.game, seed=s, **settings) for s in seeds]
        for config in configs:
            config.validate()
    except ValueError as exc:
        parser.error(str(exc))
    key = "exploitability" if args.game == "Kuhn-v0" else "non_loss_vs_optimal_t1"
    runs = []
    for config in configs:
        started = time.perf_counter()
        curve = Screen(config, GAMES[args.game](), args.lr_scale).run(args.steps, args.every)
        seconds = time.perf_counter() - started
        summary = {k: summarise(curve, k) for k in curve[0] if k != "step"}
        runs.append({"seed": config.seed, "seconds": seconds, "curve": curve, "summary": summary})
        s = runs[-1]["summary"][key]
        print(
            f"{args.game} seed {config.seed}: {key} {s['start']:.3f} -> {s['end']:.3f}, "
            f"second half {s['second_half_mean']:.3f} ({s['second_half_min']:.3f}-"
            f"{s['second_half_max']:.3f}); {args.steps} steps in {seconds:.1f} s"
        )
    report = {"game": args.game, "steps": args.steps, "settings": settings, "runs": runs}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "-".join([args.game, *[p.replace("=", "") for p in args.set]]) or args.game
    (out / f"{name}.json").write_text(json.dumps(report, indent=1))
    if args.json:
        emit(report, True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
