"""The kit's move checks: every listed move is accepted (``legal_moves``), and garbage and
well-formed illegal moves take the invalid-move path without making the game raise
(``invalid_moves``)."""

from __future__ import annotations

import random
import re

from games.conformance.episodes import (
    FALLBACK_MOVE,
    GARBAGE,
    MAX_MOVES_PER_POINT,
    Actions,
    Listed,
    fork,
    with_policy,
)
from games.conformance.report import CheckStatus
from games.conformance.state import KitState
from games.limits import InvalidMovePolicy
from games.session import GameSession
from games.sessionerrors import GameError

NUMBERED = re.compile(r"^\[\s*(-?\d{1,6})\s*\]$")
"""A move that is a bracketed number (``[7]``)."""


def well_formed_illegal(
    seat: int, listed: Listed, seen: dict[int, set[str]], highest: int
) -> list[tuple[str, str]]:
    """Moves shaped like the game's own that it must refuse from ``seat`` now, each with
    what it is: a move listed at an earlier turn (a cell taken, a card spent), another
    seat's move, a number past every number the game ever listed."""
    own = set(listed.get(seat) or [])
    out: list[tuple[str, str]] = []
    earlier = sorted(seen.get(seat, set()) - own)
    if earlier:
        out.append((earlier[0], "a move listed at an earlier turn"))
    others = sorted(
        {m for s, moves in listed.items() if s != seat for m in moves or []}
        | {m for s, moves in seen.items() if s != seat for m in moves}
    )
    others = [m for m in others if m not in own and m not in earlier[:1]]
    if others:
        out.append((others[0], "another seat's move"))
    if own and all(NUMBERED.match(m) for m in own):
        out.append((f"[{highest + 1}]", "a number out of range"))
    return out


class MoveChecks(KitState):
    """Listed moves, garbage and illegal moves tried on copies of the game, and the
    ``legal_moves`` and ``invalid_moves`` checks that read what they found."""

    def try_listed(
        self,
        session: GameSession,
        seat: int,
        own: list[str] | None,
        base: Actions,
        where: str,
        moves: list[Actions],
        seed: int,
    ) -> None:
        """A few of the moves listed for ``seat``, each on a copy: each must be accepted."""
        for text in (own or [])[:MAX_MOVES_PER_POINT]:
            self.runner.tick()
            twin = fork(self.runner, session, moves, seed)
            try:
                records = twin.step_round({**base, seat: text})
            except GameError as exc:
                self.forks["raised"].append(f"{text!r} at {where}: {exc}")
                continue
            finally:
                self.runner.note_views(twin)
            record = next(r for r in records if r.seat == seat)
            self.fork_checks["legal"] += 1
            if not record.valid:
                self.forks["legal"].append(f"{text!r} at {where} ({record.reason})")
            self.note_ending(twin, f"legal move at {where}")

    def try_invalid(
        self,
        session: GameSession,
        seat: int,
        listed: Listed,
        base: Actions,
        where: str,
        moves: list[Actions],
        seed: int,
        seen: dict[int, set[str]],
        highest: int,
    ) -> None:
        """Garbage, and (in a game that lists moves) well-formed illegal moves, from
        ``seat``, each on a copy."""
        own = listed[seat]
        garbage = [(text, "") for text in GARBAGE]
        if own is not None:
            garbage += well_formed_illegal(seat, listed, seen, highest)
        for text, kind in garbage:
            if own is not None and text in own:
                continue
            self.try_garbage(
                session, seat, text, kind, {**base, seat: text}, where, moves, seed, own
            )

    def try_garbage(
        self,
        session: GameSession,
        seat: int,
        text: str,
        kind: str,
        actions: Actions,
        where: str,
        moves: list[Actions],
        seed: int,
        own: list[str] | None,
    ) -> None:
        """``text`` from ``seat`` on a copy: refused, and the seat forfeits (``forfeit``
        policy); never a failure of the game."""
        self.runner.tick()
        twin = fork(self.runner, session, moves, seed)
        shown = f"{text[:30]!r}" + (f" ({kind})" if kind else "")
        try:
            records = twin.step_round(actions)
        except GameError as exc:
            fix = (
                ": refuse a well-formed illegal move with MoveResult(valid=False, reason=...)"
                if kind
                else ""
            )
            self.forks["raised"].append(f"{shown} at {where} made the game fail: {exc}{fix}")
            return
        finally:
            self.runner.note_views(twin)
        record = next(r for r in records if r.seat == seat)
        self.note_ending(twin, f"garbage at {where}")
        if own is None:
            return  # a free-text game may accept it; it only must not raise
        self.fork_checks["illegal" if kind else "invalid"] += 1
        outcome = twin.outcome
        if record.valid:
            why = (
                "the game did not list it: refuse it, or list it in legal_moves"
                if kind
                else "a game must refuse what is not a move"
            )
            self.forks["invalid"].append(f"{shown} was accepted as a valid move at {where} ({why})")
        elif outcome is None:
            # With more than two seats a game may go on without the forfeiting seat;
            # with two, losing by an invalid move ends it.
            if twin.num_players == 2:
                self.forks["invalid"].append(
                    f"{shown} at {where} was refused, but the game went on under "
                    "'forfeit' (no retry allowed)"
                )
            elif not twin.done and seat in twin.movers():
                self.forks["invalid"].append(
                    f"{shown} at {where}: the seat was asked again under 'forfeit'"
                )
        elif seat not in outcome.forfeited:
            self.forks["invalid"].append(
                f"{shown} at {where} ended the game without forfeiting the seat"
            )
        elif outcome.rewards[seat] != twin.limits.invalid_move_penalty:
            self.forks["invalid"].append(f"the forfeiting seat got {outcome.rewards[seat]}")

    def check_legal_moves(self) -> None:
        """``legal_moves``: no listed move was refused."""
        refused = [r for e in self.episodes for r in e.refused] + self.forks["legal"]
        listed = sum(e.listed for e in self.episodes)
        if refused:
            self.result("legal_moves", CheckStatus.FAIL, f"listed but refused: {refused[0]}")
        elif not listed:
            self.result("legal_moves", CheckStatus.SKIP, "the game lists no legal moves")
        else:
            tried = listed + self.fork_checks["legal"]
            unlisted = sum(e.unlisted for e in self.episodes)
            note = f"; no list on {unlisted} turns" if unlisted else ""
            self.result("legal_moves", CheckStatus.PASS, f"{tried} listed moves accepted{note}")

    def check_invalid_moves(self) -> None:
        """``invalid_moves``: garbage and illegal moves were refused and forfeited, and
        never made the game raise; the retry allowance is honoured."""
        problems = self.forks["invalid"] + self.forks["raised"]
        lists = sum(e.listed for e in self.episodes) > 0
        if lists:
            problems += self.retry_path()
        if problems:
            self.result("invalid_moves", CheckStatus.FAIL, problems[0])
        elif lists:
            tried = self.fork_checks["invalid"]
            illegal = self.fork_checks["illegal"]
            self.result(
                "invalid_moves",
                CheckStatus.PASS,
                f"{tried} garbage and {illegal} well-formed illegal moves refused and "
                "forfeited; retry allowance honoured",
            )
        else:
            self.result("invalid_moves", CheckStatus.PASS, "garbage never raises (free-text game)")

    def retry_path(self) -> list[str]:
        """Under ``retry`` (one retry): garbage, the same seat moves again; garbage, it
        forfeits (the other seats of a simultaneous round move validly)."""
        limits = with_policy(self.runner.limits, InvalidMovePolicy.RETRY)
        session = self.runner.session(self.episodes[0].seed, limits)
        rng = random.Random(f"{self.spec.game_id}/retry")

        def others(seat: int) -> Actions:
            return {
                s: rng.choice(session.legal_moves(s) or [FALLBACK_MOVE])
                for s in session.movers()
                if s != seat
            }

        try:
            seat = session.current_player()
            first = session.step_round({**others(seat), seat: GARBAGE[2]})
            if next(r for r in first if r.seat == seat).valid:
                return [f"{GARBAGE[2]!r} was accepted as a first move"]
            if session.done or seat not in session.movers():
                return ["after one invalid move under 'retry', the seat could not retry"]
            second = session.step_round({**others(seat), seat: GARBAGE[1]})
            outcome = session.outcome
            if next(r for r in second if r.seat == seat).valid:
                return [f"{GARBAGE[1]!r} was accepted as a valid move"]
            if outcome is None:
                # More than two seats: the game may go on without the seat.
                if session.num_players == 2 or seat in session.movers():
                    return ["a second invalid move in a row under 'retry' did not forfeit"]
                return []
            if seat not in outcome.forfeited:
                return ["a second invalid move in a row under 'retry' did not forfeit"]
            self.endings.append(("retry forfeit", outcome.status, dict(outcome.rewards)))
            return []
        except GameError as exc:
            return [f"garbage under 'retry' made the game fail: {exc}"]
        finally:
            self.runner.note_views(session)
            session.close()
