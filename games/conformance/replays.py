"""The kit's determinism checks: the same seed and moves give the same game (``seeded``),
also when two games are played in turns with other code drawing from the global
``random`` (``interleaved``), and from a factory that went through pickle (``pickles``)."""

from __future__ import annotations

import contextlib
import pickle
import random

from games.conformance.episodes import Episode, EpisodeRunner, differences
from games.conformance.report import CheckStatus
from games.conformance.state import KitState
from games.sessionerrors import GameError


class ReplayChecks(KitState):
    """Replays of the random episodes: ``seeded``, ``interleaved`` and ``pickles``."""

    def check_seeded(self) -> None:
        """``seeded``: each episode replayed gives the same transcripts and outcome."""
        problems = []
        for episode in self.episodes:
            again = self.runner.replay(episode)
            problems += differences(episode, again, f"seed {episode.seed}")
        if problems:
            self.result("seeded", CheckStatus.FAIL, problems[0])
        else:
            turns = sum(e.num_moves for e in self.episodes)
            self.result("seeded", CheckStatus.PASS, f"{len(self.episodes)} replays, {turns} moves")

    def check_interleaved(self) -> None:
        """``interleaved``: two episodes replayed move by move in turns on one thread,
        the global ``random`` reseeded between moves, give the same games."""
        first = self.episodes[0]
        second = self.episodes[1] if len(self.episodes) > 1 else self.episodes[0]
        pair = [first, second]
        sessions = [self.runner.session(e.seed) for e in pair]
        replays = [Episode(seed=e.seed) for e in pair]
        queues = [list(e.moves) for e in pair]
        noise = random.Random(7)
        while any(queues):
            self.runner.tick()
            for i, session in enumerate(sessions):
                if not queues[i]:
                    continue
                if session.done:
                    queues[i].clear()
                    continue
                actions = queues[i].pop(0)
                random.seed(noise.random())  # other code reseeding between moves
                replays[i].moves.append(actions)
                with contextlib.suppress(GameError):  # the session is aborted, with why
                    session.step_round(actions)
        for i, session in enumerate(sessions):
            self.runner.finish(session, replays[i])
        problems = []
        for episode, again in zip(pair, replays, strict=True):
            problems += differences(episode, again, f"seed {episode.seed} interleaved")
        if problems:
            self.result("interleaved", CheckStatus.FAIL, problems[0])
        else:
            self.result("interleaved", CheckStatus.PASS, "two games, move by move")

    def check_pickles(self, kit: object) -> None:
        """``pickles``: the factory, the spec and ``kit`` (the game's kit) pickle, and the
        unpickled factory plays the first episode the same."""
        try:
            factory = pickle.loads(pickle.dumps(self.factory))
            pickle.loads(pickle.dumps(self.spec))
            pickle.loads(pickle.dumps(kit))
        except Exception as exc:
            self.result("pickles", CheckStatus.FAIL, f"{type(exc).__name__}: {exc}")
            return
        runner = EpisodeRunner(  # the same budget on the same clock as the kit's runner
            self.spec,
            factory,
            self.runner.num_players,
            self.runner.limits,
            self.runner.deadline,
            self.runner.clock,
        )
        try:
            again = runner.replay(self.episodes[0])
        except (GameError, ValueError) as exc:
            self.result("pickles", CheckStatus.FAIL, f"the unpickled factory fails: {exc}")
            return
        problems = differences(self.episodes[0], again, "unpickled factory")
        if problems:
            self.result("pickles", CheckStatus.FAIL, problems[0])
        else:
            self.result("pickles", CheckStatus.PASS, "factory, spec and kit; same game after")
