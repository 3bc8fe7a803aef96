"""The kit's hidden-information checks (``hidden``): what spectators are shown matches
what the game shows its seats, private sentences and private moves stay private while a
match is live, and ``Game.resample_hidden`` redraws only what a seat does not know."""

from __future__ import annotations

import json
import pickle
import random
import re
from collections.abc import Sequence
from typing import Any

from games.api import Game, MessageKind
from games.conformance.episodes import FALLBACK_MOVE, Actions, Episode, Listed, fork
from games.conformance.report import CheckStatus
from games.conformance.state import KitState
from games.session import GameSession, Status
from games.sessionerrors import GameError, game_line

MIN_SECRET_CHARS = 12
"""Private sentences shorter than this are not searched for in public texts (too common)."""
CANARY = "zq-canary-"
"""Appended, with the move's number, to every move of the canary episode."""

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


class HiddenChecks(KitState):
    """Private moves echoed to single seats, pairs of moves compared on copies, redraws of
    hidden information, secret sentences and canaries: the ``hidden`` check."""

    def echo_problems(self, episode: Episode) -> list[str]:
        """A game registered with public moves must not echo a move to single seats only:
        the server would show spectators what the other seats were not shown."""
        if not self.spectators_see_moves:
            return []
        session = self.runner.session(episode.seed)
        try:
            for actions in episode.moves:
                self.runner.tick()
                for record in session.step_round(actions):
                    if record.private:
                        return [
                            f"seat {record.seat}'s move {record.index} of seed {episode.seed} "
                            f"({(record.move or record.action)[:30]!r}) was sent to single seats "
                            f"only (a message with to=...), but {self.spec.game_id} is "
                            "registered with public moves, so spectators of a live match "
                            "would see it: register it with hidden_information=True, or "
                            "send the move to every seat (to=None)"
                        ]
                if session.done:
                    break
        except GameError:
            pass
        finally:
            self.runner.note_views(session)
            session.close()
        return []

    def compare_moves(
        self,
        session: GameSession,
        seat: int,
        own: list[str] | None,
        base: Actions,
        where: str,
        moves: list[Actions],
        seed: int,
    ) -> None:
        """Two different legal moves of ``seat`` on two copies, the other seats' moves the
        same: where spectators see the move, the game must show it to every seat too (its
        public messages, state or board tell the two apart); where the move is private,
        what the public messages do not tell apart, the public state and board must not
        either."""
        choices = sorted(set(own or []))
        if len(choices) < 2:
            return
        pair = (choices[0], choices[-1])
        seen_public = len(session.public_messages())
        outputs = []
        for text in pair:
            self.runner.tick()
            twin = fork(self.runner, session, moves, seed)
            try:
                records = twin.step_round({**base, seat: text})
            except GameError:
                return  # reported by the legal moves tried
            finally:
                self.runner.note_views(twin)
            if twin.done or not all(r.valid for r in records):
                return  # after the end everything is shown; invalid moves are tried apart
            record = next(r for r in records if r.seat == seat)
            visible = self.spectators_see_moves and not record.private
            if record.round is not None and not twin.round_over:
                visible = False  # the round waits for a retry: its moves are unseen
            outputs.append((visible, spectator_texts(twin, seen_public)))
            self.runner.note_views(twin)
        self.fork_checks["compared"] += 1
        (visible, (messages_a, state_a, board_a)), (_, (messages_b, state_b, board_b)) = outputs
        a, b = pair
        if visible:
            if (messages_a, state_a, board_a) == (messages_b, state_b, board_b):
                self.forks["hidden"].append(
                    f"spectators of a live match see seat {seat}'s move at {where}, but the "
                    f"game shows it to no other seat ({a!r} and {b!r} leave the same public "
                    "messages, state and board): register the game with "
                    "hidden_information=True, or announce each move to every seat (a "
                    "message with to=None)"
                )
            return
        if messages_a != messages_b:
            return  # the game said something about the move in public: revealed
        for name, x, y in (("public state", state_a, state_b), ("public board", board_a, board_b)):
            if x != y:
                self.forks["hidden"].append(
                    f"the {name} shows seat {seat}'s private move at {where} before it is "
                    f"revealed ({a!r} vs {b!r}: {first_difference(x, y)}): keep a move that "
                    f"is not revealed out of {name.replace(' ', '_')}() until a public "
                    "message reveals it"
                )
                return

    def resample(
        self,
        session: GameSession,
        seat: int,
        listed: Listed,
        where: str,
        moves: list[Actions],
        seed: int,
    ) -> None:
        """``Game.resample_hidden`` on a copy of the game (so it cannot change the game
        played): the copy it was called on must stay as it was, and the redrawn game must
        show ``seat`` the same public state, public board and legal moves."""
        twin = fork(self.runner, session, moves, seed)
        game = twin.game
        seats = sorted(listed)
        try:
            before = _views(game, seats, seat)
            state = _pickled(game)
            redrawn = game.resample_hidden(seat, random.Random(where))
            if redrawn is None:
                return
            self.fork_checks["hidden"] += 1
            after_call = _views(game, seats, seat)
            after = _views(redrawn, [seat], seat)
            changed = redrawn is game or (state is not None and _pickled(game) != state)
        except Exception as exc:
            self.forks["resample"].append(
                f"resample_hidden({seat}, rng) at {where} raised {_game_error(exc)}"
            )
            return
        if changed or after_call != before:
            what = f" ({first_difference(before, after_call)})" if after_call != before else ""
            self.forks["resample"].append(
                f"resample_hidden({seat}, rng) at {where} changed the game it was called on"
                f"{what}: it must return a new game (copy.deepcopy(self), then redraw) and "
                "leave this one as it was"
            )
            return
        names = ("public state", "public board", f"seat {seat}'s legal moves")
        for name, a, b in zip(names, before[:3], after[:3], strict=True):
            if a != b:
                self.forks["resample"].append(
                    f"resample_hidden({seat}, rng) at {where} changed the {name} "
                    f"({first_difference(a, b)}): a redraw changes only what seat {seat} "
                    "does not know (the other seats' cards, picks, roles)"
                )
                return

    def check_hidden(self) -> None:
        """``hidden``: no secret turned public while live, no canary of a private move
        either, and the copies compared and redrawn showed nothing they must not."""
        problems: list[str] = []
        secrets = 0
        for episode in self.episodes:
            found, count = self.secret_leaks(episode)
            problems += found
            secrets += count
        private_moves = any(
            m[1] == MessageKind.ACTION.value and m[3] is not None
            for e in self.episodes
            for t in e.transcripts
            for m in t
        )
        canary = "moves are public"
        if private_moves:
            self.runner.tick()
            seed = self.episodes[0].seed
            episode, leaks = self.canary_episode(seed)
            problems += leaks
            canary = f"canary in {episode.num_moves} private moves never public"
        problems += self.private_echoes + self.forks["hidden"] + self.forks["resample"]
        compared = self.fork_checks["compared"]
        resampled = self.fork_checks["hidden"]
        detail = (
            f"{secrets} private sentences never public while live; {canary}; "
            f"{compared} pairs of moves compared; "
            + (f"redrawn at {resampled} points" if resampled else "no redraw (not offered)")
        )
        if problems:
            self.result("hidden", CheckStatus.FAIL, problems[0])
        else:
            self.result("hidden", CheckStatus.PASS, detail)

    def secret_leaks(self, episode: Episode) -> tuple[list[str], int]:
        """Replay ``episode``; a sentence sent privately to some seats but not all, and not
        public before, must not turn up in a public text while the game is live."""
        session = self.runner.session(episode.seed)
        public_seen: set[str] = set()
        public_text = ""
        holders: dict[str, set[int]] = {}
        since: dict[str, int] = {}
        problems: list[str] = []
        seen = [0] * session.num_players
        public_count = 0
        everyone = set(range(session.num_players))

        def collect(step: int, live: bool) -> None:
            nonlocal public_count, public_text
            public = session.public_messages()
            new_public = [m.text for m in public[public_count:]]
            public_count = len(public)
            if live:
                state = session.public_state() or ""
                board = session.public_board()
                self.runner.views_read += 2
                texts = [*new_public, state, json.dumps(board) if board else ""]
                secrets = [f for f, seats in holders.items() if seats != everyone]
                for text in texts:
                    for fragment in secrets:
                        if since[fragment] < step and fragment in text:
                            problems.append(
                                f"a text sent privately at move {since[fragment]} of seed "
                                f"{episode.seed} is public at move {step}: {fragment[:60]!r}"
                            )
                            return
            for text in new_public:
                public_seen.update(_fragments(text))
            public_text += "\n".join(new_public) + "\n"
            for seat in range(session.num_players):
                messages = session.seat_messages(seat)
                for m in messages[seen[seat] :]:
                    if m.to is None or m.kind is MessageKind.ACTION:
                        continue
                    for fragment in _fragments(m.text):
                        if fragment in public_seen or fragment in public_text:
                            continue
                        holders.setdefault(fragment, set()).add(seat)
                        since.setdefault(fragment, step)
                seen[seat] = len(messages)

        try:
            collect(0, True)
            for i, actions in enumerate(episode.moves):
                self.runner.tick()
                session.step_round(actions)
                collect(i + 1, not session.done)
                if problems:
                    break
            if session.done:  # the views spectators get after the end
                session.full_board()
                session.full_state()
                self.runner.views_read += 2
        except GameError:
            pass
        self.runner.note_views(session)
        session.close()
        secret = sum(1 for seats in holders.values() if seats != everyone)
        return problems[:1], secret

    def canary_episode(self, seed: int) -> tuple[Episode, list[str]]:
        """Random moves, each with its own canary appended; the canary of a move that was
        not shown to every seat must not appear in public while the game is live."""
        problems: list[str] = []
        secret: set[str] = set()
        last: dict[int, str] = {}
        public_count = 0
        pattern = re.compile(re.escape(CANARY) + r"\d{4}")
        count = [0]
        tokens: dict[tuple[int, int], str] = {}

        def token(turn: int, seat: int) -> str:
            key = (turn, seat)
            if key not in tokens:
                tokens[key] = f"{CANARY}{count[0]:04d}"
                count[0] += 1
            return tokens[key]

        def on_turn(session: GameSession, listed: Listed, turn: int) -> None:
            nonlocal public_count
            # The previous step's moves are private unless the game showed them to every
            # seat.
            for seat, previous in last.items():
                echoed = None
                for m in reversed(session.seat_messages(seat)):
                    if m.kind is MessageKind.ACTION and previous in m.text:
                        echoed = m
                        break
                if echoed is None or echoed.to is not None:
                    secret.add(previous)
            last.clear()
            last.update({seat: token(turn, seat) for seat in listed})
            public = session.public_messages()
            texts = [m.text for m in public[public_count:]]
            public_count = len(public)
            texts += [session.public_state() or "", json.dumps(session.public_board() or {})]
            for text in texts:
                for canary in pattern.findall(text):
                    if canary in secret and not problems:
                        problems.append(
                            f"the text of private move {int(canary[len(CANARY) :])} of seed "
                            f"{seed} is public before move {turn}"
                        )

        rng = random.Random(f"{self.spec.game_id}/{seed}/canary")

        def choose(session: GameSession, seat: int, listed: list[str] | None, turn: int) -> str:
            move = rng.choice(listed) if listed else FALLBACK_MOVE
            return f"{move} {token(turn, seat)}"

        episode = self.runner.play(seed, choose, on_turn=on_turn)
        if episode.status not in (None, Status.ABORTED):
            assert episode.status is not None
            self.endings.append((f"canary seed {seed}", episode.status, episode.rewards))
        return episode, problems


def spectator_texts(session: GameSession, since: int) -> tuple[list[str], str, Any]:
    """What every seat and spectator is shown after a step: the public messages from
    ``since`` on, the public state and the public board."""
    messages = [m.text for m in session.public_messages()[since:]]
    return messages, session.public_state() or "", session.public_board()


def first_difference(a: Any, b: Any, path: str = "") -> str:
    """Where two JSON values first differ: ``extra.bids.0: 4 vs 5``."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key) != b.get(key):
                return first_difference(a.get(key), b.get(key), f"{path}.{key}" if path else key)
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return first_difference(x, y, f"{path}[{i}]")
    return f"{path or 'the value'}: {str(a)[:40]} vs {str(b)[:40]}"


def _fragments(text: str) -> set[str]:
    """The sentences and lines of ``text`` long enough to be searched for."""
    return {
        part.strip() for part in _SENTENCE_END.split(text) if len(part.strip()) >= MIN_SECRET_CHARS
    }


def _board(game: Game) -> Any:
    board = game.public_board()
    return board.as_dict() if board is not None else None


def _views(game: Game, seats: Sequence[int], seat: int) -> tuple[Any, ...]:
    """What ``seat`` is shown of ``game`` (public state, public board, its legal moves),
    then the legal moves of ``seats`` and the all-seeing state."""
    return (
        game.public_state(),
        _board(game),
        game.legal_moves(seat),
        tuple(game.legal_moves(s) for s in seats),
        game.full_state(),
    )


def _pickled(game: Game) -> bytes | None:
    """The game's whole state as bytes (to tell whether a call changed it), or None when
    it does not pickle."""
    try:
        return pickle.dumps(game)
    except Exception:
        return None


def _game_error(exc: BaseException) -> str:
    """``KeyError: 7 (game.py:88)``."""
    where = game_line(exc)
    return f"{type(exc).__name__}: {exc}" + (f" ({where})" if where else "")
