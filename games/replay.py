"""Replaying recorded turns: a session's record played again on a fresh session of the
same game and deal, grouped in the calls the game received them in."""

from __future__ import annotations

from collections.abc import Sequence

from games.session import GameSession
from games.sessionerrors import SessionError
from games.turnrecord import TurnRecord


def calls_of(turns: Sequence[TurnRecord]) -> list[list[TurnRecord]]:
    """``turns`` grouped as the game received them: one move per call of a game in turns;
    a simultaneous round's moves (or a retry's, within its round) together."""
    calls: list[list[TurnRecord]] = []
    for record in turns:
        previous = calls[-1][-1] if calls else None
        if (
            previous is None
            or record.round is None
            or previous.round != record.round
            or previous.seat >= record.seat
        ):
            calls.append([record])
        else:
            calls[-1].append(record)
    return calls


def replay_turns(session: GameSession, turns: Sequence[TurnRecord]) -> None:
    """Play ``turns`` (another session's record, from its start) again on the started
    ``session`` of the same game and deal: the same moves, grouped in the same calls, so
    the game's own generator draws the same chance and the game ends up where the other
    stood. Raises SessionError when a recorded move does not fit (another game or deal)."""
    for call in calls_of(turns):
        if session.done:
            raise SessionError(
                f"the game is over at move {len(session.turns)}; the record goes on to "
                f"move {turns[-1].index}: it is not this game's"
            )
        movers = session.movers()
        seats = tuple(record.seat for record in call)
        if seats != movers:
            raise SessionError(
                f"the record has seats {list(seats)} moving at move {call[0].index}; "
                f"the game asks {list(movers)}"
            )
        session.step_round({record.seat: record.action for record in call})
