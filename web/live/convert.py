"""Stored matches (``storage`` dataclasses) as the live protocol's types. No I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from arena.events import Turn
from arena.identity import PolicyKind
from games.outcome import seat_outcomes
from matchmaking.ratings import Rating
from storage import MatchDetail, MatchSummary
from web.protocol import MatchInfo


def aborted_result(reason: str, num_turns: int) -> dict[str, Any]:
    """The ``result`` of an aborted match (it carries no rewards)."""
    return {
        "status": "aborted",
        "reason": reason,
        "rewards": None,
        "invalid_moves": None,
        "forfeited": [],
        "num_turns": num_turns,
    }


def info_from_summary(
    summary: MatchSummary,
    start_state: str | None,
    start_board: dict[str, Any] | None = None,
    start_full_board: dict[str, Any] | None = None,
) -> MatchInfo:
    """A stored match's header (its start views, when read with the match)."""
    return MatchInfo(
        match_id=summary.id,
        game_id=summary.game_id,
        seed=summary.seed,
        num_players=summary.num_players,
        players=summary.players,
        run_id=summary.run_id,
        group_id=summary.group_id,
        started_at=summary.started_at,
        start_state=start_state,
        human_seats=tuple(s.seat for s in summary.seats if s.kind == PolicyKind.HUMAN),
        start_board=start_board,
        start_full_board=start_full_board,
    )


def ended_result(
    status: str,
    reason: str,
    rewards: Sequence[float],
    invalid_moves: Sequence[int],
    forfeited: Sequence[int],
    num_turns: int,
) -> dict[str, Any]:
    """The ``result`` of a match that ended (finished or truncated): with each seat's
    ``results`` (win, draw or loss) and ``scores`` as ``games.outcome`` defines them."""
    outcomes = seat_outcomes(rewards)
    return {
        "status": status,
        "reason": reason,
        "rewards": list(rewards),
        "results": [o.result.value for o in outcomes],
        "scores": [o.score for o in outcomes],
        "invalid_moves": list(invalid_moves),
        "forfeited": list(forfeited),
        "num_turns": num_turns,
    }


def result_from_summary(summary: MatchSummary) -> dict[str, Any]:
    """A stored match's ``result``."""
    if summary.status == "aborted":
        return aborted_result(summary.reason, summary.num_turns)
    return ended_result(
        summary.status,
        summary.reason,
        [s.reward or 0.0 for s in summary.seats],
        [s.invalid_moves for s in summary.seats],
        [s.seat for s in summary.seats if s.forfeited],
        summary.num_turns,
    )


def summary_line(summary: MatchSummary) -> dict[str, Any]:
    """A stored match's lobby line (no seed: it may be live)."""
    out: dict[str, Any] = {
        "id": summary.id,
        "game_id": summary.game_id,
        "players": list(summary.players),
        "run_id": summary.run_id,
        "group_id": summary.group_id,
        "started_at": summary.started_at,
        "num_turns": summary.num_turns,
        "status": summary.status,
        "human_seats": [s.seat for s in summary.seats if s.kind == PolicyKind.HUMAN],
    }
    if summary.status != "live":
        rewards = [s.reward for s in summary.seats]
        out.update(ended_at=summary.ended_at, rewards=rewards, reason=summary.reason)
        if summary.status != "aborted":
            out["results"] = [o.result.value for o in seat_outcomes([r or 0.0 for r in rewards])]
    return out


def turns_of(detail: MatchDetail) -> list[Turn]:
    """Every turn of a stored match."""
    return list(detail.turns)  # a stored turn is the hub's turn record


def rating_json(policy: str, mu: float, sigma: float, games: int | None) -> dict[str, Any]:
    """A stored live rating as every frame and JSON answer sends it: ``policy``,
    ``rating`` (Bradley-Terry, Elo scale), ``sigma`` (its standard error), ``lower`` and
    ``upper`` (its 95 % interval, rating -+ 1.96 sigma), ``games`` (rated matches, null
    when not known), and for clients of the first ratings frames ``mu`` (= rating) and
    ``ordinal`` (= mu - 3 sigma)."""
    r = Rating(mu, sigma)
    return {
        "policy": policy,
        "rating": mu,
        "sigma": sigma,
        "lower": r.lower,
        "upper": r.upper,
        "games": games,
        "mu": mu,
        "ordinal": r.ordinal,
    }
