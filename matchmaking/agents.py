"""Seat agents for models: a past checkpoint (or any sampler) playing a seat.

``ModelAgent`` renders the seat's turn exactly as the learner's env would (a
``arena.seatview.SeatView`` with the checkpoint's own renderer and observation format),
samples one answer and returns its move. Its sampling client comes from a ``SamplerPool``:
checkpoints are loaded on first use and kept, at most ``capacity`` at a time, least
recently used out, so a league or a tournament of many checkpoints has bounded memory.

Where a checkpoint's weights are (``arena.identity.WeightsRef``): ``tinker://...`` paths load
through the Tinker service, ``model:NAME`` a language model as released (``model_seat``:
``smollm2``, a ``.gguf`` file, a model directory) through the local backend, anything else
is a local checkpoint directory; the loader that knows how is installed by the trainer
package (``use_loader``), so matchmaking never imports the model stack.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arena.identity import BadPolicyRef, PolicyKind, PolicyRef, WeightsKind, WeightsRef
from arena.models import (
    DEFAULT_MODEL_MAX_TOKENS,
    DEFAULT_MODEL_TEMPERATURE,
    PACKAGED_MODELS,
    ModelNotFound,
    model_fingerprint,
    resolve_model,
)
from arena.seats import AgentSpec, SeatAgent, SeatTurn
from storage.rundir import CHECKPOINTS_FILE, DEFAULT_RUNS_DIR, UnknownCheckpoint, find_run

if TYPE_CHECKING:  # the model stack (tinker, torch) loads when a model first plays a seat
    from arena.renderers import ObservationFormat, RendererConfig

DEFAULT_POOL_CAPACITY = 8
"""Checkpoints a ``SamplerPool`` keeps loaded at once."""
DEFAULT_SAMPLE_TIMEOUT_S = 60.0
"""Time limit of one checkpoint move (the coordinator's move clock is the backstop)."""
MODEL_SAMPLE_TIMEOUT_S = 300.0
"""Time limit of one move of a language model seat: a model of 100M+ parameters answering
dozens of games at once on a CPU takes tens of seconds a batch."""


@dataclass(frozen=True)
class ModelSeat:
    """Plain, picklable description of a model in a seat (built late into an agent)."""

    policy: str
    """The policy key (``checkpoint:run@120``): what matches record."""
    sampler_path: str
    """Where its weights are (a local checkpoint directory or a ``tinker://`` path)."""
    renderer: RendererConfig
    observation_format: ObservationFormat
    max_tokens: int = 8
    temperature: float = 1.0
    sample_timeout_s: float = DEFAULT_SAMPLE_TIMEOUT_S

    @property
    def name(self) -> str:
        """What matches record for this seat."""
        return self.policy

    def check(self, game_id: str) -> None:
        """Any game the renderer can prompt: nothing to check before the match."""

    def build(self, seat: int, game_id: str, seed: int) -> SeatAgent:
        """The agent that plays ``seat`` (its weights load on its first move)."""
        return ModelAgent(self, seat, game_id)


Loader = Callable[[str], Awaitable[Any]]
"""``path -> sampling client`` for a checkpoint's weights (``trainer.loaders.load_sampler``:
``tinker://`` paths through the Tinker service, local checkpoint directories through the
local backend)."""

_loader: Loader | None = None


class NoCheckpointLoader(RuntimeError):
    """A checkpoint's weights were needed before any loader was installed."""


def use_loader(loader: Loader) -> None:
    """Install the function that loads checkpoints' weights for this process (matchmaking
    knows no model stack; the trainer provides it: ``trainer.loaders.load_sampler``, which
    ``arena``'s commands and ``Trainer`` install)."""
    global _loader
    _loader = loader


async def load_weights(path: str) -> Any:
    """A sampling client for the weights at ``path``, through the installed loader.
    Raises NoCheckpointLoader when none is installed, and what the loader raises
    (ValueError for a path that holds no weights)."""
    if _loader is None:
        raise NoCheckpointLoader(
            f"cannot load {path}: no checkpoint loader is installed; call "
            "matchmaking.agents.use_loader(trainer.loaders.load_sampler) first"
        )
    return await _loader(path)


class SamplerPool:
    """Loaded sampling clients by weights path: at most ``capacity``, LRU out."""

    def __init__(self, capacity: int = DEFAULT_POOL_CAPACITY, loader: Loader | None = None) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.loader = loader or load_weights
        self._loaded: OrderedDict[str, Any] = OrderedDict()
        self._loading: dict[str, asyncio.Future[Any]] = {}
        self.loads = 0
        """How many times a client was loaded (evictions make a path load again)."""

    def __len__(self) -> int:
        return len(self._loaded)

    def __contains__(self, path: object) -> bool:
        return path in self._loaded

    def put(self, path: str, client: Any) -> None:
        """Add a client that is already loaded (e.g. a snapshot the trainer holds)."""
        self._loaded[path] = client
        self._loaded.move_to_end(path)
        self._evict()

    async def get(self, path: str) -> Any:
        """The sampling client for ``path``, loading it if needed. Raises what the loader
        raises (ValueError for a path without weights)."""
        client = self._loaded.get(path)
        if client is not None:
            self._loaded.move_to_end(path)
            return client
        pending = self._loading.get(path)
        if pending is not None and pending.get_loop() is asyncio.get_running_loop():
            return await asyncio.shield(pending)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._loading[path] = future
        try:
            client = await self.loader(path)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it, nobody logs it
            raise
        finally:
            self._loading.pop(path, None)
        future.set_result(client)
        self.loads += 1
        self.put(path, client)
        return client

    def _evict(self) -> None:
        while len(self._loaded) > self.capacity:
            self._loaded.popitem(last=False)


_POOL: SamplerPool | None = None


def default_pool() -> SamplerPool:
    """This process's pool (what builders' model seats load from)."""
    global _POOL
    if _POOL is None:
        _POOL = SamplerPool()
    return _POOL


class ModelAgent:
    """A model playing one seat: prompt as in training, sample, answer the move."""

    def __init__(
        self, seat: ModelSeat, seat_index: int, game_id: str, pool: SamplerPool | None = None
    ) -> None:
        self.spec = seat
        self.name = seat.policy
        from arena.seatview import SeatView

        self.pool = pool or default_pool()
        self.view = SeatView(seat_index, game_id, seat.renderer.build(), seat.observation_format)

    async def act(self, turn: SeatTurn) -> str:
        """The checkpoint's move for ``turn``. Raises what sampling raises (the match is
        then aborted by the coordinator)."""
        from arena.policies import SamplerPolicy

        client = await self.pool.get(self.spec.sampler_path)
        policy = SamplerPolicy(
            client,
            self.spec.max_tokens,
            self.spec.temperature,
            timeout_s=self.spec.sample_timeout_s,
        )
        prompt = self.view.prompt(turn.messages, turn.new_from, turn.legal_moves)
        sample = await policy(prompt, self.view.stop_condition)
        return self.view.move(sample.tokens)


def model_seat(
    ref: PolicyRef | str,
    *,
    temperature: float = DEFAULT_MODEL_TEMPERATURE,
    max_tokens: int | None = None,
) -> ModelSeat:
    """A language model as released in a seat (``model:smollm2``, ``model:FILE.gguf``,
    ``model:DIR``): it plays zero-shot through its tokenizer's chat template and the full
    observation, as a run training it would prompt it, and is recorded as
    ``PolicyRef.language_model`` names it (``model:smollm2@1a2b3c4d``).

    Raises ModelNotFound for a model that is not here (for ``smollm2``: the command that
    installs it), or when a ``@HASH`` given does not match the weights found."""
    policy = PolicyRef.parse(ref) if isinstance(ref, str) else ref
    if policy.kind is not PolicyKind.MODEL:
        raise BadPolicyRef(f"{policy.key} is not a model (model:NAME)")
    max_tokens = DEFAULT_MODEL_MAX_TOKENS if max_tokens is None else max_tokens
    if max_tokens < 1:
        raise ValueError("a model seat's max_tokens must be at least 1")
    source = resolve_model(policy.name)
    wanted = policy.version.split("+", 1)[0]
    if wanted and wanted != model_fingerprint(source):
        raise ModelNotFound(
            f"{PolicyRef(PolicyKind.MODEL, policy.name, wanted).key}: the weights found here "
            f"hash to {model_fingerprint(source)} ({source.path})"
        )
    from arena.renderers import RendererConfig

    where = policy.name if policy.name in PACKAGED_MODELS else source.path
    return ModelSeat(
        policy=PolicyRef.language_model(
            PolicyKind.MODEL,
            source.name,
            model_fingerprint(source),
            temperature=temperature,
            max_tokens=max_tokens,
        ).key,
        sampler_path=WeightsRef.model(where).path,
        renderer=RendererConfig(name="chat", tokenizer_path=where),
        observation_format="full",
        max_tokens=max_tokens,
        temperature=temperature,
        sample_timeout_s=MODEL_SAMPLE_TIMEOUT_S,
    )


def move_clock(players: Sequence[AgentSpec | str], default: float) -> float:
    """The move clock for a line-up: ``default``, or for one with a language model in a
    seat long enough for its own sampling limit (``MODEL_SAMPLE_TIMEOUT_S``), so the
    model's batches on a CPU are not cut by the clock meant for bots; for a served model
    (``openai:``) long enough for all its tries (``ServedSeat.move_budget_s``), so its own
    limits, which say what failed, come before the clock."""
    from matchmaking.served import ServedSeat

    models = [
        p.sample_timeout_s
        for p in players
        if isinstance(p, ModelSeat) and WeightsRef.parse(p.sampler_path).kind is WeightsKind.MODEL
    ]
    models += [p.move_budget_s for p in players if isinstance(p, ServedSeat)]
    return max([default, *(t + 5.0 for t in models)])


async def preload(players: Sequence[AgentSpec | str]) -> None:
    """Load the weights of every model seat among ``players`` into the default pool now,
    so the first moves do not wait for them under the move clock (a GGUF model
    de-quantizes in seconds). Raises what the loader raises."""
    for player in players:
        if isinstance(player, ModelSeat):
            await default_pool().get(player.sampler_path)


@dataclass(frozen=True)
class CheckpointInfo:
    """A stored checkpoint: where its weights are and how it reads prompts."""

    policy: PolicyRef
    sampler_path: str
    renderer: RendererConfig
    observation_format: ObservationFormat
    max_tokens: int
    log_dir: str

    def seat(self, temperature: float = 1.0) -> ModelSeat:
        """This checkpoint as a seat."""
        return ModelSeat(
            policy=self.policy.key,
            sampler_path=self.sampler_path,
            renderer=self.renderer,
            observation_format=self.observation_format,
            max_tokens=self.max_tokens,
            temperature=temperature,
        )


def resolve_checkpoint(
    ref: PolicyRef | str,
    *,
    runs_dir: str | Path = DEFAULT_RUNS_DIR,
    log_dirs: list[str] | None = None,
) -> CheckpointInfo:
    """The stored checkpoint ``ref`` names (``run:NAME@STEP``), from its run's
    ``checkpoints.jsonl`` (in ``runs_dir/NAME`` or one of ``log_dirs``).

    Raises BadPolicyRef for a reference that is not a checkpoint, and UnknownCheckpoint
    naming the run's checkpoints when the step is not among them."""
    from arena.renderers import OBSERVATION_FORMATS, RendererConfig

    policy = PolicyRef.parse(ref) if isinstance(ref, str) else ref
    if policy.kind is not PolicyKind.CHECKPOINT or policy.step is None:
        raise BadPolicyRef(f"{policy.key} is not a checkpoint (run:NAME@STEP)")
    run = find_run(policy.name, runs_dir, log_dirs or ())
    if run is None:
        raise UnknownCheckpoint(
            f"no run {policy.name!r}: no {Path(runs_dir) / policy.name / CHECKPOINTS_FILE}"
            " (arena train --log-dir sets where runs live; --runs-dir here)"
        )
    entry = run.checkpoint(policy.step)
    if entry is None:
        steps = ", ".join(str(e.get("step")) for e in run.checkpoints()) or "none"
        raise UnknownCheckpoint(
            f"run {policy.name!r} has no checkpoint at step {policy.step}; it has: {steps}"
        )
    log_dir = run.path
    config = run.config()
    renderer_name = str(entry.get("renderer_name") or "bytes")
    base_model = str(entry.get("base_model") or "")
    renderer = (
        RendererConfig(name="bytes")
        if renderer_name == "bytes"
        else RendererConfig(name=renderer_name, tokenizer_path=base_model)
    )
    fmt = str(entry.get("observation_format") or config.get("observation_format") or "full")
    if fmt not in OBSERVATION_FORMATS:
        raise UnknownCheckpoint(
            f"checkpoint {policy.key} has an unknown observation format {fmt!r}"
        )
    return CheckpointInfo(
        policy=policy,
        sampler_path=str(entry.get("sampler_path") or entry["state_path"]),
        renderer=renderer,
        observation_format=fmt,  # type: ignore[arg-type]
        max_tokens=int(config.get("max_tokens", 8)),
        log_dir=str(log_dir),
    )
