"""The serving engines of a run, as one: requests balanced by load, failures retried on
another engine (or on the same one once the run has restarted it), and the learner's
adapters loaded into every engine under a new name each step.

Why a new name and a new directory every step: vLLM's prefix cache is keyed by the
adapter's name and path, so an adapter overwritten in place and reloaded under its old name
would serve keys and values computed with the old weights (measured: mixed logprobs).

Limits (module constants, each documented): how long a request may take
(``REQUEST_TIMEOUT_S``), how long the pool waits for some engine to answer again before a
request fails (``RECOVER_TIMEOUT_S``), how many tries an adapter load gets
(``ADAPTER_TRIES``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.engines.server import VLLMServer

log = logging.getLogger("trainer.engines")

REQUEST_TIMEOUT_S = 600.0
"""How long one completion request may take (a batch of long prompts on a CPU engine)."""
RECOVER_TIMEOUT_S = 900.0
"""How long a request waits for some engine to answer again (a restart takes 35-95 s on
2 CPU cores) before it fails with EngineError."""
RETRY_PAUSE_S = 2.0
"""The pause between two tries of a request when every engine is down."""
ADAPTER_TRIES = 3
"""Tries of one adapter load on one engine before the step fails."""


class EngineError(RuntimeError):
    """The engines could not serve a request or take an adapter; the message says which
    engine and what it answered."""


@dataclass
class Engine:
    """One engine: its URL and, when the run started it, its server."""

    url: str
    server: VLLMServer | None = None
    in_flight: int = 0
    down: bool = False
    restarting: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def root(self) -> str:
        """The server's root URL (without ``/v1``)."""
        return self.url.removesuffix("/").removesuffix("/v1")


@dataclass
class EngineStats:
    """Counts of the pool's work (reported as ``sampler/engine_*`` metrics)."""

    requests: int = 0
    failed_tries: int = 0
    restarts: int = 0
    adapter_pushes: int = 0
    push_seconds: float = 0.0
    """Time spent loading adapters into the engines (all of them, every step)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0


class EnginePool:
    """The engines of a run (see the module docstring)."""

    def __init__(self, engines: Sequence[Engine]) -> None:
        if not engines:
            raise ValueError("a pool needs at least one engine")
        self.engines = list(engines)
        self.adapters: OrderedDict[str, Path] = OrderedDict()
        """Adapters loaded in every engine, oldest first (re-loaded after a restart)."""
        self.stats = EngineStats()
        self._http: Any = None

    @classmethod
    def of_urls(cls, urls: Sequence[str]) -> EnginePool:
        """A pool of engines already running at ``urls`` (base URLs ending in ``/v1``)."""
        return cls([Engine(url.rstrip("/")) for url in urls])

    @property
    def http(self) -> Any:
        """The pool's HTTP client (``httpx.AsyncClient``), made on first use."""
        if self._http is None:
            import httpx

            self._http = httpx.AsyncClient(timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=10.0))
        return self._http

    async def start(self) -> None:
        """Start the engines the run manages (all at once) and check every engine answers.
        Raises EngineStartError or EngineError."""
        await asyncio.gather(*(e.server.start() for e in self.engines if e.server is not None))
        for engine in self.engines:
            if engine.server is None and not await self._answers(engine):
                raise EngineError(f"no engine answers at {engine.url} (GET /v1/models)")

    async def close(self) -> None:
        """Stop the managed engines and close the HTTP client; idempotent."""
        await asyncio.gather(
            *(e.server.stop() for e in self.engines if e.server is not None),
            return_exceptions=True,
        )
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    # -- requests ---------------------------------------------------------------------------
    async def post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """POST ``payload`` to ``path`` (under ``/v1``) on the least loaded engine that is
        up; an engine that fails is marked down (and restarted when the run manages it)
        and the request goes to another, until ``RECOVER_TIMEOUT_S`` passes. Raises
        EngineError with the last failure, or at once for an answer that says the request
        itself is wrong (HTTP 400-499 other than 408 and 429)."""
        import httpx

        deadline = time.monotonic() + RECOVER_TIMEOUT_S
        self.stats.requests += 1
        last = "no engine tried"
        while True:
            engine = self._choose()
            if engine is not None:
                engine.in_flight += 1
                try:
                    answer = await self.http.post(engine.url + path, json=payload)
                except httpx.HTTPError as exc:
                    last = f"{engine.url}: {type(exc).__name__}: {exc}"
                    await self._failed(engine)
                else:
                    if answer.status_code == 200:
                        return dict(answer.json())
                    code = answer.status_code
                    last = f"{engine.url}{path} answered HTTP {code}: {answer.text[:300]}"
                    if 400 <= answer.status_code < 500 and answer.status_code not in (408, 429):
                        raise EngineError(last)
                    await self._failed(engine)
                finally:
                    engine.in_flight -= 1
                self.stats.failed_tries += 1
            if time.monotonic() > deadline:
                raise EngineError(f"no engine answered for {RECOVER_TIMEOUT_S:g} s; last: {last}")
            await asyncio.sleep(RETRY_PAUSE_S)
            await self._revive()

    def _choose(self) -> Engine | None:
        up = [e for e in self.engines if not e.down]
        return min(up, key=lambda e: e.in_flight) if up else None

    async def _failed(self, engine: Engine) -> None:
        """Mark ``engine`` down unless it still answers (a slow request is not a dead
        engine); a managed one that died is restarted in the background."""
        if await self._answers(engine):
            return
        engine.down = True
        log.warning("engine %s is down", engine.url)
        if engine.server is not None:
            asyncio.get_running_loop().create_task(self._restart(engine))

    async def _revive(self) -> None:
        """Engines marked down that answer again are back (an engine run elsewhere that
        was restarted by its owner)."""
        for engine in self.engines:
            if engine.down and engine.server is None and await self._answers(engine):
                await self._reload_adapters(engine)
                engine.down = False

    async def _restart(self, engine: Engine) -> None:
        """Restart a managed engine that died, load the live adapters into it, mark it up."""
        assert engine.server is not None
        async with engine.restarting:
            if not engine.down:
                return
            try:
                await engine.server.stop()
                await engine.server.start()
                await self._reload_adapters(engine)
            except Exception as exc:  # the requests waiting on it report the failure
                log.error("engine %s could not be restarted: %s", engine.url, exc)
                return
            self.stats.restarts += 1
            engine.down = False
            log.warning("engine %s restarted", engine.url)

    async def _answers(self, engine: Engine) -> bool:
        import httpx

        try:
            answer = await self.http.get(engine.url + "/models", timeout=10.0)
        except httpx.HTTPError:
            return False
        return answer.status_code == 200

    # -- adapters ---------------------------------------------------------------------------
    async def push(self, name: str, directory: Path, keep: int) -> float:
        """Load the adapter in ``directory`` into every engine as ``name``, then unload all
        but the ``keep`` newest. Returns the seconds it took. Raises EngineError when an
        engine refuses it ``ADAPTER_TRIES`` times."""
        started = time.perf_counter()
        await asyncio.gather(*(self._load(e, name, directory) for e in self.engines if not e.down))
        self.adapters[name] = directory
        while len(self.adapters) > max(1, keep):
            old, _ = self.adapters.popitem(last=False)
            await asyncio.gather(*(self._unload(e, old) for e in self.engines if not e.down))
        took = time.perf_counter() - started
        self.stats.adapter_pushes += 1
        self.stats.push_seconds += took
        return took

    async def _load(self, engine: Engine, name: str, directory: Path) -> None:
        import httpx

        payload = {"lora_name": name, "lora_path": str(directory)}
        last = ""
        for _ in range(ADAPTER_TRIES):
            try:
                answer = await self.http.post(engine.root + "/v1/load_lora_adapter", json=payload)
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if answer.status_code == 200 or "already been loaded" in answer.text:
                    return
                last = f"HTTP {answer.status_code}: {answer.text[:300]}"
            await asyncio.sleep(RETRY_PAUSE_S)
        raise EngineError(f"{engine.url} refused the adapter {name} ({directory}): {last}")

    async def _unload(self, engine: Engine, name: str) -> None:
        import httpx

        try:
            await self.http.post(engine.root + "/v1/unload_lora_adapter", json={"lora_name": name})
        except httpx.HTTPError as exc:  # an adapter left loaded costs memory, not results
            log.warning("engine %s kept adapter %s: %s", engine.url, name, exc)

    async def _reload_adapters(self, engine: Engine) -> None:
        for name, directory in self.adapters.items():
            await self._load(engine, name, directory)

    def metrics(self) -> dict[str, float]:
        """The pool's counts as ``sampler/engine_*`` metrics."""
        s = self.stats
        return {
            "sampler/engine_requests": float(s.requests),
            "sampler/engine_failed_tries": float(s.failed_tries),
            "sampler/engine_restarts": float(s.restarts),
            "sampler/engine_push_s": s.push_seconds / max(1, s.adapter_pushes),
            "sampler/engine_prompt_tokens": float(s.prompt_tokens),
            "sampler/engine_completion_tokens": float(s.completion_tokens),
        }
