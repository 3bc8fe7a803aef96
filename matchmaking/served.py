"""A served model in a seat: any OpenAI-compatible chat-completions endpoint.

The player form is ``openai:BASE_URL#MODEL``, with options after a ``?``::

    openai:https://api.openai.com/v1#gpt-4o-mini
    openai:http://127.0.0.1:8000/v1#smollm2?key_env=LOCAL_KEY&max_in_flight=4

Options (``ServedSeat``'s fields): ``key_env`` (the environment variable holding the API
key, default ``OPENAI_API_KEY``; it must be set, to any text for a server without keys),
``temperature``, ``max_tokens``, ``timeout_s`` (one request), ``max_retries`` (after the
first try: timeouts, dropped connections, HTTP 408/409/429 and 5xx are retried with
exponential back-off, or as the server's ``retry-after`` says) and ``max_in_flight``
(requests at once to one base URL from this process; the others wait their turn).

The seat sends its transcript as chat messages (``arena.renderers.seat_chat``, the
``full`` format: what the game told it as user messages, its own moves as assistant
messages) and plays the answer's text as its move: the game reads it, and an answer that
holds no legal move is an invalid move. A request that fails for good (no answer within
the retries, a refused key, a frame that is not a chat completion) raises
``ServedModelError``, and the coordinator aborts the match with that message as the
reason: a served model's faults end its match with a reason, never a hang.

A served seat is recorded and rated as ``openai:MODEL@HOST`` (``ServedSeat.name``).
The ``openai`` package loads when a served seat first plays, so naming one costs nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from arena.identity import SERVED_FORM, PolicyKind, PolicyRef
from arena.models import DEFAULT_MODEL_MAX_TOKENS, DEFAULT_MODEL_TEMPERATURE
from arena.seats import SeatAgent, SeatTurn

if TYPE_CHECKING:
    from arena.renderers import Message

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
"""The environment variable a served seat reads its API key from, unless told another."""
DEFAULT_MAX_IN_FLIGHT = 16
"""Requests at once to one base URL from this process."""
DEFAULT_REQUEST_TIMEOUT_S = 60.0
"""Time limit of one request (each retry has its own)."""
DEFAULT_MAX_RETRIES = 2
"""Retries of a request that timed out, lost its connection or got 408/409/429/5xx."""
MAX_BACKOFF_S = 8.0
"""The longest pause between two tries (the ``openai`` client's own cap)."""
_RETRIED_STATUSES = frozenset({408, 409, 429})
_DETAIL_CHARS = 200


class ServedModelError(RuntimeError):
    """A served model's request failed for good (after its retries); the message names the
    seat, the endpoint and what went wrong. Raised from a seat's move, it aborts the match
    with this message as the reason."""


@dataclass(frozen=True)
class ServedSeat:
    """Plain, picklable description of a served model in a seat (``openai:BASE_URL#MODEL``;
    see the module docstring). The API key is not here: it is read from ``key_env`` when
    the seat first plays."""

    base_url: str
    """The endpoint's base URL, as the ``openai`` client takes it (``.../v1``)."""
    model: str
    """The model's name on that endpoint."""
    key_env: str = DEFAULT_KEY_ENV
    """The environment variable holding the API key (sent as ``Authorization: Bearer``)."""
    temperature: float = DEFAULT_MODEL_TEMPERATURE
    """Sampling temperature (part of the recorded name when not the default)."""
    max_tokens: int = DEFAULT_MODEL_MAX_TOKENS
    """Longest answer in tokens (part of the recorded name when not the default)."""
    timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    """Time limit of one request."""
    max_retries: int = DEFAULT_MAX_RETRIES
    """Retries after the first try, with back-off."""
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    """Requests at once to ``base_url`` from this process (seats that name the same base
    URL and cap share them)."""

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"{self.player_text}: the base URL must be http:// "
                "or https:// with a host, e.g. openai:http://127.0.0.1:8000/v1#MODEL"
            )
        if not self.model.strip():
            raise ValueError(f"{self.player_text}: no model name after the #")
        if not self.key_env.strip():
            raise ValueError("key_env must name an environment variable")
        if self.max_tokens < 1:
            raise ValueError("a served seat's max_tokens must be at least 1")
        if self.timeout_s <= 0:
            raise ValueError("a served seat's timeout_s must be positive")
        if self.max_retries < 0:
            raise ValueError("a served seat's max_retries must be 0 or more")
        if self.max_in_flight < 1:
            raise ValueError("a served seat's max_in_flight must be at least 1")

    @property
    def player_text(self) -> str:
        """The text that seats it (``openai:BASE_URL#MODEL``)."""
        return PolicyRef(PolicyKind.OPENAI, self.model, endpoint=self.base_url).player_text

    @property
    def name(self) -> str:
        """What matches record for this seat and ratings are kept under:
        ``openai:MODEL@HOST`` (``HOST``: the base URL's host and port, lower case), with
        ``+tT`` and ``+nN`` added for a temperature or an answer length other than the
        defaults (``arena.identity.PolicyRef.language_model``). The path, the key, the time
        limits and the cap on requests are not part of it: they do not change how the model
        plays."""
        return PolicyRef.language_model(
            PolicyKind.OPENAI,
            self.model,
            self.host,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        ).key

    @property
    def host(self) -> str:
        """The endpoint's host and port, lower case, without credentials."""
        return urlsplit(self.base_url).netloc.rpartition("@")[2].lower()

    @property
    def move_budget_s(self) -> float:
        """The longest one move may take: every try and the pauses between them. Past it
        the move fails with ServedModelError (a server's long ``retry-after`` included)."""
        return (self.max_retries + 1) * self.timeout_s + self.max_retries * MAX_BACKOFF_S

    def check(self, game_id: str) -> None:
        """Raise ValueError when the API key's environment variable is not set (any game
        can be prompted: nothing else to check before the match)."""
        if not os.environ.get(self.key_env):
            raise ValueError(
                f"{self.name}: the environment variable {self.key_env} holding the API key "
                f"for {self.base_url} is not set (set it; to any text for a server without keys)"
            )

    def build(self, seat: int, game_id: str, seed: int) -> SeatAgent:
        """The agent that plays ``seat`` (its client is made on its first move)."""
        return ServedAgent(self, seat)


_OPTIONS = {f.name: f.type for f in fields(ServedSeat) if f.name not in ("base_url", "model")}


def served_seat(
    ref: PolicyRef | str,
    *,
    temperature: float = DEFAULT_MODEL_TEMPERATURE,
    max_tokens: int | None = None,
) -> ServedSeat:
    """A served model from its reference (player text ``openai:BASE_URL#MODEL[?OPTION=
    VALUE&...]``, read by ``PolicyRef.parse``; see the module docstring); options in the
    text win over ``temperature`` and ``max_tokens``. Raises ValueError naming the form,
    or the option that is wrong."""
    policy = PolicyRef.parse(ref) if isinstance(ref, str) else ref
    text = policy.player_text
    if policy.kind is not PolicyKind.OPENAI:
        raise ValueError(f"{text!r} is not a served model; give {SERVED_FORM}")
    if not policy.endpoint:
        raise ValueError(
            f"{text!r}: no #MODEL (a recorded name like openai:MODEL@HOST cannot be seated: "
            f"the endpoint is not in it); give {SERVED_FORM}"
        )
    seat = ServedSeat(
        base_url=policy.endpoint,
        model=policy.name,
        temperature=temperature,
        max_tokens=DEFAULT_MODEL_MAX_TOKENS if max_tokens is None else max_tokens,
    )
    options: dict[str, Any] = {}
    for key, value in policy.options:
        if key not in _OPTIONS:
            raise ValueError(f"{text!r}: unknown option {key!r}; options: {', '.join(_OPTIONS)}")
        kind = {"str": str, "int": int, "float": float}[str(_OPTIONS[key])]
        try:
            options[key] = kind(value)
        except ValueError:
            raise ValueError(f"{text!r}: {key}={value!r} is not {kind.__name__}") from None
    return replace(seat, **options)


# -- token usage ------------------------------------------------------------------------------
@dataclass
class TokenUsage:
    """Requests and tokens of a served seat (or of every seat recorded under one name)."""

    requests: int = 0
    """Moves asked for (a move's retries are one request)."""
    failed: int = 0
    """Requests that raised ServedModelError."""
    prompt_tokens: int = 0
    """Prompt tokens, as the server reported them."""
    completion_tokens: int = 0
    """Answer tokens, as the server reported them."""
    unreported: int = 0
    """Answers that came without a ``usage`` block (their tokens are not counted)."""

    def add(self, other: TokenUsage) -> None:
        """Add ``other``'s counts to these."""
        for name in _USAGE_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def minus(self, other: TokenUsage) -> TokenUsage:
        """These counts less ``other``'s (what happened since ``other`` was taken)."""
        return TokenUsage(**{n: getattr(self, n) - getattr(other, n) for n in _USAGE_FIELDS})

    def as_dict(self) -> dict[str, int]:
        """JSON-ready counts."""
        return {n: getattr(self, n) for n in _USAGE_FIELDS}

    def __str__(self) -> str:
        text = (
            f"{self.requests} requests, {self.prompt_tokens} prompt + "
            f"{self.completion_tokens} completion tokens"
        )
        if self.failed:
            text += f", {self.failed} failed"
        if self.unreported:
            text += f", {self.unreported} answers without usage"
        return text


_USAGE_FIELDS = tuple(f.name for f in fields(TokenUsage))
_USAGE: dict[str, TokenUsage] = {}
_USAGE_LOCK = threading.Lock()


def token_usage() -> dict[str, TokenUsage]:
    """A copy of this process's usage so far, per recorded name (every served seat adds its
    requests to it)."""
    with _USAGE_LOCK:
        return {name: replace(usage) for name, usage in _USAGE.items()}


def usage_since(before: dict[str, TokenUsage]) -> dict[str, TokenUsage]:
    """The usage per recorded name since ``before`` (an earlier ``token_usage()``), for the
    names that made requests since."""
    since = {}
    for name, usage in token_usage().items():
        delta = usage.minus(before.get(name, TokenUsage()))
        if delta.requests:
            since[name] = delta
    return since


def usage_dict(usage: dict[str, TokenUsage]) -> dict[str, object]:
    """``{"token_usage": {name: counts}}`` for a command's JSON, or ``{}`` when no served
    model played."""
    if not usage:
        return {}
    return {"token_usage": {name: u.as_dict() for name, u in sorted(usage.items())}}


def usage_lines(usage: dict[str, TokenUsage]) -> list[str]:
    """One line per served model, for a command's text summary."""
    return [f"tokens: {name}: {u}" for name, u in sorted(usage.items())]


def _count(name: str, usage: TokenUsage) -> None:
    with _USAGE_LOCK:
        _USAGE.setdefault(name, TokenUsage()).add(usage)


# -- clients and caps, per event loop ---------------------------------------------------------
@dataclass
class _LoopState:
    clients: dict[tuple[str, str], Any]
    """(base URL, key) -> ``openai.AsyncOpenAI``: its connection pool is bound to the loop."""
    gates: dict[tuple[str, int], asyncio.Semaphore]
    """(base URL, cap) -> the semaphore capping its requests in flight."""


_STATES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
    weakref.WeakKeyDictionary()
)


def _state() -> _LoopState:
    loop = asyncio.get_running_loop()
    state = _STATES.get(loop)
    if state is None:
        state = _STATES[loop] = _LoopState(clients={}, gates={})
    return state


def _client(seat: ServedSeat) -> Any:
    """The client for ``seat``'s base URL and key on this loop (one per loop: its pool of
    connections belongs to the loop), with the seat's time limit and retries."""
    key = os.environ.get(seat.key_env)
    if not key:
        raise ServedModelError(f"{seat.name}: the environment variable {seat.key_env} is not set")
    state = _state()
    client = state.clients.get((seat.base_url, key))
    if client is None:
        import openai

        client = openai.AsyncOpenAI(api_key=key, base_url=seat.base_url)
        state.clients[(seat.base_url, key)] = client
    return client.with_options(timeout=seat.timeout_s, max_retries=seat.max_retries)


def _gate(seat: ServedSeat) -> asyncio.Semaphore:
    gates = _state().gates
    key = (seat.base_url, seat.max_in_flight)
    gate = gates.get(key)
    if gate is None:
        gate = gates[key] = asyncio.Semaphore(seat.max_in_flight)
    return gate


async def close_clients() -> None:
    """Close this loop's served-model clients (their connections); the next request makes
    new ones. Commands call it before their loop ends."""
    state = _STATES.pop(asyncio.get_running_loop(), None)
    if state is not None:
        for client in state.clients.values():
            await client.close()


# -- the agent ---------------------------------------------------------------------------------
class ServedAgent:
    """A served model playing one seat: its chat so far in, the answer's text out."""

    def __init__(self, seat: ServedSeat, seat_index: int) -> None:
        from arena.renderers import SeatChat

        self.spec = seat
        self.name = seat.name
        self.usage = TokenUsage()
        """This seat's requests and tokens (also added to ``token_usage()``)."""
        self._chat = SeatChat(seat_index)
        self._client: Any = None

    async def act(self, turn: SeatTurn) -> str:
        """The model's answer to the seat's chat, as its move text (the game judges it).
        Raises ServedModelError when the request fails for good (the match is aborted)."""
        self._chat.extend(turn.messages[self._chat.consumed :])
        if self._client is None:
            self._client = _client(self.spec)
        usage = TokenUsage(requests=1)
        try:
            async with _gate(self.spec):
                text = await complete(self._client, self.spec, self._chat.messages(), usage)
        except ServedModelError:
            usage.failed = 1
            raise
        finally:
            self.usage.add(usage)
            _count(self.name, usage)
        return text


async def complete(
    client: Any, seat: ServedSeat, messages: Sequence[Message], usage: TokenUsage
) -> str:
    """One chat completion of ``messages`` from ``client`` (an ``openai.AsyncOpenAI``) with
    ``seat``'s settings, within ``seat.move_budget_s``: the answer's text ("" when it has
    none), its tokens added to ``usage``. Raises ServedModelError (one line: what failed,
    after how many tries)."""
    import openai

    where = f"{seat.name}: {seat.base_url}"
    tries = f"{seat.max_retries + 1} tries"
    try:
        async with asyncio.timeout(seat.move_budget_s):
            completion = await client.chat.completions.create(
                model=seat.model,
                messages=list(messages),
                max_tokens=seat.max_tokens,
                temperature=seat.temperature,
            )
    except TimeoutError:
        raise ServedModelError(
            f"{where} gave no answer within {seat.move_budget_s:g} s (retries included)"
        ) from None
    except openai.APITimeoutError:
        raise ServedModelError(
            f"{where} did not answer within {seat.timeout_s:g} s ({tries})"
        ) from None
    except openai.APIConnectionError as exc:
        cause = _one_line(str(exc.__cause__ or exc))
        raise ServedModelError(f"{where}: connection failed ({tries}): {cause}") from None
    except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
        raise ServedModelError(
            f"{where} refused the key in {seat.key_env} (HTTP {exc.status_code}): "
            f"{_one_line(exc.message)}"
        ) from None
    except openai.APIStatusError as exc:
        status = exc.status_code
        after = f" ({tries})" if status >= 500 or status in _RETRIED_STATUSES else ""
        raise ServedModelError(
            f"{where} answered HTTP {status}{after}: {_one_line(exc.message)}"
        ) from None
    except (openai.APIResponseValidationError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ServedModelError(
            f"{where} answered something that is not a chat completion: {_one_line(str(exc))}"
        ) from None
    return _answer(completion, where, usage)


def _answer(completion: object, where: str, usage: TokenUsage) -> str:
    """The text of a chat completion's first choice, its usage counted. The ``openai``
    client builds responses without validating them: read every field with care."""
    from openai.types.chat import ChatCompletion

    bad = f"{where} answered something that is not a chat completion"
    if not isinstance(completion, ChatCompletion):
        raise ServedModelError(f"{bad}: {_one_line(repr(completion))}")
    choices = getattr(completion, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise ServedModelError(f"{bad}: it has no choices")
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    if content is not None and not isinstance(content, str):
        raise ServedModelError(f"{bad}: its message's content is {type(content).__name__}")
    reported = getattr(completion, "usage", None)
    prompt = getattr(reported, "prompt_tokens", None)
    answer = getattr(reported, "completion_tokens", None)
    if isinstance(prompt, int) and isinstance(answer, int):
        usage.prompt_tokens += prompt
        usage.completion_tokens += answer
    else:
        usage.unreported += 1
    return content or ""


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 3] + "..."
