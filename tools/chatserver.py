"""A small OpenAI-compatible chat-completions server on loopback, with faults on demand.

It answers ``POST /v1/chat/completions`` in the OpenAI schema (every frame it sends as an
answer is first checked with the ``openai`` package's own ``ChatCompletion`` type), after
checking the ``Authorization: Bearer`` key and the model's name. What answers is a
``Responder``: ``legal_move_responder`` (a stand-in that plays a random move among those
the game lists in the prompt) or ``model_responder`` (a real model through the local
backend: ``smollm2``, a ``.gguf`` file, a model directory).

``Faults`` injects a served model's failures, each in a share of the requests: slow
answers, HTTP 500s, HTTP 429s (rate limited) with a ``retry-after``, connections dropped
mid-request, bodies that are not JSON, JSON that is not a chat completion, chat completions
whose choice has no message, and answers whose text holds no move. ``ChatServer.counts``
says what was served, ``max_in_flight`` the most requests it held at once.

    async with ChatServer(legal_move_responder(), key="k") as server:
        ...  # openai:{server.base_url}#{server.model}

    python -m tools.chatserver --model smollm2 --port 8000   # serve SmolLM2 until Ctrl-C

HTTP/1.1 with keep-alive and ``Content-Length`` bodies only: enough for the ``openai``
client, not a general web server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from arena.identity import PolicyKind, PolicyRef, WeightsRef

Responder = Callable[[Sequence[dict[str, Any]], int, float], Awaitable[tuple[str, int, int]]]
"""``(messages, max_tokens, temperature) -> (text, prompt tokens, completion tokens)``."""

GARBAGE_ANSWER = "I would rather not say."
"""The text of a ``garbage_answer`` fault: no move in it."""
MAX_BODY_BYTES = 4_000_000
"""Larger requests are refused (413)."""


@dataclass(frozen=True)
class Faults:
    """Shares (0 to 1) of the requests that get each fault; one fault per request at most,
    drawn in this order."""

    drop: float = 0.0
    """The connection is closed after the request is read, with no answer."""
    error: float = 0.0
    """HTTP 500 with an OpenAI error body (and ``retry-after-ms: retry_after_ms``)."""
    garbage_json: float = 0.0
    """HTTP 200, ``application/json``, a body that is not JSON."""
    wrong_schema: float = 0.0
    """HTTP 200, JSON that is not a chat completion."""
    garbage_answer: float = 0.0
    """A valid chat completion whose text holds no move (``GARBAGE_ANSWER``)."""
    slow: float = 0.0
    """Answered right, after ``slow_s``."""
    slow_s: float = 1.0
    """How late a slow answer comes."""
    answer_s: float = 0.0
    """Every answer's delay (so that requests overlap, as with a real model)."""
    retry_after_ms: int | None = None
    """The ``retry-after-ms`` header of a 500 (None: none, the seat's own back-off)."""
    no_message: float = 0.0
    """HTTP 200, a chat completion whose only choice has no ``message``."""
    rate_limited: float = 0.0
    """HTTP 429 with an OpenAI error body (and ``retry-after: retry_after_s``)."""
    retry_after_s: float | None = None
    """The ``retry-after`` header of a 429, in seconds (None: none)."""


FAULT_KINDS = (
    "drop",
    "error",
    "garbage_json",
    "wrong_schema",
    "garbage_answer",
    "slow",
    "no_message",
    "rate_limited",
)


def legal_move_responder(seed: int = 0) -> Responder:
    """A stand-in model: a random move among those the last user message lists
    (``games.legal.extract_legal_moves``), or ``[0]`` when it lists none. Token counts are
    the words of the prompt and of the answer."""
    from games.legal import extract_legal_moves

    rng = random.Random(seed)

    async def respond(
        messages: Sequence[dict[str, Any]], max_tokens: int, temperature: float
    ) -> tuple[str, int, int]:
        last: dict[str, Any] = next((m for m in reversed(messages) if m.get("role") == "user"), {})
        moves = extract_legal_moves(str(last.get("content", ""))) or ["[0]"]
        words = sum(len(str(m.get("content", "")).split()) for m in messages)
        return rng.choice(moves), words, 1

    return respond


async def model_responder(model: str = "smollm2") -> Responder:
    """A real model (``smollm2``, a ``.gguf`` file, a model directory) through the local
    backend, prompted with its chat template; concurrent requests share its batches.
    Raises ModelNotFound when the model is not here."""
    from arena.policies import SamplerPolicy
    from arena.renderers import RendererConfig
    from arena.seatview import message_text
    from trainer.loaders import load_sampler

    client = await load_sampler(WeightsRef.model(model).path)
    renderer = RendererConfig(name="chat", tokenizer_path=model).build()

    async def respond(
        messages: Sequence[dict[str, Any]], max_tokens: int, temperature: float
    ) -> tuple[str, int, int]:
        chat: Any = [{"role": m["role"], "content": str(m.get("content", ""))} for m in messages]
        prompt = renderer.build_generation_prompt(chat)
        policy = SamplerPolicy(client, max_tokens, temperature, timeout_s=None)
        sample = await policy(prompt, renderer.get_stop_sequences())
        message, _ended = renderer.parse_response(sample.tokens)
        return message_text(message), prompt.length, len(sample.tokens)

    return respond


class _Refused(Exception):
    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


class ChatServer:
    """The server (see the module docstring). ``start()`` listens on a free port of
    127.0.0.1; ``close()`` stops it."""

    def __init__(
        self,
        responder: Responder,
        *,
        model: str = "stand-in",
        key: str | None = "test-key",
        faults: Faults | None = None,
        seed: int = 0,
    ) -> None:
        self.responder = responder
        self.model = model
        self.key = key
        """The API key it takes (None: any, or none)."""
        self.faults = faults or Faults()
        self._rng = random.Random(seed)
        self.counts: Counter[str] = Counter()
        """Requests (``requests``), answers (``ok``), refusals (``unauthorized``,
        ``bad_request``, ``not_found``) and each fault served (``FAULT_KINDS``)."""
        self.in_flight = 0
        self.max_in_flight = 0
        """The most requests it held at once (read, not yet answered)."""
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    @property
    def port(self) -> int:
        """The port it listens on (it keeps it after ``close()``)."""
        assert self._port is not None, "start() first"
        return self._port

    @property
    def base_url(self) -> str:
        """What the ``openai`` client takes: ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def player(self, **options: object) -> str:
        """The player text of its model, with ``options`` (``openai:URL#MODEL?k=v``)."""
        pairs = tuple((k, str(v)) for k, v in options.items())
        served = PolicyRef(PolicyKind.OPENAI, self.model, endpoint=self.base_url, options=pairs)
        return served.player_text

    async def start(self, port: int = 0) -> ChatServer:
        """Listen on 127.0.0.1 (``port`` 0: a free one)."""
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", port)
        self._port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def close(self) -> None:
        """Stop listening and close every connection."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._connections.values()):
            writer.transport.abort()  # each connection's task ends on its own
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> ChatServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- HTTP ---------------------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        try:
            while await self._exchange(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._connections.pop(task, None)
            writer.close()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """One request and its answer; False when the connection must end."""
        head = await reader.readuntil(b"\r\n\r\n")
        line, *header_lines = head.decode("latin-1").split("\r\n")
        method, path, _version = [*line.split(" "), "", "", ""][:3]
        headers = {}
        for header in header_lines:
            name, sep, value = header.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0") or 0)
        if length > MAX_BODY_BYTES:
            await self._send(writer, 413, _error("request too large", "too_large"))
            return False
        body = await reader.readexactly(length)
        self.counts["requests"] += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            answer = await self._handle(reader, method, path, headers, body)
        finally:
            self.in_flight -= 1  # before the answer goes: the client may ask again at once
        if answer is None:  # dropped, or the client gave up
            writer.transport.abort()
            return False
        status, payload, extra = answer
        await self._send(writer, status, payload, extra)
        return status != 413 and headers.get("connection", "").lower() != "close"

    async def _handle(
        self,
        reader: asyncio.StreamReader,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
    ) -> tuple[int, bytes, dict[str, str]] | None:
        """The answer to one request: (status, body, extra headers), or None for none."""
        try:
            request = self._check(method, path, headers, body)
        except _Refused as refused:
            self.counts[refused.code] += 1
            return refused.status, _error(refused.message, refused.code), {}
        fault = self._draw()
        if fault:
            self.counts[fault] += 1
        delay = self.faults.slow_s if fault == "slow" else self.faults.answer_s
        if delay > 0 and not await _wait_unless_closed(reader, delay):
            self.counts["gone"] += 1  # the client gave up (its time limit): nobody to answer
            return None
        if fault == "drop":
            return None
        if fault == "error":
            extra = {}
            if self.faults.retry_after_ms is not None:
                extra["retry-after-ms"] = str(self.faults.retry_after_ms)
            return 500, _error("injected server error", "server_error"), extra
        if fault == "rate_limited":
            extra = {}
            if self.faults.retry_after_s is not None:
                extra["retry-after"] = f"{self.faults.retry_after_s:g}"
            return 429, _error("Rate limit reached; try again later.", "rate_limit_exceeded"), extra
        return 200, await self._answer(request, fault), {}

    def _check(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Any:
        if self.key is not None and headers.get("authorization") != f"Bearer {self.key}":
            raise _Refused(401, "Incorrect API key provided.", "unauthorized")
        if method != "POST" or path.split("?")[0] != "/v1/chat/completions":
            raise _Refused(404, f"no route {method} {path}", "not_found")
        try:
            request = json.loads(body)
        except ValueError:
            raise _Refused(400, "the body is not JSON", "bad_request") from None
        messages = request.get("messages") if isinstance(request, dict) else None
        if not isinstance(messages, list) or not all(
            isinstance(m, dict) and m.get("role") in ("system", "user", "assistant")
            for m in messages
        ):
            raise _Refused(400, "messages must be a list of chat messages", "bad_request")
        if request.get("model") != self.model:
            raise _Refused(404, f"The model {request.get('model')!r} does not exist.", "not_found")
        return request

    def _draw(self) -> str | None:
        roll = self._rng.random()
        for kind in FAULT_KINDS:
            share = getattr(self.faults, kind)
            if roll < share:
                return kind
            roll -= share
        return None

    async def _answer(self, request: dict[str, Any], fault: str | None) -> bytes:
        from openai.types.chat import ChatCompletion

        if fault == "garbage_json":
            return b'{"id": "chatcmpl-x", "choices": [{"message": {"content": "[4'
        if fault == "wrong_schema":
            frame: dict[str, Any] = {"result": "[4]", "status": "ok"}
            with contextlib.suppress(ValueError):  # pydantic's ValidationError
                ChatCompletion.model_validate(frame)
                raise AssertionError("the wrong-schema frame passed as a chat completion")
            return json.dumps(frame).encode()
        max_tokens = int(request.get("max_tokens") or request.get("max_completion_tokens") or 16)
        temperature = float(request.get("temperature", 1.0))
        text, prompt, completion = await self.responder(
            request["messages"], max_tokens, temperature
        )
        if fault == "garbage_answer":
            text = GARBAGE_ANSWER
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop",
            "logprobs": None,
        }
        if fault == "no_message":
            del choice["message"]
        else:
            self.counts["ok"] += 1
        number = self.counts["ok"]
        frame = {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
        if fault == "no_message":
            with contextlib.suppress(ValueError):  # pydantic's ValidationError
                ChatCompletion.model_validate(frame)
                raise AssertionError("a choice without a message passed as a chat completion")
        else:
            ChatCompletion.model_validate(frame)  # the openai package's own type checks it
        return json.dumps(frame).encode()

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        extra: dict[str, str] | None = None,
    ) -> None:
        reasons = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found"}
        reasons |= {413: "Payload Too Large", 429: "Too Many Requests"}
        reasons |= {500: "Internal Server Error"}
        lines = [
            f"HTTP/1.1 {status} {reasons.get(status, 'Error')}",
            "content-type: application/json",
            f"content-length: {len(body)}",
            *(f"{k}: {v}" for k, v in (extra or {}).items()),
        ]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()


def _error(message: str, code: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": code, "code": code}}).encode()


async def _wait_unless_closed(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Wait ``seconds``; False as soon as the client closes its connection."""
    closed = asyncio.ensure_future(reader.read(1))
    try:
        done, _ = await asyncio.wait({closed}, timeout=seconds)
    finally:
        if not closed.done():
            closed.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await closed
    return not done


@contextlib.contextmanager
def serve_in_thread(
    responder: Responder | None = None,
    *,
    make_responder: Callable[[], Awaitable[Responder]] | None = None,
    **kwargs: Any,
) -> Iterator[ChatServer]:
    """A ``ChatServer`` (``kwargs``: its options) on its own event loop in a thread, for code
    that runs its own loop (the ``arena`` command). ``make_responder`` makes the responder
    on the server's loop (a real model's sampler belongs to it). Stops it on exit."""
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    box: dict[str, Any] = {}

    async def main() -> None:
        try:
            chosen = await make_responder() if make_responder is not None else responder
            assert chosen is not None, "give a responder or make_responder"
            server = await ChatServer(chosen, **kwargs).start()
        except BaseException as exc:
            box["error"] = exc
            ready.set()
            return
        box["server"] = server
        box["stop"] = stop = asyncio.Event()
        ready.set()
        await stop.wait()
        await server.close()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    ready.wait()
    if "error" in box:
        thread.join()
        loop.close()
        raise box["error"]
    try:
        yield box["server"]
    finally:
        loop.call_soon_threadsafe(box["stop"].set)
        thread.join()
        loop.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m tools.chatserver``: serve a model until Ctrl-C."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="smollm2, FILE.gguf, DIR or stand-in")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--key", default=None, help="the API key it takes (default: any)")
    args = parser.parse_args(argv)

    async def run() -> None:
        responder = (
            legal_move_responder()
            if args.model == "stand-in"
            else await model_responder(args.model)
        )
        server = await ChatServer(responder, model=args.model, key=args.key).start(args.port)
        print(f"serving {args.model} at {server.base_url} (Ctrl-C stops)", flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
