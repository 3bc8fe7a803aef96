"""A served model in a seat: any OpenAI-compatible chat-completions endpoint.

The player form is ``openai:BASE_URL#MODEL``, with options after a ``?``::

    openai:https://api.openai.com/v1#gpt-4o-mini
    openai:http://127.0.0.1:8000/v1#smollm2?key_env=LOCAL_KEY&max_in_flight=4

Options (``ServedSeat``'s fields): ``key_env`` (the environment variable holding the API
key, default ``OPENAI_API_KEY``; it must be set, to any text for a server without keys),
``temperature``, ``max_tokens``, ``timeout_s`` (one try), ``max_retries`` (after the
first try: timeouts, dropped connections, HTTP 408/409/429 and 5xx are tried again after a
pause: ``FIRST_BACKOFF_S`` doubling, or what the server's ``retry-after`` asks, never more
than ``MAX_BACKOFF_S``) and ``max_in_flight`` (requests at once to one base URL from this
process, its request slots; the others wait their turn).

The seat sends its transcript as chat messages (``arena.renderers.seat_chat``, the
``full`` format: what the game told it as user messages, its own moves as assistant
messages) and plays the answer's text as its move: the game reads it, and an answer that
holds no legal move is an invalid move. A request that fails for good (no answer within
the tries, a refused key, a frame that is not a chat completion: a choice without a
message included) raises ``ServedModelError``, and the coordinator aborts the match with
that message as the reason: a served model's faults end its match with a reason, never a
hang. A key the server refused (HTTP 401 or 403) is not sent again: the seat's later
moves fail at once with the same reason, and until a key's first try has come back the
other moves with it wait for it.

Waiting for a request slot (or for a key's first try) runs off the match's move clock
(``arena.moveclock.off_clock``): a queue of other matches' requests never times a seat
out. Each try holds a slot while its request is in flight (at most ``timeout_s``), never
during the pause after it, so every wait ends. What runs on the clock, the tries and the
pauses, fits in ``ServedSeat.move_budget_s``, which the move clock is set above
(``matchmaking.agents.move_clock``).

A served seat is recorded and rated as ``openai:MODEL@HOST`` (``ServedSeat.name``).
The ``openai`` package loads when a served seat first plays, so naming one costs nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from arena.identity import SERVED_FORM, PolicyKind, PolicyRef
from arena.models import DEFAULT_MODEL_MAX_TOKENS, DEFAULT_MODEL_TEMPERATURE
from arena.moveclock import off_clock
from arena.seats import SeatAgent, SeatTurn
from matchmaking.tokenusage import TokenUsage, count_usage

if TYPE_CHECKING:
    from arena.renderers import Message

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
"""The environment variable a served seat reads its API key from, unless told another."""
DEFAULT_MAX_IN_FLIGHT = 16
"""Requests at once to one base URL from this process (its request slots)."""
DEFAULT_REQUEST_TIMEOUT_S = 60.0
"""Time limit of one try of a request (each retry has its own)."""
DEFAULT_MAX_RETRIES = 2
"""Retries of a request that timed out, lost its connection or got 408/409/429/5xx."""
FIRST_BACKOFF_S = 0.5
"""The pause after a first failed try, unless the server asks for another; it doubles
after each further one (less up to a quarter at random), up to ``MAX_BACKOFF_S``."""
MAX_BACKOFF_S = 8.0
"""The longest pause between two tries: a server's longer ``retry-after`` (a 429's may ask
for minutes) is cut to it. A pause holds no request slot."""
_RETRIED_STATUSES = frozenset({408, 409, 429})
_STATUS_WORDS = {429: "rate limited"}
"""Statuses the reason of an aborted match names in words (``HTTP 429 (rate limited)``)."""
_NOT_A_COMPLETION = "answered something that is not a chat completion"
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
        """The longest one move may take on the move clock: every try and the pauses
        between them (a server's longer ``retry-after`` is cut to ``MAX_BACKOFF_S``). The
        waits for a request slot are not part of it: they run off the clock."""
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


# -- endpoints and request slots, per event loop ---------------------------------------------
@dataclass
class _Endpoint:
    """One base URL and API key on one event loop."""

    client: Any
    """The ``openai.AsyncOpenAI``: its connection pool is bound to the loop."""
    refused: str | None = None
    """Why the server refused the key (HTTP 401 or 403): every later move with it fails at
    once with this reason, asking the server nothing."""
    probing: bool = False
    """The key's first try is on its way (``probed`` is set once it is back)."""
    probed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the key's first try came back, whatever it was: until then the other moves
    wait for it (off the move clock), so that a refused key is refused once."""


@dataclass
class _LoopState:
    endpoints: dict[tuple[str, str], _Endpoint]
    """(base URL, key) -> its endpoint."""
    slots: dict[tuple[str, int], asyncio.Semaphore]
    """(base URL, cap) -> the semaphore capping its requests in flight."""


_STATES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
    weakref.WeakKeyDictionary()
)


def _state() -> _LoopState:
    loop = asyncio.get_running_loop()
    state = _STATES.get(loop)
    if state is None:
        state = _STATES[loop] = _LoopState(endpoints={}, slots={})
    return state


def _endpoint(seat: ServedSeat) -> _Endpoint:
    """The endpoint of ``seat``'s base URL and key on this loop (one client per loop: its
    pool of connections belongs to the loop). Raises ServedModelError when the key's
    environment variable is not set."""
    key = os.environ.get(seat.key_env)
    if not key:
        raise ServedModelError(f"{seat.name}: the environment variable {seat.key_env} is not set")
    endpoints = _state().endpoints
    endpoint = endpoints.get((seat.base_url, key))
    if endpoint is None:
        import openai

        client = openai.AsyncOpenAI(api_key=key, base_url=seat.base_url)
        endpoint = endpoints[(seat.base_url, key)] = _Endpoint(client)
    return endpoint


def request_slots(seat: ServedSeat) -> asyncio.Semaphore:
    """The request slots of ``seat``'s base URL on this loop: ``seat.max_in_flight`` of
    them, shared by every seat that names the same base URL and cap. A try holds one while
    its request is in flight, never during a pause between tries."""
    slots = _state().slots
    key = (seat.base_url, seat.max_in_flight)
    gate = slots.get(key)
    if gate is None:
        gate = slots[key] = asyncio.Semaphore(seat.max_in_flight)
    return gate


async def close_clients() -> None:
    """Close this loop's served-model clients (their connections) and forget the keys they
    refused; the next request makes new ones. Commands call it before their loop ends."""
    state = _STATES.pop(asyncio.get_running_loop(), None)
    if state is not None:
        for endpoint in state.endpoints.values():
            await endpoint.client.close()


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
        self._endpoint: _Endpoint | None = None
        self._client: Any = None

    async def act(self, turn: SeatTurn) -> str:
        """The model's answer to the seat's chat, as its move text (the game judges it).
        Raises ServedModelError when the request fails for good (the match is aborted)."""
        self._chat.extend(turn.messages[self._chat.consumed :])
        usage = TokenUsage(requests=1)
        try:
            if self._endpoint is None:
                self._endpoint = _endpoint(self.spec)
                self._client = self._endpoint.client.with_options(
                    timeout=self.spec.timeout_s, max_retries=0
                )
            text = await _complete(
                self._client, self._endpoint, self.spec, self._chat.messages(), usage
            )
        except ServedModelError:
            usage.failed = 1
            raise
        except asyncio.CancelledError:
            usage.cancelled = 1
            raise
        finally:
            self.usage.add(usage)
            count_usage(self.name, usage)
        return text


# -- one move's request: its tries and the pauses between them --------------------------------
class _TryFailed(Exception):
    """A try failed in a way worth trying again (a timeout, a lost connection, HTTP
    408/409/429/5xx)."""

    def __init__(
        self, what: str, detail: str = "", *, named: str = "", pause: float | None = None
    ) -> None:
        super().__init__(what)
        self.what = what
        """What failed, after the endpoint's name (`` answered HTTP 500``)."""
        self.detail = detail
        """The server's word or the cause, after the tries (``: ...``)."""
        self.named = named
        """What the status means, where the reason names it (``rate limited``)."""
        self.pause = pause
        """The pause the server asked for (``retry-after``), in seconds."""

    def reason(self, where: str, tries: int) -> str:
        """The line that ends the move after ``tries`` tries failed, this one last."""
        count = "1 try" if tries == 1 else f"{tries} tries"
        after = f" ({self.named}) after {count}" if self.named else f" ({count})"
        return f"{where}{self.what}{after}{self.detail}"


async def _complete(
    client: Any,
    endpoint: _Endpoint,
    seat: ServedSeat,
    messages: Sequence[Message],
    usage: TokenUsage,
) -> str:
    """One chat completion of ``messages`` from ``client`` (``endpoint``'s client with
    ``seat``'s time limit, retrying nothing itself) with ``seat``'s settings: the answer's
    text ("" when its message has none), counted in ``usage``. Up to ``seat.max_retries``
    more tries after one that fails in a way worth trying again, each after a pause
    (``_pause_s``) that holds no request slot. Raises ServedModelError (one line: what
    failed, after how many tries)."""
    where = f"{seat.name}: {seat.base_url}"
    tries = seat.max_retries + 1
    for done in range(tries):
        try:
            return await _try(client, endpoint, seat, messages, usage, where)
        except _TryFailed as exc:
            failure = exc
        if done + 1 < tries:
            await _pause(_pause_s(failure, done))
    raise ServedModelError(failure.reason(where, tries))


async def _pause(seconds: float) -> None:
    """The pause between two tries (tests record it instead of waiting)."""
    await asyncio.sleep(seconds)


def _pause_s(failure: _TryFailed, failed_tries: int) -> float:
    """The pause after ``failed_tries + 1`` failed tries: what the server asked for, or
    ``FIRST_BACKOFF_S`` doubling, less up to a quarter at random (seats that failed together
    do not retry together); never more than ``MAX_BACKOFF_S``."""
    if failure.pause is not None:
        return min(max(failure.pause, 0.0), MAX_BACKOFF_S)
    backoff = min(FIRST_BACKOFF_S * 2.0**failed_tries, MAX_BACKOFF_S)
    return backoff * (1.0 - 0.25 * random.random())


async def _first_try(endpoint: _Endpoint) -> bool:
    """True when this is the key's first try (the caller sets ``endpoint.probed`` once it
    is back); otherwise wait, off the move clock, until the first try is back."""
    if endpoint.probed.is_set():
        return False
    if not endpoint.probing:
        endpoint.probing = True
        return True
    with off_clock():
        await endpoint.probed.wait()
    return False


async def _try(
    client: Any,
    endpoint: _Endpoint,
    seat: ServedSeat,
    messages: Sequence[Message],
    usage: TokenUsage,
    where: str,
) -> str:
    """One try: wait for a request slot (off the move clock), send, read the answer.
    Raises _TryFailed for a failure worth another try, ServedModelError for one that is
    not."""
    _check_key(endpoint)
    first = await _first_try(endpoint)
    try:
        _check_key(endpoint)  # refused while this try waited for the first
        slots = request_slots(seat)
        with off_clock():
            await slots.acquire()
        try:
            _check_key(endpoint)  # refused while this try waited for a slot
            async with asyncio.timeout(seat.timeout_s):
                completion = await client.chat.completions.create(
                    model=seat.model,
                    messages=list(messages),
                    max_tokens=seat.max_tokens,
                    temperature=seat.temperature,
                )
        finally:
            slots.release()
    except Exception as exc:
        failure = _failure(exc, endpoint, seat, where)
        if failure is None:
            raise
        raise failure from None
    finally:
        if first:
            endpoint.probed.set()
    return _answer(completion, where, usage)


def _check_key(endpoint: _Endpoint) -> None:
    """Raise ServedModelError, with the reason it was given then, once the key is refused."""
    if endpoint.refused is not None:
        raise ServedModelError(endpoint.refused)


def _failure(exc: Exception, endpoint: _Endpoint, seat: ServedSeat, where: str) -> Exception | None:
    """What a try's exception means: a _TryFailed to try again, the ServedModelError that
    ends the move (a refused key is remembered: later moves fail at once), or None for an
    exception of another kind (raised as it is)."""
    import openai

    if isinstance(exc, ServedModelError):
        return None
    if isinstance(exc, (TimeoutError, openai.APITimeoutError)):
        return _TryFailed(f" did not answer within {seat.timeout_s:g} s")
    if isinstance(exc, openai.APIConnectionError):
        return _TryFailed(": connection failed", f": {_one_line(str(exc.__cause__ or exc))}")
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
        endpoint.refused = (
            f"{where} refused the key in {seat.key_env} (HTTP {exc.status_code}): "
            f"{_one_line(exc.message)}"
        )
        return ServedModelError(endpoint.refused)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        detail = f": {_one_line(exc.message)}"
        if status >= 500 or status in _RETRIED_STATUSES:
            return _TryFailed(
                f" answered HTTP {status}",
                detail,
                named=_STATUS_WORDS.get(status, ""),
                pause=_retry_after_s(exc.response.headers),
            )
        return ServedModelError(f"{where} answered HTTP {status}{detail}")
    if isinstance(
        exc, (openai.APIResponseValidationError, json.JSONDecodeError, UnicodeDecodeError)
    ):
        return ServedModelError(f"{where} {_NOT_A_COMPLETION}: {_one_line(str(exc))}")
    return None


def _retry_after_s(headers: Any) -> float | None:
    """The pause a server's answer asks for (``retry-after-ms``, or ``retry-after`` in
    seconds), or None."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            with contextlib.suppress(ValueError):
                return float(value) * scale
    return None


def _answer(completion: object, where: str, usage: TokenUsage) -> str:
    """The text of a chat completion's first choice, its usage counted. The ``openai``
    client builds responses without validating them: read every field with care."""
    from openai.types.chat import ChatCompletion

    bad = f"{where} {_NOT_A_COMPLETION}"
    if not isinstance(completion, ChatCompletion):
        raise ServedModelError(f"{bad}: {_one_line(repr(completion))}")
    choices = getattr(completion, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise ServedModelError(f"{bad}: it has no choices")
    message = getattr(choices[0], "message", None)
    if message is None:
        raise ServedModelError(f"{bad}: its first choice has no message")
    content = getattr(message, "content", None)
    if content is not None and not isinstance(content, str):
        raise ServedModelError(f"{bad}: its message's content is {type(content).__name__}")
    reported = getattr(completion, "usage", None)
    prompt = getattr(reported, "prompt_tokens", None)
    answer = getattr(reported, "completion_tokens", None)
    usage.answered += 1
    if isinstance(prompt, int) and isinstance(answer, int):
        usage.prompt_tokens += prompt
        usage.completion_tokens += answer
    else:
        usage.unreported += 1
    return content or ""


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 3] + "..."
