"""The sampling client of a run whose games are sampled on serving engines: the shape of
``tinker.SamplingClient`` (``sample``, ``compute_logprobs``) over an ``EnginePool``.

Prompts go to the engines as token ids (``/v1/completions`` takes them), so the engine sees
exactly the tokens the learner trains on; answers come back as token ids with the logprob
of each sampled token (``return_tokens_as_token_ids``), so a datum's tokens and its
importance weights are the engine's own. ``model`` names what is sampled: the learner's
adapter of a step (``step-000012``), or the base model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from tinker import types

from trainer.engines.pool import EngineError, EnginePool

TOKEN_PREFIX = "token_id:"
"""How an engine names a token when asked for token ids (``return_tokens_as_token_ids``)."""


class EngineSamplingClient:
    """Samples ``model`` (an adapter's name, or the base's) on ``pool``'s engines."""

    def __init__(self, pool: EnginePool, model: str, weights_step: int) -> None:
        self.pool = pool
        self.model = model
        self.weights_step = weights_step
        """The optimizer steps behind the weights it samples."""

    async def sample(
        self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams
    ) -> types.SampleResponse:
        """``num_samples`` continuations of ``prompt``, with the engine's tokens and the
        logprob of each (of the distribution it sampled from). Raises EngineError."""
        payload = self._payload(prompt.to_ints(), num_samples, sampling_params)
        answer = await self.pool.post("/completions", payload)
        usage = answer.get("usage") or {}
        self.pool.stats.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.pool.stats.completion_tokens += int(usage.get("completion_tokens") or 0)
        choices = sorted(answer.get("choices") or [], key=lambda c: int(c.get("index", 0)))
        if len(choices) != num_samples:
            raise EngineError(f"asked for {num_samples} samples, the engine gave {len(choices)}")
        return types.SampleResponse(sequences=[self._sequence(c, answer) for c in choices])

    def _payload(
        self, tokens: list[int], num_samples: int, params: types.SamplingParams
    ) -> dict[str, Any]:
        stop = params.stop
        stop_ids: list[int] = []
        stop_texts: list[str] = []
        if isinstance(stop, str):
            stop_texts = [stop]
        elif stop:
            for item in stop:
                (stop_ids if isinstance(item, int) else stop_texts).append(item)  # type: ignore[arg-type]
        payload: dict[str, Any] = {
            "model": self.model,
            "prompt": tokens,
            "n": num_samples,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k if params.top_k and params.top_k > 0 else -1,
            "logprobs": 0,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,
        }
        if stop_ids:
            payload["stop_token_ids"] = stop_ids
        if stop_texts:
            payload["stop"] = stop_texts
        if params.seed is not None:
            payload["seed"] = params.seed
        return payload

    @staticmethod
    def _sequence(choice: dict[str, Any], answer: dict[str, Any]) -> types.SampledSequence:
        logprobs = choice.get("logprobs") or {}
        names: Sequence[str] = logprobs.get("tokens") or []
        values: Sequence[float | None] = logprobs.get("token_logprobs") or []
        if len(names) != len(values):
            raise EngineError("the engine's tokens and logprobs differ in length")
        try:
            tokens = [int(name.removeprefix(TOKEN_PREFIX)) for name in names]
        except ValueError:
            raise EngineError(
                "the engine did not answer with token ids (return_tokens_as_token_ids)"
            ) from None
        reason: types.StopReason = "length" if choice.get("finish_reason") == "length" else "stop"
        return types.SampledSequence(
            stop_reason=reason,
            sequence_id=f"{answer.get('id', 'engine')}-{choice.get('index', 0)}",
            tokens_np=np.asarray(tokens, dtype=np.int32),
            logprobs_np=np.asarray([v if v is not None else 0.0 for v in values], dtype=np.float32),
        )

    async def compute_logprobs(
        self, prompt: types.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> list[float | None]:
        """The logprob of each token of ``prompt`` given the ones before (None for the
        first), at temperature 1: what the exact yardsticks read. Raises EngineError."""
        tokens = prompt.to_ints()
        payload = {
            "model": self.model,
            "prompt": tokens,
            "max_tokens": 1,
            "temperature": 1.0,
            "prompt_logprobs": 0,
            "return_tokens_as_token_ids": True,
        }
        answer = await self.pool.post("/completions", payload)
        choices = answer.get("choices") or [{}]
        found = choices[0].get("prompt_logprobs") or answer.get("prompt_logprobs")
        if not isinstance(found, list) or len(found) != len(tokens):
            raise EngineError("the engine gave no prompt logprobs")
        out: list[float | None] = []
        for token, entry in zip(tokens, found, strict=True):
            if not entry:
                out.append(None)
                continue
            value = entry.get(str(token)) or entry.get(f"{TOKEN_PREFIX}{token}")
            out.append(float(value["logprob"]) if isinstance(value, dict) else None)
        if prompt_logprobs_last_n is not None:
            cut = len(out) - prompt_logprobs_last_n
            out = [None if i < cut else v for i, v in enumerate(out)]
        return out
