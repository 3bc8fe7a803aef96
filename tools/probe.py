"""Probe every TextArena game and write the static catalogue that the game registry loads.

Usage::

    python -m tools.probe                         # probe every game, print a summary
    python -m tools.probe --write                 # ... and rewrite textarena_catalogue.json
    python -m tools.probe --only Poker-v0 --write # refresh some entries, keep the others
    python -m tools.probe --jobs 4 --verbose      # more workers, one stats line per game

For each user-facing id of ``textarena.envs.registration.ENV_REGISTRY`` (every id that is
not a ``-raw`` or ``-train`` variant) the probe instantiates the unwrapped variant
(``<id>-raw`` where it exists) and finds out:

1. whether it can be built here at all, and if not why: missing nltk corpora, an API key
   environment variable, a newer Python (syntax errors on this one), a missing package, or
   some other error;
2. which player counts ``reset(num_players=n)`` accepts, for n in 1..15;
3. how a few short games go under a random policy that picks from the legal moves printed
   in the observation (``games.legal.extract_legal_moves``, the reader arena uses):
   whether the moves were found and accepted, whether play finished, how many steps it
   took, whether any message was sent to a single player (our proxy for hidden
   information), and whether stepping raised;
4. a one-line description.

Every game runs in its own spawned child process with a time limit per phase; a game that
hangs is killed and recorded as ``broken: "timed out during <phase>"``. Network access is
refused inside the child, and the game's prints go to /dev/null.

Games that need nltk data or an API key are probed a second time with stand-ins (a word
list built from TextArena's own dictionary files, a part-of-speech tagger that calls every
word a noun, a dummy key) so that their player counts are known; their ``requires`` record
still says what a real run needs.

Catalogue fields of each game: ``id``, ``ta_id`` (the id to instantiate), ``min_players``,
``max_players``, ``player_counts`` (only when the supported counts have gaps), ``requires``
(``{}``, or any of ``{"python": "3.12"}``, ``{"nltk": [corpora]}``, ``{"env": [variables]}``,
``{"packages": [modules]}``), ``broken`` (null or the reason), ``legal_moves`` (moves were
listed on at least half the turns and at most a tenth of them were refused), ``finished``
(every random game ended within MAX_STEPS and GAME_WALL_S), ``typical_turns`` (median
steps of the finished games), ``private_messages`` (some message other than a prompt or an
invalid-move notice went to a single player of a multi-player game; secrets given only in
the prompts are not seen), ``step_error`` (null or the first error raised by reset or step
during play) and ``description``.
"""

from __future__ import annotations

import argparse
import copy
import functools
import glob
import importlib.metadata
import importlib.util
import json
import multiprocessing
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from types import FrameType
from typing import Any, SupportsIndex

from games.legal import extract_legal_moves

CATALOGUE_PATH = Path(__file__).resolve().parents[1] / "games" / "textarena_catalogue.json"
"""The catalogue the registry reads (``games/textarena_catalogue.json``)."""

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

# A share of the turns on which the extractor must find moves, and the largest share of
# invalid moves among those turns, for ``legal_moves`` to be true.
LEGAL_FOUND_SHARE = 0.5
LEGAL_INVALID_SHARE = 0.1

VARIANT_SUFFIXES = ("-raw", "-train")
API_KEY_NAME = re.compile(r"\b([A-Z][A-Z0-9_]*_API_KEY)\b")
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
NLTK_RESOURCE = re.compile(r"Resource\s+'?([\w./-]+?)'?\s+not\s+found", re.IGNORECASE)
MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


# ---------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------
# Child side: runs inside the spawned process
# ---------------------------------------------------------------------------------------


class _Deadline(BaseException):
    """Raised by SIGALRM inside the game's code; a BaseException so that games' broad
    ``except Exception`` blocks cannot swallow it."""


class _NetworkRefused(OSError):
    """Raised instead of opening a network connection inside the probe."""


@dataclass
class _Recorder:
    """Everything the child's hooks observe while the game runs."""

    network_attempts: int = 0
    downloads: list[str] = field(default_factory=list)
    # (to_id, observation type name, message) for each add_observation call.
    messages: list[tuple[int, str, str]] = field(default_factory=list)


_RECORDER = _Recorder()


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise _Deadline()


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Interrupt the block with :class:`_Deadline` after ``seconds`` (main thread only)."""
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _refuse_network(*args: Any, **kwargs: Any) -> Any:
    _RECORDER.network_attempts += 1
    raise _NetworkRefused("network access is disabled while probing")


_real_sleep = time.sleep


def _sleep_unless_offline(seconds: float | SupportsIndex) -> None:
    """``time.sleep`` that returns at once after a refused connection (retry back-offs)."""
    if not _RECORDER.network_attempts:
        _real_sleep(seconds)


def _block_network() -> None:
    """Make every attempt to resolve a name or open a connection fail at once."""
    socket.socket.connect = _refuse_network  # type: ignore[method-assign]
    socket.socket.connect_ex = _refuse_network  # type: ignore[method-assign]
    socket.getaddrinfo = _refuse_network
    socket.create_connection = _refuse_network


def _silence_output() -> None:
    """Send everything the game prints, from Python or C, to /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)


def _textarena_dir() -> Path:
    """The installed textarena package folder, found without importing it."""
    spec = importlib.util.find_spec("textarena")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("textarena is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _stand_in_words() -> tuple[list[str], list[str]]:
    """A large and a basic English word list from TextArena's own dictionary files."""
    dic = _textarena_dir() / "envs" / "utils" / "data" / "en_US.dic"
    words: list[str] = []
    for line in dic.read_text(encoding="utf-8", errors="replace").splitlines()[1:]:
        word = line.split("/", 1)[0].strip()
        if word.isascii() and word.isalpha() and word.islower():
            words.append(word)
    # Dense in short words (WordLadder needs one-letter neighbours), sparse in longer ones
    # (enough for seven-letter Wordle, few enough to keep WordLadder's searches short).
    short = [word for word in words if 3 <= len(word) <= 5]
    longer = [word for word in words if 6 <= len(word) <= 8]
    return words, short + longer[::5]


class _StandInWords:
    """Replaces ``nltk.corpus.words``: ``words("en")``, ``words("en-basic")``, ``words()``."""

    def __init__(self) -> None:
        self._full, self._basic = _stand_in_words()

    def words(self, fileids: str | None = None) -> list[str]:
        return list(self._basic if fileids == "en-basic" else self._full)

    def fileids(self) -> list[str]:
        return ["en", "en-basic"]


def _stand_in_pos_tag(tokens: Sequence[str], *args: Any, **kwargs: Any) -> list[tuple[str, str]]:
    """Replaces ``nltk.pos_tag``: every word is a noun."""
    return [(token, "NN") for token in tokens]


def _prepare_nltk(stand_ins: bool) -> None:
    """Record nltk downloads instead of attempting them; optionally install stand-ins.

    Must run before textarena is imported, since its modules bind ``nltk.corpus.words``
    at import time.
    """
    import nltk
    import nltk.tag

    def record_download(info_or_id: Any = None, *args: Any, **kwargs: Any) -> bool:
        names = info_or_id if isinstance(info_or_id, list | tuple) else [info_or_id]
        _RECORDER.downloads.extend(str(name) for name in names if name)
        return False

    nltk.download = record_download
    if stand_ins:
        nltk.corpus.words = _StandInWords()
        nltk.pos_tag = _stand_in_pos_tag
        nltk.tag.pos_tag = _stand_in_pos_tag


def _no_api_retries() -> None:
    """Make API clients fail at once instead of retrying and waiting on a refused
    connection: no OpenAI client retries, and no sleeping once the network was refused."""
    time.sleep = _sleep_unless_offline
    try:
        import openai
    except ImportError:
        return
    original = openai.OpenAI.__init__

    @functools.wraps(original)
    def without_retries(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["max_retries"] = 0
        original(self, *args, **kwargs)

    openai.OpenAI.__init__ = without_retries  # type: ignore[method-assign]


def _hook_observations() -> None:
    """Wrap ``State.add_observation`` to record the addressee of every message."""
    import textarena

    original = textarena.State.add_observation

    @functools.wraps(original)
    def recording(
        self: Any, message: str, observation_type: Any, from_id: int = -1, to_id: int = -1
    ) -> Any:
        result = original(self, message, observation_type, from_id, to_id)
        kind = getattr(observation_type, "name", str(observation_type))
        _RECORDER.messages.append((to_id, kind, str(message)))
        return result

    textarena.State.add_observation = recording


def _is_connection_error(exc: BaseException) -> bool:
    """True for the errors that a refused connection turns into (OSError, APIConnectionError)."""
    return isinstance(exc, OSError) or "connection" in type(exc).__name__.lower()


def _first_line(exc: BaseException) -> str:
    """``Type: first line of the message``, at most 200 characters."""
    text = ANSI_ESCAPE.sub("", str(exc)).strip()
    text = text.replace(f"{_textarena_dir().parent}{os.sep}", "")  # no machine-specific paths
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
        return {"nltk": sorted(set(NLTK_RESOURCE.findall(message)) | set(_RECORDER.downloads))}
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


def _merge_requires(target: dict[str, list[str]], extra: dict[str, list[str]]) -> None:
    for key, values in extra.items():
        target[key] = sorted(set(target.get(key, [])) | set(values))


_SENTENCE = re.compile(r"(.+?[.!?])(?:\s|$)")
_SEAT_ONLY = re.compile(r"(?:You are|Welcome,?) Player \d+\W*(?:\(\w+\)\W*)?", re.IGNORECASE)


def _first_sentence(text: str) -> str:
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
        _block_network()
        _prepare_nltk(stand_ins)
        if stand_ins:
            _no_api_retries()
        import textarena

        self.ta = textarena
        _hook_observations()
        _RECORDER.downloads.clear()
        if not self.phase_make():
            return
        self.phase_players()
        if self.report.supported and not self.report.network_error:
            self.phase_play()

    def phase_make(self) -> bool:
        self.send(phase="make")
        try:
            with _time_limit(PHASE_LIMITS_S["make"] - 2):
                self.pristine = self.ta.make(self.ta_id)
        except _Deadline:
            self.send(make_error="timed out during make")
            return False
        except SyntaxError as exc:
            self.send(make_error=_first_line(exc), syntax_file=exc.filename)
            return False
        except BaseException as exc:
            requires = _requirement(exc)
            self.send(requires=requires, make_error=_first_line(exc))
            if _RECORDER.network_attempts:
                self.send(network_error=_first_line(exc))
            return False
        doc = type(_unwrapped(self.pristine)).__doc__ or ""
        if doc.strip():
            self.send(description=_first_sentence(doc))
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
            attempts_before = _RECORDER.network_attempts
            first_message = len(_RECORDER.messages)
            try:
                with _time_limit(RESET_LIMIT_S):
                    env = self.fresh_env()
                    env.reset(num_players=n, seed=0)
                state_players = getattr(getattr(env, "state", None), "num_players", n)
                if state_players != n:
                    errors[n] = f"reset made a {state_players}-player game"
                    continue
            except BaseException as exc:
                if _RECORDER.network_attempts > attempts_before:
                    self.send(network_error=_first_line(exc))
                    supported.append(n)
                elif isinstance(exc, _Deadline):
                    errors[n] = f"reset did not return within {RESET_LIMIT_S:.0f} s"
                else:
                    errors[n] = _first_line(exc)
                    _merge_requires(requires, _requirement(exc))
                continue
            supported.append(n)
            if not self.report.description:
                self.send(description=self._prompt_description(first_message))
        self.send(supported=supported, reset_errors=errors)
        if requires:
            merged = dict(self.report.requires)
            _merge_requires(merged, requires)
            self.send(requires=merged)

    def _prompt_description(self, first_message: int) -> str:
        for to_id, kind, message in _RECORDER.messages[first_message:]:
            if kind == "PROMPT" and to_id in (0, -1):
                return _first_sentence(message)
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
        first_message = len(_RECORDER.messages)
        attempts_before = _RECORDER.network_attempts
        last_seen: dict[int, list[str]] = {}
        try:
            with _time_limit(RESET_LIMIT_S):
                env = self.fresh_env()
                env.reset(num_players=num_players, seed=seed)
        except _Deadline:
            run.step_error = f"reset did not return within {RESET_LIMIT_S:.0f} s"
            return run
        except BaseException as exc:
            run.step_error = f"reset: {_first_line(exc)}"
            return run
        started = time.monotonic()
        try:
            with _time_limit(GAME_WALL_S + STEP_GRACE_S):
                while run.steps < MAX_STEPS and time.monotonic() - started < GAME_WALL_S:
                    player, observation = env.get_observation()
                    moves = extract_legal_moves(_observation_text(observation))
                    if moves:
                        last_seen[player] = moves
                    choices = moves or last_seen.get(player)
                    action = policy.choice(choices) if choices else FALLBACK_ACTION
                    before = len(_RECORDER.messages)
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
        except _Deadline:
            run.step_error = f"a step did not return within {STEP_GRACE_S:.0f} s"
        except BaseException as exc:
            run.step_error = _first_line(exc)
            if _RECORDER.network_attempts > attempts_before and _is_connection_error(exc):
                run.step_error = f"needs network access: {run.step_error}"
        if num_players > 1:
            run.private = any(
                to_id != -1 and kind not in ("PROMPT", "GAME_ADMIN")
                for to_id, kind, _ in _RECORDER.messages[first_message:]
            )
        return run

    @staticmethod
    def _was_invalid(first_message: int) -> bool:
        return any(
            kind not in ("PROMPT", "PLAYER_ACTION") and "invalid" in message.lower()
            for _, kind, message in _RECORDER.messages[first_message:]
        )


def _child_main(conn: Connection, ta_id: str, stand_ins: bool, dummy_keys: list[str]) -> None:
    """Entry point of the spawned child: probe ``ta_id`` and report through ``conn``."""
    _silence_output()
    probe = _ChildProbe(conn, ta_id)
    try:
        probe.run(stand_ins, dummy_keys)
    except BaseException as exc:
        conn.send(("update", {"crashed": _first_line(exc)}))
    finally:
        conn.send(("done", None))
        conn.close()


# ---------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------


def _run_child(ta_id: str, stand_ins: bool = False, dummy_keys: Sequence[str] = ()) -> ChildReport:
    """Probe ``ta_id`` in a spawned child, enforcing PHASE_LIMITS_S; never raises."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(
        target=_child_main,
        args=(sender, ta_id, stand_ins, list(dummy_keys)),
        daemon=True,
    )
    report = ChildReport()
    process.start()
    sender.close()
    deadline = time.monotonic() + PHASE_LIMITS_S["start"]
    try:
        while not report.done:
            if receiver.poll(0.1):
                try:
                    kind, payload = receiver.recv()
                except (EOFError, OSError):
                    break
                if kind == "done":
                    report.done = True
                    break
                for name, value in payload.items():
                    if name == "runs":
                        value = [GameRun(**run) if isinstance(run, dict) else run for run in value]
                    if name == "phase" and value != report.phase:
                        deadline = time.monotonic() + PHASE_LIMITS_S[value]
                    setattr(report, name, value)
            elif not process.is_alive():
                if not receiver.poll(0):
                    break
            elif time.monotonic() > deadline:
                report.timed_out = f"timed out during {report.phase}"
                break
    finally:
        if process.is_alive():
            process.kill()
        process.join(5)
        receiver.close()
    if not report.done and not report.timed_out and not report.crashed:
        report.crashed = f"child process exited with code {process.exitcode} in {report.phase}"
    return report


def _newer_pythons() -> list[tuple[tuple[int, int], str]]:
    """Interpreters of Python 3.12 or newer found on this machine, oldest first."""
    candidates: list[str] = []
    for name in ("python3.12", "python3.13", "python3.14"):
        found = shutil.which(name)
        if found:
            candidates.append(found)
    pyenv_root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates.extend(
        sorted(glob.glob(os.path.join(pyenv_root, "versions", "3.1*", "bin", "python")))
    )
    found_versions: dict[tuple[int, int], str] = {}
    for candidate in candidates:
        try:
            result = subprocess.run(
                [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if result.returncode != 0:
            continue
        try:
            major, minor = (int(part) for part in result.stdout.strip().split("."))
        except ValueError:
            continue
        if (major, minor) >= (3, 12):
            found_versions.setdefault((major, minor), candidate)
    return sorted(found_versions.items())


_NEWER_PYTHONS: list[tuple[tuple[int, int], str]] | None = None
_NEWER_PYTHONS_LOCK = threading.Lock()


def _python_that_parses(folder: Path) -> str | None:
    """The oldest Python >= 3.12 here that parses every file of ``folder``, as "3.12".

    Returns "3.12" without checking when no such interpreter is installed, and None when
    none of the installed ones parses the files (the game is simply broken).
    """
    global _NEWER_PYTHONS
    with _NEWER_PYTHONS_LOCK:
        if _NEWER_PYTHONS is None:
            _NEWER_PYTHONS = _newer_pythons()
    if not _NEWER_PYTHONS:
        return "3.12"
    files = [str(path) for path in sorted(folder.glob("*.py"))]
    check = "import ast, sys\nfor f in sys.argv[1:]: ast.parse(open(f, encoding='utf-8').read())"
    for (major, minor), interpreter in _NEWER_PYTHONS:
        result = subprocess.run(
            [interpreter, "-c", check, *files], capture_output=True, timeout=60, check=False
        )
        if result.returncode == 0:
            return f"{major}.{minor}"
    return None


def _static_facts(source_file: Path) -> tuple[int | None, str]:
    """Player count and description read from the source of a game that cannot be built."""
    try:
        source = source_file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None, ""
    players: int | None = None
    if re.search(r"\bTwoPlayerState\(", source):
        players = 2
    elif re.search(r"\bSinglePlayerState\(", source):
        players = 1
    class_doc = r"^class \w+\([^()]*\):\s*(?:\"\"\"|''')(.*?)(?:\"\"\"|''')"
    doc = re.search(class_doc, source, re.S | re.M)
    return players, _first_sentence(doc.group(1)) if doc else ""


def _summarise_runs(runs: list[GameRun]) -> dict[str, Any]:
    """The catalogue's play fields from the games played."""
    turns = sum(run.steps for run in runs)
    found = sum(run.turns_with_moves for run in runs)
    invalid = sum(run.invalid_with_moves for run in runs)
    finished_steps = [run.steps for run in runs if run.finished]
    errors = [run.step_error for run in runs if run.step_error]
    return {
        "legal_moves": bool(
            turns and found >= LEGAL_FOUND_SHARE * turns and invalid <= LEGAL_INVALID_SHARE * found
        ),
        "finished": bool(runs) and all(run.finished for run in runs),
        "typical_turns": int(statistics.median(finished_steps)) if finished_steps else None,
        "private_messages": any(run.private for run in runs),
        "step_error": errors[0] if errors else None,
    }


def _players_fields(supported: list[int]) -> dict[str, Any]:
    if not supported:
        return {"min_players": None, "max_players": None}
    fields: dict[str, Any] = {"min_players": min(supported), "max_players": max(supported)}
    if supported != list(range(min(supported), max(supported) + 1)):
        fields["player_counts"] = sorted(supported)
    return fields


def _structural_error(report: ChildReport) -> str | None:
    """Why the probe of a buildable game learned nothing, if it learned nothing."""
    if report.timed_out:
        return report.timed_out
    if report.crashed:
        return report.crashed
    if report.make_error:
        return report.make_error
    if not report.supported:
        errors = list(report.reset_errors.values())
        # The count checks (assertions) say little; another error is the real cause.
        telling = [error for error in errors if not error.startswith("AssertionError")]
        errors = telling or errors
        common = max(set(errors), key=errors.count) if errors else "no player count tried"
        return f"reset failed for every player count: {common}"
    return None


def probe_game(game_id: str, ta_id: str, verbose: bool = False) -> dict[str, Any]:
    """Probe one user-facing game id (instantiating ``ta_id``) and return its catalogue entry."""
    started = time.monotonic()
    report = _run_child(ta_id)
    requires = dict(report.requires)
    broken: str | None = None
    description = report.description
    facts: ChildReport = report

    if report.syntax_file:
        version = _python_that_parses(Path(report.syntax_file).parent)
        if version is None:
            broken = report.make_error
        else:
            requires["python"] = [version]
    elif requires.get("nltk") or requires.get("env"):
        # Measure the structure with stand-ins; keep what the real game requires.
        facts = _run_child(ta_id, stand_ins=True, dummy_keys=requires.get("env", []))
        # A failure with stand-ins may be their fault (a word list without 7-letter
        # nouns, say), so it never marks the game broken; the counts then come from source.
        _merge_requires(requires, facts.requires)
        description = description or facts.description
    elif report.network_error and not report.supported:
        broken = f"needs network access: {report.network_error}"
    elif not requires:
        broken = _structural_error(report)
    if facts is report and report.timed_out and broken is None and report.supported:
        broken = report.timed_out

    entry: dict[str, Any] = {"id": game_id, "ta_id": ta_id}
    entry.update(_players_fields(facts.supported))
    if entry["min_players"] is None:
        source = Path(report.syntax_file) if report.syntax_file else _entry_point_file(ta_id)
        players, static_description = _static_facts(source)
        if players is not None:
            entry.update(min_players=players, max_players=players)
        description = description or static_description
    entry["requires"] = {
        key: (values[0] if key == "python" else values) for key, values in sorted(requires.items())
    }
    entry["broken"] = broken
    entry.update(_summarise_runs(facts.runs))
    entry["description"] = description
    if verbose:
        _print_details(game_id, facts, time.monotonic() - started)
    return entry


def _entry_point_file(ta_id: str) -> Path:
    """The source file of the class that ``ta_id`` instantiates, found without importing it."""
    entry_point = _registry()[ta_id].entry_point
    if not isinstance(entry_point, str):
        return Path(sys.modules[entry_point.__module__].__file__ or "")
    module = entry_point.split(":", 1)[0]
    root = _textarena_dir().parent
    return root.joinpath(*module.split(".")).with_suffix(".py")


def _print_details(game_id: str, report: ChildReport, seconds: float) -> None:
    runs = " ".join(
        f"{run.num_players}p/s{run.seed}:{run.steps}{'F' if run.finished else '-'}"
        f"(m{run.turns_with_moves},i{run.invalid_with_moves}{',P' if run.private else ''})"
        for run in report.runs
    )
    print(f"  {game_id}: {seconds:.1f}s players={report.supported} {runs}", file=sys.stderr)


def user_facing_ids(registry: dict[str, Any]) -> dict[str, str]:
    """Map each user-facing id of ``registry`` to the id of its unwrapped variant."""
    ids: dict[str, str] = {}
    for env_id in registry:
        if env_id.endswith(VARIANT_SUFFIXES):
            continue
        ids[env_id] = f"{env_id}-raw" if f"{env_id}-raw" in registry else env_id
    return ids


def _registry() -> dict[str, Any]:
    """The registry, imported quietly in this process (imports are cheap and safe)."""
    from textarena.envs.registration import ENV_REGISTRY

    return dict(ENV_REGISTRY)


def probe_all(
    ids: dict[str, str], jobs: int, verbose: bool = False, progress: bool = True
) -> list[dict[str, Any]]:
    """Probe ``ids`` (user-facing id -> id to instantiate) with ``jobs`` parallel children."""
    entries: list[dict[str, Any]] = []
    lock = threading.Lock()
    started = time.monotonic()

    def one(item: tuple[str, str]) -> None:
        entry = probe_game(*item, verbose=verbose)
        with lock:
            entries.append(entry)
            if progress:
                print(
                    f"[{len(entries)}/{len(ids)} {time.monotonic() - started:.0f}s] "
                    f"{entry['id']}: {_status(entry)}",
                    file=sys.stderr,
                )

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, sorted(ids.items())))
    return sorted(entries, key=lambda entry: entry["id"])


def _status(entry: dict[str, Any]) -> str:
    if entry["broken"]:
        return f"broken ({entry['broken']})"
    parts = [f"{entry['min_players']}-{entry['max_players']}p"]
    if entry["requires"]:
        parts.append(f"requires {json.dumps(entry['requires'])}")
    parts.append(f"legal_moves={entry['legal_moves']} finished={entry['finished']}")
    if entry["step_error"]:
        parts.append(f"step_error={entry['step_error']}")
    return " ".join(parts)


def render_catalogue(games: list[dict[str, Any]], textarena_version: str, python: str) -> str:
    """The catalogue as JSON text, one game per line so that diffs stay readable."""
    lines = [
        "{",
        f'"textarena_version": {json.dumps(textarena_version)},',
        f'"python": {json.dumps(python)},',
        '"games": [',
    ]
    body = [json.dumps(game, ensure_ascii=False) for game in games]
    lines.append(",\n".join(body))
    lines.append("]}")
    return "\n".join(lines) + "\n"


def _existing_games(path: Path, textarena_version: str) -> list[dict[str, Any]]:
    """Entries of the catalogue at ``path`` when it was made for ``textarena_version``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if data.get("textarena_version") != textarena_version:
        return []
    return list(data.get("games", []))


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.probe",
        description="Probe every TextArena game and write the catalogue the registry loads.",
    )
    parser.add_argument("--write", action="store_true", help=f"write {CATALOGUE_PATH.name}")
    parser.add_argument("--only", nargs="+", metavar="ID", help="probe only these game ids")
    parser.add_argument("--jobs", type=int, default=2, help="parallel children (default 2)")
    parser.add_argument("--verbose", action="store_true", help="print per-game play statistics")
    parser.add_argument("--output", type=Path, default=CATALOGUE_PATH, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    ids = user_facing_ids(_registry())
    if args.only:
        unknown = [game_id for game_id in args.only if game_id not in ids]
        if unknown:
            parser.error(f"unknown game ids: {', '.join(unknown)}")
        ids = {game_id: ids[game_id] for game_id in args.only}

    started = time.monotonic()
    games = probe_all(ids, args.jobs, verbose=args.verbose)
    elapsed = time.monotonic() - started
    textarena_version = importlib.metadata.version("textarena")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"

    if args.write:
        if args.only:
            kept = [
                g for g in _existing_games(args.output, textarena_version) if g["id"] not in ids
            ]
            games = sorted(kept + games, key=lambda game: game["id"])
        args.output.write_text(render_catalogue(games, textarena_version, python), encoding="utf-8")
        print(f"wrote {len(games)} games to {args.output}", file=sys.stderr)
    else:
        for game in games:
            print(json.dumps(game, ensure_ascii=False))
    usable = sum(1 for game in games if not game["broken"] and not game["requires"])
    print(f"probed {len(ids)} games in {elapsed:.0f} s; {usable} usable here", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
