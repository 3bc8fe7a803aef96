"""What the probe's child changes around a game before it runs, and the time limit on it.

The game must not reach the network, print, download nltk data or wait on API retries, and
every message it sends must be seen: ``block_network`` makes every connection fail at once
(and counts the attempts), ``silence_output`` sends its prints to /dev/null,
``prepare_nltk`` records downloads instead of attempting them (and can put stand-ins in
place of nltk's word list and tagger), ``no_api_retries`` makes API clients fail at once,
and ``hook_observations`` records the addressee of every message (``RECORDER``).
``time_limit`` interrupts the game's code with ``Deadline``, which its broad ``except
Exception`` blocks cannot swallow.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import signal
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, SupportsIndex


class Deadline(BaseException):
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


RECORDER = _Recorder()
"""What this process's hooks observed (one game per child process)."""


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise Deadline()


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Interrupt the block with :class:`Deadline` after ``seconds`` (main thread only)."""
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _refuse_network(*args: Any, **kwargs: Any) -> Any:
    RECORDER.network_attempts += 1
    raise _NetworkRefused("network access is disabled while probing")


_real_sleep = time.sleep


def _sleep_unless_offline(seconds: float | SupportsIndex) -> None:
    """``time.sleep`` that returns at once after a refused connection (retry back-offs)."""
    if not RECORDER.network_attempts:
        _real_sleep(seconds)


def block_network() -> None:
    """Make every attempt to resolve a name or open a connection fail at once."""
    socket.socket.connect = _refuse_network  # type: ignore[method-assign]
    socket.socket.connect_ex = _refuse_network  # type: ignore[method-assign]
    socket.getaddrinfo = _refuse_network
    socket.create_connection = _refuse_network


def silence_output() -> None:
    """Send everything the game prints, from Python or C, to /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)


def textarena_dir() -> Path:
    """The installed textarena package folder, found without importing it."""
    spec = importlib.util.find_spec("textarena")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("textarena is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _stand_in_words() -> tuple[list[str], list[str]]:
    """A large and a basic English word list from TextArena's own dictionary files."""
    dic = textarena_dir() / "envs" / "utils" / "data" / "en_US.dic"
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


def prepare_nltk(stand_ins: bool) -> None:
    """Record nltk downloads instead of attempting them; optionally install stand-ins.

    Must run before textarena is imported, since its modules bind ``nltk.corpus.words``
    at import time.
    """
    import nltk
    import nltk.tag

    def record_download(info_or_id: Any = None, *args: Any, **kwargs: Any) -> bool:
        names = info_or_id if isinstance(info_or_id, list | tuple) else [info_or_id]
        RECORDER.downloads.extend(str(name) for name in names if name)
        return False

    nltk.download = record_download
    if stand_ins:
        nltk.corpus.words = _StandInWords()
        nltk.pos_tag = _stand_in_pos_tag
        nltk.tag.pos_tag = _stand_in_pos_tag


def no_api_retries() -> None:
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


def hook_observations() -> None:
    """Wrap ``State.add_observation`` to record the addressee of every message."""
    import textarena

    original = textarena.State.add_observation

    @functools.wraps(original)
    def recording(
        self: Any, message: str, observation_type: Any, from_id: int = -1, to_id: int = -1
    ) -> Any:
        result = original(self, message, observation_type, from_id, to_id)
        kind = getattr(observation_type, "name", str(observation_type))
        RECORDER.messages.append((to_id, kind, str(message)))
        return result

    textarena.State.add_observation = recording
