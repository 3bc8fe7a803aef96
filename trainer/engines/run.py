"""A run's engines, wired to its learner: started (or reached) when the run starts, given
the learner's adapter after every step, stopped when the run ends.

``open_engines`` reads the run's ``sampler`` setting: ``vllm`` starts ``engines`` vLLM
servers on this machine for the model the run trains; ``openai:URL[,URL...]`` uses engines
already running (started with the same model, ``--enable-lora`` and a
``--max-lora-rank`` at least the run's ``lora_rank``). ``EngineRun.sampler_after`` saves
the adapter to a new directory, loads it into every engine under a new name
(``step-000012``) and returns the sampling client of those weights; the adapters of the
``keep`` latest steps stay loaded (games still playing may use them), older ones are
unloaded and their directories removed.
"""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.engines.client import EngineSamplingClient
from trainer.engines.pool import Engine, EnginePool

ADAPTER_PREFIX = "engine-step-"
"""The names of the adapters saved for the engines (``engine-step-000012``)."""


def engine_urls(sampler: str) -> list[str]:
    """The base URLs of ``openai:URL[,URL...]`` (each ending in ``/v1``). Raises ValueError
    for a setting of another form or a URL that is not http(s)."""
    from urllib.parse import urlsplit

    head, sep, rest = sampler.partition(":")
    if head != "openai" or not sep or not rest:
        raise ValueError(f"sampler {sampler!r}: give local, vllm or openai:URL[,URL...]")
    urls = [u.strip().rstrip("/") for u in rest.split(",") if u.strip()]
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"sampler engine {url!r}: an http:// or https:// base URL")
    return [u if u.endswith("/v1") else u + "/v1" for u in urls]


@dataclass
class EngineRun:
    """The engines of one run and what their sampling clients sample."""

    pool: EnginePool
    keep: int
    """Adapters left loaded: the latest ``keep`` steps'."""
    report: Callable[[str], None]
    current: EngineSamplingClient | None = None
    """The sampling client of the weights pushed last."""

    async def sampler_after(self, client: Any, step: int) -> EngineSamplingClient:
        """Push the weights ``client`` has after ``step`` optimizer steps to the engines and
        return their sampling client (the one pushed already when a step taught nothing:
        the weights are the same). Raises EngineError."""
        if self.current is not None and self.current.weights_step == step:
            return self.current
        name = f"{ADAPTER_PREFIX}{step:06d}"
        saved = await client.save_weights_for_sampler(name)
        directory = Path(saved.path)
        before = set(self.pool.adapters)
        took = await self.pool.push(name, directory, self.keep)
        for gone in before - set(self.pool.adapters):
            _remove_adapter_dir(directory.parent / gone)
        if step == 0:
            self.report(f"engines: the learner's adapter loaded in {took:.2f} s")
        self.current = EngineSamplingClient(self.pool, name, step)
        return self.current

    def metrics(self) -> dict[str, float]:
        """The engines' counts (``sampler/engine_*``)."""
        return self.pool.metrics()

    async def close(self) -> None:
        """Stop the engines the run started."""
        await self.pool.close()


def _remove_adapter_dir(directory: Path) -> None:
    if directory.name.startswith(ADAPTER_PREFIX):
        shutil.rmtree(directory, ignore_errors=True)


async def open_engines(
    config: Any, run_path: Path, report: Callable[[str], None]
) -> EngineRun | None:
    """The run's engines (None for ``sampler = "local"``), started and answering. Raises
    EngineStartError, EngineError or ValueError (with what to do)."""
    if config.sampler == "local":
        return None
    if config.sampler == "vllm":
        from trainer.engines.modeldir import engine_model_dir
        from trainer.engines.server import VLLMServer, vllm_python

        python = vllm_python(config.engine_python)
        model_dir = engine_model_dir(config.model, run_path.parent)
        servers = [
            VLLMServer(
                model_dir,
                run_path / f"engine-{i}.log",
                python,
                max_lora_rank=max(8, config.resolved_lora_rank()),
                max_loras=config.max_steps_off_policy + 2,
                extra_args=tuple(shlex.split(config.engine_args)),
            )
            for i in range(config.engines)
        ]
        engines = [Engine(server.url, server) for server in servers]
        report(
            f"engines: starting {len(engines)} vLLM server(s) for {config.model} "
            f"(logs in {run_path}/engine-N.log; a first start takes a minute or two)"
        )
        pool = EnginePool(engines)
    else:
        pool = EnginePool.of_urls(engine_urls(config.sampler))
    try:
        await pool.start()
    except BaseException:
        await pool.close()
        raise
    report(f"engines: {', '.join(e.url for e in pool.engines)} answer")
    return EngineRun(pool, keep=config.max_steps_off_policy + 1, report=report)
