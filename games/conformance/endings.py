"""The kit's ending checks: random and garbage-sending players end the game (``ends``),
and every ending seen pays rewards in the declared range and sum (``rewards``)."""

from __future__ import annotations

import math

from games.conformance.episodes import garbage_chooser, random_chooser, with_cap, with_policy
from games.conformance.report import CheckStatus
from games.conformance.state import KitState
from games.limits import InvalidMovePolicy
from games.session import Status

REWARD_TOLERANCE = 1e-9
"""How far the rewards of an ending may sum from the declared ``reward_sum``."""


class EndingChecks(KitState):
    """``ends`` and ``rewards``."""

    def check_ends(self) -> None:
        """``ends``: random play finishes by the rules; garbage players end it too."""
        problems = []
        for e in self.episodes:
            if e.status is Status.ABORTED:
                problems.append(f"random play on seed {e.seed} aborted: {e.reason}")
            elif e.status is not Status.FINISHED:
                problems.append(
                    f"random play on seed {e.seed} did not finish within "
                    f"{self.runner.limits.max_turns} moves"
                )
        for policy in (InvalidMovePolicy.FORFEIT, InvalidMovePolicy.RETRY):
            self.runner.tick()
            limits = with_policy(self.runner.limits, policy)
            episode = self.runner.play(self.episodes[0].seed, garbage_chooser, limits)
            if episode.status is Status.ABORTED or episode.status is None:
                problems.append(f"garbage players ({policy.value}) aborted it: {episode.reason}")
            else:
                self.endings.append((f"garbage ({policy.value})", episode.status, episode.rewards))
        if problems:
            self.result("ends", CheckStatus.FAIL, problems[0])
        else:
            turns = max(e.num_moves for e in self.episodes)
            self.result("ends", CheckStatus.PASS, f"random play finished (<= {turns} moves)")

    def check_rewards(self) -> None:
        """``rewards``: every ending seen (a truncated one too) is finite, in
        ``reward_range`` and sums to ``reward_sum`` where one is declared."""
        # A truncated ending too: a cap of one move, unless the game ends at once.
        self.runner.tick()
        short = with_cap(self.runner.limits, 1)
        episode = self.runner.play(
            self.episodes[0].seed, random_chooser(self.spec.game_id, 0), short
        )
        if episode.status not in (None, Status.ABORTED):
            assert episode.status is not None
            self.endings.append(("truncated", episode.status, episode.rewards))
        low, high = self.spec.reward_range
        problems = []
        for what, _status, rewards in self.endings:
            values = list(rewards.values())
            if any(not math.isfinite(v) or not low <= v <= high for v in values):
                problems.append(f"{what}: rewards {rewards} outside [{low}, {high}]")
            total = sum(values)
            if self.spec.reward_sum is not None and abs(total - self.spec.reward_sum) > (
                REWARD_TOLERANCE
            ):
                problems.append(
                    f"{what}: rewards {rewards} sum to {total}, not {self.spec.reward_sum}"
                )
        kinds = sorted({status.value for _, status, _ in self.endings})
        if problems:
            self.result("rewards", CheckStatus.FAIL, problems[0])
        else:
            declared = "" if self.spec.reward_sum is None else f", sum {self.spec.reward_sum}"
            self.result(
                "rewards",
                CheckStatus.PASS,
                f"{len(self.endings)} endings ({', '.join(kinds)}) in [{low}, {high}]{declared}",
            )
