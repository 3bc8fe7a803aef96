"""A local sampling client that batches concurrent requests.

Every ``sample``/``sample_async`` call puts its sequences on one queue. A single worker
thread takes everything waiting (up to ``max_batch_size`` sequences), left-pads the
prompts, and decodes the whole batch step by step with the model's KV cache, so many envs
asking at once share each forward pass. The torch work runs on that thread, never on the
event loop. The worker starts when requests arrive and ends shortly after the queue runs
dry, so an unused sampling client holds no thread (and its model can be freed).

Limits: a batch is formed when decoding starts; requests that arrive while a batch is
decoding wait for the next batch (no joining mid-batch).

The client checks the requests (``trainer.local.sample_requests``) and answers Tinker's
methods; the queue and its worker are ``trainer.local.batcher``'s, the model passes
``trainer.local.decoding``'s.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from concurrent.futures import Future
from typing import Any

from tinker import types

from trainer.local.batcher import Batcher
from trainer.local.config import (
    LoadedModel,
    LocalModelConfig,
    LocalTokenizer,
    load_model,
    vocab_rows,
)
from trainer.local.decoding import Decoder, SamplerStats
from trainer.local.futures import LocalFuture
from trainer.local.sample_requests import new_rows, prompt_options_unsupported, prompt_tokens

__all__ = ["LocalSamplingClient", "SamplerStats", "create_local_sampling_client"]

_snapshot_ids = itertools.count()


class LocalSamplingClient:
    """Samples from a frozen copy of a model, with ``tinker.SamplingClient``'s methods.

    Returned logprobs are those of the sampled tokens under the distribution sampled
    from: ``log_softmax(logits / temperature)`` over the whole vocabulary (before top-k or
    top-p truncation), as Tinker's sampler returns them. At temperature 1 they equal the
    training client's ``forward`` logprobs; at temperature 0 (greedy) they are the model's
    untempered ``log_softmax(logits)``.

    Every sequence ends at one of the model's EOS tokens, at a ``stop`` token id or stop
    string (``stop_reason="stop"``; the stop tokens are included), or after ``max_tokens``
    tokens (``"length"``). ``seed`` makes a request's draws repeatable (for the same
    logits: rows batched with different neighbours can differ in the last float bits).

    Usually made by ``LocalTrainingClient.save_weights_and_get_sampling_client``; the model
    passed in must not be changed afterwards (it is the snapshot).
    """

    def __init__(
        self,
        loaded: LoadedModel,
        *,
        max_batch_size: int = 64,
        batch_window_s: float = 0.005,
        batch_quiet_s: float = 0.001,
        seed: int = 0,
        name: str | None = None,
        base_model: str = "",
        prefix_cache_mb: int = 1024,
    ) -> None:
        """Serve ``loaded.model`` (taken over, not copied).

        ``max_batch_size``: most sequences decoded together. ``batch_window_s``: longest
        wait for more requests before a batch starts; ``batch_quiet_s``: a batch also
        starts when no request came for this long. ``prefix_cache_mb``: most MiB of keys
        and values kept for later prompts that start the same way (0: none). Raises
        ValueError for a ``max_batch_size`` below 1 or a negative time or size.
        """
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be at least 1")
        if batch_window_s < 0 or batch_quiet_s < 0:
            raise ValueError("batch_window_s and batch_quiet_s must not be negative")
        self.model: Any = loaded.model
        self.tokenizer: LocalTokenizer = loaded.tokenizer
        self.context_length = loaded.context_length
        """Most positions (prompt plus sampled tokens) one sequence may use."""
        self.max_batch_size = max_batch_size
        self.batch_window_s = batch_window_s
        self.batch_quiet_s = batch_quiet_s
        self.name = name if name is not None else f"snapshot-{next(_snapshot_ids)}"
        self.base_model = base_model
        """The name of the model these weights came from (``get_base_model()``)."""
        self._loaded = loaded
        self._vocab_size = vocab_rows(self.model)
        if prefix_cache_mb < 0:
            raise ValueError("prefix_cache_mb must not be negative")
        self.prefix_cache_mb = prefix_cache_mb
        self._decoder = Decoder(loaded, name=self.name, seed=seed, prefix_cache_mb=prefix_cache_mb)
        self.stats: SamplerStats = self._decoder.stats
        self._batcher = Batcher(
            self._decoder.generate,
            functools.partial(self._decoder.score, batch_size=max_batch_size),
            max_batch_size=max_batch_size,
            batch_window_s=batch_window_s,
            batch_quiet_s=batch_quiet_s,
            name=self.name,
        )

    def get_tokenizer(self) -> LocalTokenizer:
        """The tokenizer of the model."""
        return self.tokenizer

    def get_base_model(self) -> str:
        """The name of the model these weights came from."""
        return self.base_model

    async def get_base_model_async(self) -> str:
        """``get_base_model``, as a coroutine."""
        return self.base_model

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle the snapshot's weights and settings (not the worker thread or queue), so
        a policy over this client can roll out in another process (``rollout_executor``);
        the copy there samples with its own model and batching worker."""
        loaded = LoadedModel(
            model=self.model,
            tokenizer=self.tokenizer,
            context_length=self.context_length,
            pad_token_id=self._decoder.pad_id,
            eos_token_ids=tuple(sorted(self._decoder.eos_ids)),
            autocast_dtype=self._loaded.autocast_dtype,
        )
        settings = {
            "max_batch_size": self.max_batch_size,
            "batch_window_s": self.batch_window_s,
            "batch_quiet_s": self.batch_quiet_s,
            "seed": int(self._decoder.rng.initial_seed()),
            "name": self.name,
            "base_model": self.base_model,
            "prefix_cache_mb": self.prefix_cache_mb,
        }
        return (_rebuild_sampling_client, (loaded, settings))

    def sample(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
        target_prompt_logprobs: types.TensorData | None = None,
        prompt_alt_tokens_k: int = 0,
        prompt_logprobs_last_n: int | None = None,
    ) -> LocalFuture[types.SampleResponse]:
        """Queue ``num_samples`` continuations of ``prompt``; a future of the response
        (await it, or ``.result()``).

        Raises ValueError at once for a bad request: an empty prompt or one with non-text
        chunks or token ids outside the vocabulary, ``num_samples`` below 1, bad sampling
        parameters, a prompt plus ``max_tokens`` longer than ``context_length`` (with
        ``max_tokens=None`` sampling may use the rest of the context; a prompt that fills
        it is refused: shorten it, e.g. ``ByteRenderer(max_prompt_tokens=...)``), or any of
        the prompt-logprob options, which the local backend does not offer (use
        ``compute_logprobs``).
        """
        prompt_options_unsupported(
            include_prompt_logprobs=(include_prompt_logprobs, False),
            topk_prompt_logprobs=(topk_prompt_logprobs, 0),
            topk_sample_logprobs=(topk_sample_logprobs, 0),
            target_prompt_logprobs=(target_prompt_logprobs, None),
            prompt_alt_tokens_k=(prompt_alt_tokens_k, 0),
            prompt_logprobs_last_n=(prompt_logprobs_last_n, None),
        )
        rows = new_rows(
            prompt,
            num_samples,
            sampling_params,
            vocab_size=self._vocab_size,
            context_length=self.context_length,
        )
        self._batcher.add_rows(rows)
        return LocalFuture(rows[0].request.future)

    async def sample_async(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
        target_prompt_logprobs: types.TensorData | None = None,
        prompt_alt_tokens_k: int = 0,
        prompt_logprobs_last_n: int | None = None,
    ) -> types.SampleResponse:
        """``sample``, awaited: the response itself.

        Cheap to call from many coroutines at once; they are served together. Cancelling
        the caller withdraws a request that has not started. Raises what ``sample`` raises.
        """
        future = self.sample(
            prompt,
            num_samples,
            sampling_params,
            include_prompt_logprobs,
            topk_prompt_logprobs,
            topk_sample_logprobs,
            target_prompt_logprobs,
            prompt_alt_tokens_k,
            prompt_logprobs_last_n,
        )
        return await asyncio.wrap_future(future.future())

    def compute_logprobs(
        self, prompt: types.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> LocalFuture[list[float | None]]:
        """A future of each prompt token's logprob given the tokens before it (None for
        the first), as Tinker's ``compute_logprobs``; with ``prompt_logprobs_last_n`` only
        the last n are computed (the others are None). Concurrent calls are scored in
        shared forward passes. Raises ValueError at once for an empty prompt, ids outside
        the vocabulary, a prompt longer than ``context_length`` or a negative n."""
        tokens = prompt_tokens(prompt, self._vocab_size)
        if len(tokens) > self.context_length:
            raise ValueError(
                f"the prompt has {len(tokens)} tokens; the model's context_length is "
                f"{self.context_length}"
            )
        if prompt_logprobs_last_n is not None and prompt_logprobs_last_n < 0:
            raise ValueError("prompt_logprobs_last_n must not be negative")
        future: Future[list[float | None]] = Future()
        self._batcher.add_scoring(tokens, future)
        if prompt_logprobs_last_n is None:
            return LocalFuture(future)
        keep = prompt_logprobs_last_n
        trimmed: Future[list[float | None]] = Future()

        def trim(done: Future[list[float | None]]) -> None:
            error = done.exception()
            if error is not None:
                trimmed.set_exception(error)
                return
            values = done.result()
            cut = max(len(values) - keep, 0)
            padding: list[float | None] = [None] * cut
            trimmed.set_result(padding + values[cut:])

        future.add_done_callback(trim)
        return LocalFuture(trimmed)

    async def compute_logprobs_async(
        self, prompt: types.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> list[float | None]:
        """``compute_logprobs``, awaited: the logprobs themselves."""
        future = self.compute_logprobs(prompt, prompt_logprobs_last_n)
        return await asyncio.wrap_future(future.future())


def create_local_sampling_client(config: LocalModelConfig) -> LocalSamplingClient:
    """A sampling client over the model ``config`` names (its initial weights).

    Raises ValueError as ``load_model`` does.
    """
    return LocalSamplingClient(
        load_model(config),
        max_batch_size=config.max_batch_size,
        batch_window_s=config.batch_window_s,
        batch_quiet_s=config.batch_quiet_s,
        seed=config.seed,
        prefix_cache_mb=config.prefix_cache_mb,
    )


def _rebuild_sampling_client(loaded: LoadedModel, settings: dict[str, Any]) -> LocalSamplingClient:
    """Unpickle a ``LocalSamplingClient`` (see ``LocalSamplingClient.__reduce__``)."""
    return LocalSamplingClient(loaded, **settings)
