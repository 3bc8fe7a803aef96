"""The probe's child process: one game, probed phase by phase, reported to the parent.

``child_main`` runs in a spawned process (``tools.probe_entry`` starts it and enforces
``PHASE_LIMITS_S``). With the game's surroundings in place (``tools.probe_sandbox``) it
builds the game, tries ``reset(num_players=n)`` for n in 1..MAX_PLAYERS_TRIED, and plays
a few short games with a random policy that picks from the legal moves printed in the
observation (``games.legal.extract_legal_moves``, the reader arena uses); each finding is
sent to the parent as it is made (``ChildReport``), so a child killed for its time still
tells what it found. What an error says is missing (nltk data, an API key, a package) is
read here too.
"""

from __future__ import annotations

import copy
import os
import random
import re
import time
import traceback
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from games.legal import extract_legal_moves
from tools.probe_sandbox import (
    RECORDER,
    Deadline,
    block_network,
    hook_observations,
    no_api_retries,
    prepare_nltk,
    silence_output,
    textarena_dir,
    time_limit,
)

MAX_PLAYERS_TRIED = 15
PLAY_SEEDS = (0, 1, 2)
MAX_STEPS = 200
GAME_WALL_S = 10.0
PLAY_BUDGET_S = 30.0  # no further game starts once a game's play phase has used this much
STEP_GRACE_S = 5.0
RESET_LIMIT_S = 20.0
FALLBACK_ACTION = "[0]"
DESCRIPTION_CHARS = 100
DUMMY_KEY = "probe-dummy-key"

# Wall-clock limits of the child's phases, enforced by the parent (which kills the child).
PHASE_LIMITS_S: dict[str, float] = {"start": 30.0, "make": 30.0, "players": 150.0, "play": 180.0}


API_KEY_NAME = re.compile(r"\b([A-Z][A-Z0-9_]*_API_KEY)\b")
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
NLTK_RESOURCE = re.compile(r"Resource\s+'?([\w./-]+?)'?\s+not\s+found", re.IGNORECASE)
MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


@dataclass
class GameRun:
    """The outcome of one game played with the random policy."""

    num_players: int
    seed: int
    steps: int = 0
    finished: bool = False
    turns_with_moves: int = 0
    invalid_with_moves: int = 0
    private: bool = False
    step_error: str | None = None


@dataclass
class ChildReport:
    """What one child process found out about one game (sent to the parent piecewise)."""

    phase: str = "start"
    done: bool = False
    requires: dict[str, list[str]] = field(default_factory=dict)
    make_error: str | None = None
    syntax_file: str | None = None
    network_error: str | None = None
    supported: list[int] = field(default_factory=list)
    reset_errors: dict[int, str] = field(default_factory=dict)
    runs: list[GameRun] = field(default_factory=list)
    description: str = ""
    timed_out: str | None = None
    crashed: str | None = None


def _is_connection_error(exc: BaseException) -> bool:
    """True for the errors that a refused connection turns into (OSError, APIConnectionError)."""
    return isinstance(exc, OSError) or "connection" in type(exc).__name__.lower()


def _first_line(exc: BaseException) -> str:
    """``Type: first line of the message``, at most 200 characters."""
    text = ANSI_ESCAPE.sub("", str(exc)).strip()
    text = text.replace(f"{textarena_dir().parent}{os.sep}", "")  # no machine-specific paths
    first = next((line.strip() for line in text.splitlines() if line.strip("* \t")), "")
    return f"{type(exc).__name__}: {first}"[:200].rstrip(": ")


def _api_keys_in(exc: BaseException) -> list[str]:
    """Names of the API key variables that ``exc`` mentions, or else that the failing code
    reads (``getenv``/``environ`` lines of the textarena files in its traceback)."""
    names = set(API_KEY_NAME.findall(str(exc)))
    if names:
        return sorted(names)
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        filename = frame.f_code.co_filename
        if "textarena" not in filename:
            continue
        try:
            source = Path(filename).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in source.splitlines():
            if "getenv" in line or "environ" in line:
                names.update(API_KEY_NAME.findall(line))
    return sorted(names)


def _requirement(exc: BaseException) -> dict[str, list[str]]:
    """The missing prerequisite that ``exc`` reveals, e.g. ``{"nltk": ["words"]}``, or {}."""
    message = ANSI_ESCAPE.sub("", str(exc))
    if isinstance(exc, LookupError) and NLTK_RESOURCE.search(message):
        return {"nltk": sorted(set(NLTK_RESOURCE.findall(message)) | set(RECORDER.downloads))}
    lowered = message.lower()
    if "api key" in lowered or "api_key" in lowered:
        keys = _api_keys_in(exc)
        if keys:
            return {"env": keys}
    if isinstance(exc, ImportError):
        match = MISSING_MODULE.search(message)
        if match and not match.group(1).startswith("textarena"):
            return {"packages": [match.group(1).split(".")[0]]}
    return {}


def merge_requires(target: dict[str, list[str]], extra: dict[str, list[str]]) -> None:
    """Add ``extra``'s requirements to ``target`` (each list sorted, without repeats)."""
    for key, values in extra.items():
        target[key] = sorted(set(target.get(key, [])) | set(values))


_SENTENCE = re.compile(r"(.+?[.!?])(?:\s|$)")
_SEAT_ONLY = re.compile(r"(?:You are|Welcome,?) Player \d+\W*(?:\(\w+\)\W*)?", re.IGNORECASE)


def first_sentence(text: str) -> str:
    """The first informative sentence of ``text`` on one line, cut to DESCRIPTION_CHARS.

    Sentences that only name the seat ("You are Player 0.") or have under four words are
    skipped.
    """
    flat = " ".join(text.split())
    sentences = [match.group(1) for match in _SENTENCE.finditer(flat)] or [flat]
    informative = [s for s in sentences if not _SEAT_ONLY.fullmatch(s) and len(s.split()) >= 4]
    sentence = informative[0] if informative else sentences[0]
    if len(sentence) > DESCRIPTION_CHARS:
        sentence = sentence[: DESCRIPTION_CHARS - 3].rstrip() + "..."
    return sentence


def _unwrapped(env: Any) -> Any:
    while hasattr(env, "env") and env.__class__.__module__.startswith("textarena.wrappers"):
        env = env.env
    return env


def _observation_text(observation: Any) -> str:
    """The text of a raw observation (a list of messages) or of a wrapped one (a string)."""
    if isinstance(observation, str):
        return observation
    if isinstance(observation, list | tuple):
        parts: list[str] = []
        for item in observation:
            if isinstance(item, list | tuple) and len(item) >= 2:
                parts.append(str(item[1]))
            else:
                parts.append(str(item))
        return "\n".join(parts)
    return str(observation)


class _ChildProbe:
    """Runs the probe's phases for one game inside the child, reporting to the parent."""

    def __init__(self, conn: Connection, ta_id: str) -> None:
        self.conn = conn
        self.ta_id = ta_id
        self.report = ChildReport()
        self.ta: Any = None
        self.pristine: Any = None

    def send(self, **fields: Any) -> None:
        for name, value in fields.items():
            setattr(self.report, name, value)
        self.conn.send(("update", fields))

    def fresh_env(self) -> Any:
        """A never-reset env: a copy of the one built in phase_make (some games take
        seconds to build), or a newly made one when the copy fails."""
        try:
            return copy.deepcopy(self.pristine)
        except Exception:
            return self.ta.make(self.ta_id)

    def run(self, stand_ins: bool, dummy_keys: list[str]) -> None:
        for key in dummy_keys:
            os.environ.setdefault(key, DUMMY_KEY)
        block_network()
        prepare_nltk(stand_ins)
        if stand_ins:
            no_api_retries()
        import textarena

        self.ta = textarena
        hook_observations()
        RECORDER.downloads.clear()
        if not self.phase_make():
            return
        self.phase_players()
        if self.report.supported and not self.report.network_error:
            self.phase_play()

    def phase_make(self) -> bool:
        self.send(phase="make")
        try:
            with time_limit(PHASE_LIMITS_S["make"] - 2):
                self.pristine = self.ta.make(self.ta_id)
        except Deadline:
            self.send(make_error="timed out during make")
            return False
        except SyntaxError as exc:
            self.send(make_error=_first_line(exc), syntax_file=exc.filename)
            return False
        except BaseException as exc:
            requires = _requirement(exc)
            self.send(requires=requires, make_error=_first_line(exc))
            if RECORDER.network_attempts:
                self.send(network_error=_first_line(exc))
            return False
        doc = type(_unwrapped(self.pristine)).__doc__ or ""
        if doc.strip():
            self.send(description=first_sentence(doc))
        return True

    def phase_players(self) -> None:
        """Try reset(num_players=n) for n in 1..MAX_PLAYERS_TRIED, each on a fresh env.

        A count whose reset got as far as reaching for the network (a game that asks a
        hosted model during reset) counts as supported: the game accepted it.
        """
        self.send(phase="players")
        supported: list[int] = []
        errors: dict[int, str] = {}
        requires: dict[str, list[str]] = {}
        for n in range(1, MAX_PLAYERS_TRIED + 1):
            attempts_before = RECORDER.network_attempts
            first_message = len(RECORDER.messages)
            try:
                with time_limit(RESET_LIMIT_S):
                    env = self.fresh_env()
                    env.reset(num_players=n, seed=0)
                state_players = getattr(getattr(env, "state", None), "num_players", n)
                if state_players != n:
                    errors[n] = f"reset made a {state_players}-player game"
                    continue
            except BaseException as exc:
                if RECORDER.network_attempts > attempts_before:
                    self.send(network_error=_first_line(exc))
                    supported.append(n)
                elif isinstance(exc, Deadline):
                    errors[n] = f"reset did not return within {RESET_LIMIT_S:.0f} s"
                else:
                    errors[n] = _first_line(exc)
                    merge_requires(requires, _requirement(exc))
                continue
            supported.append(n)
            if not self.report.description:
                self.send(description=self._prompt_description(first_message))
        self.send(supported=supported, reset_errors=errors)
        if requires:
            merged = dict(self.report.requires)
            merge_requires(merged, requires)
            self.send(requires=merged)

    def _prompt_description(self, first_message: int) -> str:
        for to_id, kind, message in RECORDER.messages[first_message:]:
            if kind == "PROMPT" and to_id in (0, -1):
                return first_sentence(message)
        return ""

    def phase_play(self) -> None:
        self.send(phase="play")
        low, high = min(self.report.supported), max(self.report.supported)
        plan = [(low, PLAY_SEEDS[0])]
        if high != low:
            plan.append((high, PLAY_SEEDS[0]))  # before the other seeds: the budget may end
        plan.extend((low, seed) for seed in PLAY_SEEDS[1:])
        runs: list[GameRun] = []
        started = time.monotonic()
        for num_players, seed in plan:
            if runs and time.monotonic() - started > PLAY_BUDGET_S:
                break
            runs.append(self.play_one(num_players, seed))
            self.report.runs = runs
            self.conn.send(("update", {"runs": [asdict(run) for run in runs]}))

    def play_one(self, num_players: int, seed: int) -> GameRun:
        """Play one game with the random legal-move policy, within the step and time caps.

        The policy picks uniformly from the moves that the current player's latest
        observation lists; when it lists none, from the last list that player saw (games
        such as 2048 print their moves only once), else it sends FALLBACK_ACTION.
        """
        run = GameRun(num_players=num_players, seed=seed)
        policy = random.Random(f"{self.ta_id}/{num_players}/{seed}")
        first_message = len(RECORDER.messages)
        attempts_before = RECORDER.network_attempts
        last_seen: dict[int, list[str]] = {}
        try:
            with time_limit(RESET_LIMIT_S):
                env = self.fresh_env()
                env.reset(num_players=num_players, seed=seed)
        except Deadline:
            run.step_error = f"reset did not return within {RESET_LIMIT_S:.0f} s"
            return run
        except BaseException as exc:
            run.step_error = f"reset: {_first_line(exc)}"
            return run
        started = time.monotonic()
        try:
            with time_limit(GAME_WALL_S + STEP_GRACE_S):
                while run.steps < MAX_STEPS and time.monotonic() - started < GAME_WALL_S:
                    player, observation = env.get_observation()
                    moves = extract_legal_moves(_observation_text(observation))
                    if moves:
                        last_seen[player] = moves
                    choices = moves or last_seen.get(player)
                    action = policy.choice(choices) if choices else FALLBACK_ACTION
                    before = len(RECORDER.messages)
                    done, _ = env.step(action)
                    run.steps += 1
                    if moves:
                        run.turns_with_moves += 1
                        if self._was_invalid(before):
                            run.invalid_with_moves += 1
                    if done:
                        run.finished = True
                        break
                if run.finished:
                    env.close()
        except Deadline:
            run.step_error = f"a step did not return within {STEP_GRACE_S:.0f} s"
        except BaseException as exc:
            run.step_error = _first_line(exc)
            if RECORDER.network_attempts > attempts_before and _is_connection_error(exc):
                run.step_error = f"needs network access: {run.step_error}"
        if num_players > 1:
            run.private = any(
                to_id != -1 and kind not in ("PROMPT", "GAME_ADMIN")
                for to_id, kind, _ in RECORDER.messages[first_message:]
            )
        return run

    @staticmethod
    def _was_invalid(first_message: int) -> bool:
        return any(
            kind not in ("PROMPT", "PLAYER_ACTION") and "invalid" in message.lower()
            for _, kind, message in RECORDER.messages[first_message:]
        )


def child_main(conn: Connection, ta_id: str, stand_ins: bool, dummy_keys: list[str]) -> None:
    """Entry point of the spawned child: probe ``ta_id`` and report through ``conn``."""
    silence_output()
    probe = _ChildProbe(conn, ta_id)
    try:
        probe.run(stand_ins, dummy_keys)
    except BaseException as exc:
        conn.send(("update", {"crashed": _first_line(exc)}))
    finally:
        conn.send(("done", None))
        conn.close()
