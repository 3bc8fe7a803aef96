"""Match streams and the lobby: versioned events, serialised once per audience.

A ``MatchStream`` numbers every event of one match (``v`` = 1 for the start, then one per
turn, prompt, simultaneous round's progress and end) and keeps the last ``history_limit``
of them, so that a client that reconnects with the last version it saw gets exactly what
it missed. Each event is serialised lazily, at most once per audience: spectators
(``PUBLIC``) share one frame, and a seat holder gets its own frame only for events that
differ for it (its own hidden moves, its prompts). No I/O here: the hub writes the frames.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from arena.events import Turn
from web.connections import Client
from web.protocol import MatchInfo, dumps, full_turn, public_turn, seat_turn

PUBLIC = -1
"""The spectators' audience; seats are audiences 0, 1, ..."""


class Entry:
    """One numbered event: a payload for spectators and, for some seats, their own."""

    __slots__ = ("_frames", "private", "public", "version")

    def __init__(
        self, version: int, public: dict[str, Any], private: dict[int, dict[str, Any]]
    ) -> None:
        self.version = version
        self.public = public
        self.private = private
        self._frames: dict[int, str] = {}

    def frame(self, audience: int) -> str:
        """The JSON frame for ``audience``, serialised on first use and then reused."""
        key = audience if audience in self.private else PUBLIC
        frame = self._frames.get(key)
        if frame is None:
            payload = self.public if key == PUBLIC else self.private[key]
            frame = self._frames[key] = dumps(payload)
        return frame


@dataclass
class Prompt:
    """A browser seat's pending turn."""

    seat: int
    deadline: float
    """Unix time at which the seat forfeits."""
    new_text: str
    """The messages since the seat's previous move."""
    full_text: str
    """Every message the seat has received."""
    legal_moves: list[str] | None


class MatchStream:
    """One match as the hub knows it, and who follows it.

    ``source`` says where its events come from: ``bus`` (this process's event bus) or
    ``db`` (followed from the database, when the games run in another process).
    ``resumable``: False for a match read back from the database after it ended: its
    versions are numbered afresh, so they mean nothing to a client that saw it before, and
    every resume gets a snapshot (``resync``) instead.
    """

    def __init__(
        self,
        info: MatchInfo,
        *,
        moves_public: bool,
        history_limit: int,
        source: str,
        resumable: bool = True,
    ) -> None:
        self.info = info
        self.resumable = resumable
        self.match_id = info.match_id
        self.moves_public = moves_public
        self.source = source
        self.version = 0
        self.status = "live"
        self.turns: list[Turn] = []
        self.public_state = info.start_state
        self.board = info.start_board
        """The public board now (after the last turn)."""
        self.result: dict[str, Any] | None = None
        self.full_state: str | None = None
        self.ended_at: float | None = None
        self.prompts: dict[int, Prompt] = {}
        """Browser seats asked to move now, by seat (several in a simultaneous round)."""
        self.round: dict[str, Any] | None = None
        """The open simultaneous round: ``{"round", "movers", "moved"}`` (who has moved,
        never what), None between rounds."""
        self.history: deque[Entry] = deque(maxlen=history_limit)
        self.watchers: dict[int, set[Client]] = {}
        """Audience -> clients that follow this match."""
        self.private_seats = set(info.human_seats)
        """Seats that can have an audience of their own (browser seats)."""
        self._push("started", {"match_info": info.public()})

    # -- state ---------------------------------------------------------------------------
    @property
    def live(self) -> bool:
        """True until the match ends."""
        return self.status == "live"

    @property
    def pending(self) -> Prompt | None:
        """The first browser seat asked to move now, if any."""
        return next(iter(sorted(self.prompts.items())), (0, None))[1]

    def _event(self, kind: str, fields: dict[str, Any], time: float | None) -> dict[str, Any]:
        out = {"type": "event", "match": self.match_id, "v": self.version, "kind": kind}
        if time is not None:
            out["t"] = time
        out.update(fields)
        return out

    def _push(
        self,
        kind: str,
        fields: dict[str, Any],
        private: dict[int, dict[str, Any]] | None = None,
        time: float | None = None,
    ) -> Entry:
        self.version += 1
        entry = Entry(
            self.version,
            self._event(kind, fields, time),
            {seat: self._event(kind, f, time) for seat, f in (private or {}).items()},
        )
        self.history.append(entry)
        return entry

    def add_turn(self, turn: Turn) -> Entry:
        """Record a turn; returns its event."""
        self.turns.append(turn)
        self.public_state = turn.public_state
        self.board = turn.board
        self.prompts.pop(turn.seat, None)
        if self.round is not None and turn.round == self.round["round"]:
            self.round = None  # its moves arrive once it is over
        private = {}
        if turn.seat in self.private_seats and (not self.moves_public or turn.private):
            private[turn.seat] = {"turn": seat_turn(turn)}
        public = {"turn": public_turn(turn, self.moves_public)}
        return self._push("turn", public, private, turn.time)

    def add_round(self, number: int, movers: list[int], moved: list[int], time: float) -> Entry:
        """Record a simultaneous round's progress: who is asked, who has moved (everyone
        may see it; the moves come as turns once the round is over)."""
        self.round = {"round": number, "movers": movers, "moved": moved}
        return self._push("round", dict(self.round), None, time)

    def add_prompt(self, prompt: Prompt, time: float) -> Entry:
        """Record that a browser seat must move; only that seat sees the prompt."""
        self.prompts[prompt.seat] = prompt
        waiting = {"seat": prompt.seat, "deadline": prompt.deadline}
        mine = {**waiting, "prompt": prompt.new_text, "legal_moves": prompt.legal_moves}
        return self._push("waiting", waiting, {prompt.seat: mine}, time)

    def end(
        self,
        result: dict[str, Any],
        full_state: str | None,
        time: float,
        turns: Iterable[Turn] | None = None,
    ) -> Entry:
        """Record the end; ``turns`` replaces the turn list when given (with observations,
        read back from the database). The event carries the full reveal."""
        if turns is not None:
            self.turns = list(turns)
            if self.turns:
                self.board = self.turns[-1].board
        self.status = str(result.get("status", "finished"))
        self.result = result
        self.full_state = full_state
        self.ended_at = time
        self.prompts.clear()
        self.round = None
        return self._push("ended", {"result": result, "reveal": self.reveal()}, None, time)

    def reveal(self) -> dict[str, Any]:
        """Everything hidden while live: seed, every turn in full (its all-seeing board
        included), the all-seeing start board, the final state."""
        return {
            "seed": self.info.seed,
            "full_state": self.full_state,
            "start_full_board": self.info.start_full_board,
            "turns": [full_turn(t) for t in self.turns],
        }

    def final_board(self) -> dict[str, Any] | None:
        """The board after the last turn as everyone may see it once the match has ended:
        the all-seeing one where it differs from the public one."""
        if self.turns:
            last = self.turns[-1]
            return last.full_board or last.board
        return self.info.start_full_board or self.info.start_board

    # -- reading -------------------------------------------------------------------------
    def snapshot(self, audience: int, epoch: str, resync: bool = False) -> dict[str, Any]:
        """The whole match as ``audience`` may see it now, at version ``self.version``."""
        out: dict[str, Any] = {
            "type": "snapshot",
            "match": self.match_id,
            "v": self.version,
            "epoch": epoch,
            "resync": resync,
            "status": self.status,
            "seat": audience if audience >= 0 else None,
        }
        if not self.live:
            out.update(
                audience="full",
                match_info=self.info.full(),
                turns=[full_turn(t) for t in self.turns],
                public_state=self.public_state,
                board=self.final_board(),
                result=self.result,
                reveal=self.reveal(),
                pending=None,
                round=None,
            )
            return out
        turns = [
            seat_turn(t)
            if t.seat == audience and audience in self.private_seats
            else public_turn(t, self.moves_public)
            for t in self.turns
        ]
        pending: dict[str, Any] | None = None
        prompt = self.prompts.get(audience) or self.pending
        if prompt is not None:
            pending = {"seat": prompt.seat, "deadline": prompt.deadline}
            if prompt.seat == audience:
                pending.update(prompt=prompt.full_text, legal_moves=prompt.legal_moves)
        out.update(
            audience="seat" if audience >= 0 else "public",
            match_info=self.info.public(),
            turns=turns,
            public_state=self.public_state,
            board=self.board,
            result=None,
            pending=pending,
            round=self.round,
        )
        return out

    def missed(self, since: int, audience: int) -> list[str] | None:
        """The frames of the events after version ``since``, or None when they are no
        longer all kept, or the stream cannot be resumed (the client must take a
        snapshot)."""
        if not self.resumable:
            return None
        if since == self.version:
            return []
        if since > self.version or since < 0:
            return None
        if not self.history or self.history[0].version > since + 1:
            return None
        return [e.frame(audience) for e in self.history if e.version > since]

    def summary(self) -> dict[str, Any]:
        """The lobby's line for this match (no hidden information)."""
        out: dict[str, Any] = {
            "id": self.match_id,
            "game_id": self.info.game_id,
            "players": list(self.info.players),
            "run_id": self.info.run_id,
            "group_id": self.info.group_id,
            "started_at": self.info.started_at,
            "num_turns": len(self.turns),
            "status": self.status,
            "human_seats": list(self.info.human_seats),
        }
        if self.result is not None:
            out.update(
                ended_at=self.ended_at,
                rewards=self.result.get("rewards"),
                reason=self.result.get("reason", ""),
            )
            if self.result.get("results") is not None:
                out["results"] = self.result["results"]
        return out


class Lobby:
    """The lobby's state and its batched updates.

    Changes (matches started, moved, ended) accumulate and go out as one ``lobby_update``
    per tick, so the lobby costs the same however many matches run per second.
    """

    def __init__(self, live_limit: int, recent_limit: int) -> None:
        self.live_limit = live_limit
        self.live: dict[str, dict[str, Any]] = {}
        """Listed live matches."""
        self.unlisted: set[str] = set()
        """Live matches over ``live_limit``: counted, not listed."""
        self.recent: deque[dict[str, Any]] = deque(maxlen=recent_limit)
        """Recently ended matches, newest first."""
        self.version = 0
        self.watchers: set[Client] = set()
        self._started: dict[str, dict[str, Any]] = {}
        self._turns: dict[str, int] = {}
        self._ended: dict[str, dict[str, Any]] = {}

    def started(self, summary: dict[str, Any]) -> None:
        """A match started."""
        match_id = summary["id"]
        if match_id in self.live or match_id in self.unlisted:
            return
        if len(self.live) >= self.live_limit:
            self.unlisted.add(match_id)
            return
        self.live[match_id] = summary
        self._started[match_id] = summary

    def moved(self, match_id: str, num_turns: int) -> None:
        """A listed match made a move."""
        line = self.live.get(match_id)
        if line is not None:
            line["num_turns"] = num_turns
            if match_id not in self._started:
                self._turns[match_id] = num_turns

    def ended(self, summary: dict[str, Any]) -> None:
        """A match ended (or was found ended in the database)."""
        match_id = summary["id"]
        self.unlisted.discard(match_id)
        self.live.pop(match_id, None)
        self._started.pop(match_id, None)
        self._turns.pop(match_id, None)
        if any(line["id"] == match_id for line in self.recent):
            return
        self.recent.appendleft(summary)
        self._ended[match_id] = summary

    def add_recent(self, summaries: Iterable[dict[str, Any]]) -> None:
        """Ended matches read from the database, newest first (ones already known are
        skipped); they are sent with the next update."""
        known = {line["id"] for line in self.recent}
        fresh = [s for s in summaries if s["id"] not in known and s["id"] not in self.live]
        for summary in reversed(fresh):
            self.recent.appendleft(summary)
            self._ended[summary["id"]] = summary

    def snapshot(self) -> dict[str, Any]:
        """The whole lobby now."""
        return {
            "type": "lobby",
            "v": self.version,
            "live": list(self.live.values()),
            "live_total": len(self.live) + len(self.unlisted),
            "recent": list(self.recent),
        }

    def take_update(self) -> dict[str, Any] | None:
        """The changes since the last update, as one message (None when nothing changed)."""
        if not (self._started or self._turns or self._ended):
            return None
        self.version += 1
        update = {
            "type": "lobby_update",
            "v": self.version,
            "started": list(self._started.values()),
            "moved": self._turns,
            "ended": list(self._ended.values()),
            "live_total": len(self.live) + len(self.unlisted),
        }
        self._started, self._turns, self._ended = {}, {}, {}
        return update
