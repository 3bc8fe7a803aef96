"""A local sampling client that batches concurrent requests.

Every ``sample``/``sample_async`` call puts its sequences on one queue. A single worker
thread takes everything waiting (up to ``max_batch_size`` sequences), left-pads the
prompts, and decodes the whole batch step by step with the model's KV cache, so many envs
asking at once share each forward pass. The torch work runs on that thread, never on the
event loop. The worker starts when requests arrive and ends shortly after the queue runs
dry, so an unused sampling client holds no thread (and its model can be freed).

Limits: a batch is formed when decoding starts; requests that arrive while a batch is
decoding wait for the next batch (no joining mid-batch).
"""

from __future__ import annotations

import asyncio
import atexit
import inspect
import itertools
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tinker import types

from trainer.local.config import (
    LoadedModel,
    LocalModelConfig,
    LocalTokenizer,
    load_model,
    vocab_rows,
)
from trainer.local.futures import LocalFuture

_IDLE_EXIT_S = 0.05
"""The worker thread lingers this long for new work before it exits."""
_GROUP_MIN_FILL = 0.8
_GROUP_MAX_PAD = 32
"""Prefill groups: a prompt joins the group of the next longer prompts when it is at
least ``_GROUP_MIN_FILL`` of the group's longest, or at most ``_GROUP_MAX_PAD`` tokens
shorter (a separate forward pass costs more than a little padding)."""
_snapshot_ids = itertools.count()
_WORKERS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
"""Live sampler worker threads (daemons, so a forgotten client never blocks exit)."""
_EXIT_JOIN_S = 10.0


@atexit.register
def _join_workers() -> None:
    """Let running batches finish before the interpreter tears torch down: a daemon
    thread still inside a torch op at that point aborts the process."""
    deadline = time.monotonic() + _EXIT_JOIN_S
    for worker in list(_WORKERS):
        worker.join(max(0.0, deadline - time.monotonic()))


@dataclass
class SamplerStats:
    """Counters of a sampling client's work (read them to check that requests batch)."""

    forward_passes: int = 0
    """Model calls made (one prefill per batch, then one per decoding step)."""
    batches: int = 0
    """Batches decoded."""
    sequences: int = 0
    """Sequences sampled."""
    sampled_tokens: int = 0
    """Tokens sampled, over all sequences."""
    largest_batch: int = 0
    """Most sequences decoded together."""


@dataclass(frozen=True)
class _Params:
    max_tokens: int
    temperature: float
    top_k: int
    """0: off."""
    top_p: float
    seed: int | None
    stop_ids: frozenset[int]
    stop_strings: tuple[str, ...]


@dataclass
class _Request:
    tokens: list[int]
    params: _Params
    future: Future[types.SampleResponse]
    sequences: list[types.SampledSequence | None]
    remaining: int
    started: bool = False


@dataclass
class _Row:
    """One sequence being sampled."""

    request: _Request
    index: int
    stream: int | None
    """The row's own random stream (from the request's seed), or None: the sampler's."""
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


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
    ) -> None:
        """Serve ``loaded.model`` (taken over, not copied).

        ``max_batch_size``: most sequences decoded together. ``batch_window_s``: longest
        wait for more requests before a batch starts; ``batch_quiet_s``: a batch also
        starts when no request came for this long. Raises ValueError for a
        ``max_batch_size`` below 1 or a negative time.
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
        self.stats = SamplerStats()
        self._loaded = loaded
        self._eos_ids = frozenset(loaded.eos_token_ids)
        self._pad_id = loaded.pad_token_id
        self._vocab_size = vocab_rows(self.model)
        self._device = next(self.model.parameters()).device
        self._rng = torch.Generator(device=self._device)
        self._rng.manual_seed(seed)
        self._sequence_ids = itertools.count()
        # A peft model's forward passes these through to its base: ask the base.
        get_base = getattr(self.model, "get_base_model", None)
        base = get_base() if callable(get_base) else self.model
        params = inspect.signature(base.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._keep_last_logits = "logits_to_keep" in params
        self._joinable_cache = True
        """False once a prefill cache turned out not to be a plain ``DynamicCache``."""
        self._cond = threading.Condition()
        self._pending: deque[_Row] = deque()
        self._scoring: deque[tuple[list[int], Future[list[float | None]]]] = deque()
        self._worker_running = False

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
            pad_token_id=self._pad_id,
            eos_token_ids=tuple(sorted(self._eos_ids)),
            autocast_dtype=self._loaded.autocast_dtype,
        )
        settings = {
            "max_batch_size": self.max_batch_size,
            "batch_window_s": self.batch_window_s,
            "batch_quiet_s": self.batch_quiet_s,
            "seed": int(self._rng.initial_seed()),
            "name": self.name,
            "base_model": self.base_model,
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
        _prompt_options_unsupported(
            include_prompt_logprobs=(include_prompt_logprobs, False),
            topk_prompt_logprobs=(topk_prompt_logprobs, 0),
            topk_sample_logprobs=(topk_sample_logprobs, 0),
            target_prompt_logprobs=(target_prompt_logprobs, None),
            prompt_alt_tokens_k=(prompt_alt_tokens_k, 0),
            prompt_logprobs_last_n=(prompt_logprobs_last_n, None),
        )
        return LocalFuture(self._submit(prompt, num_samples, sampling_params))

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
        tokens = _prompt_ints(prompt)
        if not tokens:
            raise ValueError("the prompt is empty")
        if min(tokens) < 0 or max(tokens) >= self._vocab_size:
            raise ValueError(f"prompt token ids must be in [0, {self._vocab_size})")
        if len(tokens) > self.context_length:
            raise ValueError(
                f"the prompt has {len(tokens)} tokens; the model's context_length is "
                f"{self.context_length}"
            )
        if prompt_logprobs_last_n is not None and prompt_logprobs_last_n < 0:
            raise ValueError("prompt_logprobs_last_n must not be negative")
        future: Future[list[float | None]] = Future()
        with self._cond:
            self._scoring.append((tokens, future))
            self._wake_locked()
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

    # -- requests --------------------------------------------------------------------------

    def _submit(
        self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams
    ) -> Future[types.SampleResponse]:
        if num_samples < 1:
            raise ValueError(f"num_samples must be at least 1, got {num_samples}")
        tokens = _prompt_ints(prompt)
        if not tokens:
            raise ValueError("the prompt is empty")
        if min(tokens) < 0 or max(tokens) >= self._vocab_size:
            raise ValueError(f"prompt token ids must be in [0, {self._vocab_size})")
        params = self._resolve(sampling_params, len(tokens))
        future: Future[types.SampleResponse] = Future()
        request = _Request(tokens, params, future, [None] * num_samples, num_samples)
        rows = [_Row(request, i, _row_stream(params.seed, i)) for i in range(num_samples)]
        with self._cond:
            self._pending.extend(rows)
            self._wake_locked()
        return future

    def _wake_locked(self) -> None:
        self._cond.notify()
        if not self._worker_running:
            self._worker_running = True
            worker = threading.Thread(
                target=self._work, name=f"arena-sampler-{self.name}", daemon=True
            )
            _WORKERS.add(worker)
            worker.start()

    def _resolve(self, sp: types.SamplingParams, prompt_len: int) -> _Params:
        room = self.context_length - prompt_len
        if room < 1:
            raise ValueError(
                f"the prompt has {prompt_len} tokens; the model's context_length is "
                f"{self.context_length}: shorten the prompt to leave room for sampled tokens"
            )
        max_tokens = room if sp.max_tokens is None else sp.max_tokens
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        if max_tokens > room:
            raise ValueError(
                f"prompt ({prompt_len} tokens) plus max_tokens ({max_tokens}) exceeds the "
                f"model's context_length ({self.context_length}); shorten the prompt or lower "
                "max_tokens"
            )
        if sp.temperature < 0:
            raise ValueError(f"temperature must not be negative, got {sp.temperature}")
        if not 0.0 < sp.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {sp.top_p}")
        if sp.top_k < -1:
            raise ValueError(f"top_k must be -1 (off), 0 (off) or positive, got {sp.top_k}")
        stop_ids, stop_strings = _stop_condition(sp.stop)
        return _Params(
            max_tokens=max_tokens,
            temperature=float(sp.temperature),
            top_k=max(sp.top_k, 0),
            top_p=float(sp.top_p),
            seed=sp.seed,
            stop_ids=stop_ids,
            stop_strings=stop_strings,
        )

    # -- the worker ------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._cond:
                if not self._pending and not self._scoring:
                    self._cond.wait(_IDLE_EXIT_S)
                    if not self._pending and not self._scoring:
                        self._worker_running = False
                        return
                scoring = [self._scoring.popleft() for _ in range(len(self._scoring))]
                rows = []
                if self._pending:
                    self._gather_locked()
                    rows = self._take_locked()
            if scoring:
                self._score(scoring)
            if not rows:
                continue
            try:
                self._generate(rows)
            except BaseException as exc:
                for request in {id(r.request): r.request for r in rows}.values():
                    if not request.future.done():
                        request.future.set_exception(exc)
                if not isinstance(exc, Exception):
                    with self._cond:
                        self._worker_running = False
                    raise

    @torch.inference_mode()
    def _score(self, requests: list[tuple[list[int], Future[list[float | None]]]]) -> None:
        """Prompt logprobs for ``compute_logprobs`` requests, a batch per forward pass."""
        live = [(t, f) for t, f in requests if f.set_running_or_notify_cancel()]
        live.sort(key=lambda r: len(r[0]))
        for start in range(0, len(live), self.max_batch_size):
            chunk = live[start : start + self.max_batch_size]
            try:
                width = max(len(t) for t, _ in chunk)
                ids = torch.tensor(
                    [t + [self._pad_id] * (width - len(t)) for t, _ in chunk], device=self._device
                )
                mask = torch.tensor(
                    [[1] * len(t) + [0] * (width - len(t)) for t, _ in chunk],
                    device=self._device,
                )
                with self._loaded.compute():
                    out = self.model(input_ids=ids, attention_mask=mask, use_cache=False)
                logits = out.logits.float()
                self.stats.forward_passes += 1
                logp = torch.log_softmax(logits[:, :-1], dim=-1)
                picked = logp.gather(2, ids[:, 1:, None]).squeeze(2).tolist()
                for (tokens, future), row in zip(chunk, picked, strict=True):
                    values: list[float | None] = [None, *row[: len(tokens) - 1]]
                    future.set_result(values)
            except Exception as exc:
                for _, future in chunk:
                    if not future.done():
                        future.set_exception(exc)

    def _gather_locked(self) -> None:
        """Wait (up to the window) while requests keep arriving and the batch is not full."""
        deadline = time.monotonic() + self.batch_window_s
        while len(self._pending) < self.max_batch_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._cond.wait(min(remaining, self.batch_quiet_s)):
                return

    def _take_locked(self) -> list[_Row]:
        rows: list[_Row] = []
        while self._pending and len(rows) < self.max_batch_size:
            row = self._pending.popleft()
            request = row.request
            if not request.started:
                if not request.future.set_running_or_notify_cancel():
                    # Cancelled before it started: drop its other rows too.
                    self._pending = deque(r for r in self._pending if r.request is not request)
                    continue
                request.started = True
            elif request.future.done():  # an earlier batch of its rows failed
                continue
            rows.append(row)
        return rows

    def _forward(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> tuple[torch.Tensor, Any]:
        kwargs: dict[str, Any] = {
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": positions,
            "use_cache": True,
        }
        if cache is not None:
            kwargs[self._cache_arg] = cache
        if self._keep_last_logits:
            kwargs["logits_to_keep"] = 1
        with self._loaded.compute():
            out = self.model(**kwargs)
        self.stats.forward_passes += 1
        return out.logits[:, -1, :].float(), getattr(out, self._cache_arg)

    def _prefill_group(
        self, rows: Sequence[_Row], width: int
    ) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """Prefill ``rows`` left-padded to ``width``: last logits, cache, attention mask."""
        pad = self._pad_id
        ids = torch.tensor(
            [[pad] * (width - len(r.request.tokens)) + r.request.tokens for r in rows],
            device=self._device,
        )
        mask = torch.tensor(
            [[0] * (width - len(r.request.tokens)) + [1] * len(r.request.tokens) for r in rows],
            device=self._device,
        )
        # Left padding: each row's positions count its own tokens from 0.
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits, cache = self._forward(ids, mask, positions, None)
        return logits, cache, mask

    def _prefill(self, rows: list[_Row]) -> tuple[list[_Row], torch.Tensor, Any, torch.Tensor]:
        """Prefill a batch: rows (possibly reordered), last logits, cache, attention mask.

        Rows of very different prompt lengths are prefilled in groups of similar length
        (less padding to compute), then their caches are left-padded to one width and
        joined, so decoding runs on the whole batch. Caches that cannot be joined safely
        (not a plain ``DynamicCache``) get one padded prefill instead.
        """
        rows = sorted(rows, key=lambda r: -len(r.request.tokens))
        groups: list[list[_Row]] = []
        for row in rows:
            n = len(row.request.tokens)
            if groups:
                longest = len(groups[-1][0].request.tokens)
                if n >= _GROUP_MIN_FILL * longest or longest - n <= _GROUP_MAX_PAD:
                    groups[-1].append(row)
                    continue
            groups.append([row])
        width = len(rows[0].request.tokens)
        if len(groups) == 1 or not self._joinable_cache:
            logits, cache, mask = self._prefill_group(rows, width)
            return rows, logits, cache, mask
        parts = [self._prefill_group(g, len(g[0].request.tokens)) for g in groups]
        if not all(_is_plain_dynamic_cache(cache) for _, cache, _ in parts):
            self._joinable_cache = False
            logits, cache, mask = self._prefill_group(rows, width)
            return rows, logits, cache, mask
        base = parts[0][1]
        for i, layer in enumerate(base.layers):
            for name in ("keys", "values"):
                joined = [
                    torch.nn.functional.pad(
                        getattr(cache.layers[i], name), (0, 0, width - m.shape[1], 0)
                    )
                    for _, cache, m in parts
                ]
                setattr(layer, name, torch.cat(joined, dim=0))
        mask = torch.cat(
            [torch.nn.functional.pad(m, (width - m.shape[1], 0)) for _, _, m in parts], dim=0
        )
        logits = torch.cat([lg for lg, _, _ in parts], dim=0)
        return rows, logits, base, mask

    @torch.inference_mode()
    def _generate(self, rows: list[_Row]) -> None:
        stats = self.stats
        stats.batches += 1
        stats.largest_batch = max(stats.largest_batch, len(rows))
        rows, logits, cache, mask = self._prefill(rows)
        next_pos = mask.sum(dim=1, keepdim=True)  # each row's own next position
        can_prune = hasattr(cache, "batch_select_indices")
        batch: list[_Row | None] = list(rows)  # None: finished, still in the batch
        while True:
            chosen, logprobs = self._choose(logits, batch)
            chosen_list, logprob_list = chosen.tolist(), logprobs.tolist()
            for j, row in enumerate(batch):
                if row is None:
                    continue
                token = chosen_list[j]
                row.tokens.append(token)
                row.logprobs.append(logprob_list[j])
                reason = self._stop_reason(row, token)
                if reason is not None:
                    self._finish(row, reason)
                    batch[j] = None
            alive = [j for j, row in enumerate(batch) if row is not None]
            if not alive:
                return
            if can_prune and len(alive) < len(batch):
                index = torch.tensor(alive, device=self._device)
                cache.batch_select_indices(index)
                mask, next_pos, chosen = mask[index], next_pos[index], chosen[index]
                batch = [batch[j] for j in alive]
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            logits, cache = self._forward(chosen[:, None], mask, next_pos, cache)
            next_pos = next_pos + 1

    def _choose(
        self, logits: torch.Tensor, batch: Sequence[_Row | None]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Next token per row and its logprob (see the class docstring)."""
        chosen = logits.argmax(dim=-1)  # greedy rows, and finished rows still in the batch
        sampled = [
            (j, row)
            for j, row in enumerate(batch)
            if row is not None and row.request.params.temperature > 0
        ]
        if not sampled:
            logp = torch.log_softmax(logits, dim=-1)
            return chosen, logp.gather(1, chosen[:, None]).squeeze(1)
        temps = [1.0] * len(batch)
        for j, row in sampled:
            temps[j] = row.request.params.temperature
        scaled = logits / torch.tensor(temps, device=logits.device)[:, None]
        logp = torch.log_softmax(scaled, dim=-1)
        index = torch.tensor([j for j, _ in sampled], device=logits.device)
        candidates = _truncate(
            scaled[index],
            [row.request.params.top_k for _, row in sampled],
            [row.request.params.top_p for _, row in sampled],
        )
        # One inverse-CDF draw for the whole batch: each row's uniform comes from its own
        # stream (seeded requests: a hash of seed, sample index and position, so a row
        # draws the same whatever its neighbours) or from the sampler's generator.
        uniforms = torch.rand(len(sampled), generator=self._rng, device=self._device)
        seeded = [(k, row) for k, (_, row) in enumerate(sampled) if row.stream is not None]
        if seeded:
            values = [_uniform(row.stream, len(row.tokens)) for _, row in seeded]  # type: ignore[arg-type]
            at = torch.tensor([k for k, _ in seeded], device=self._device)
            uniforms[at] = torch.tensor(values, device=self._device)
        cdf = torch.softmax(candidates, dim=-1).cumsum(dim=-1)
        # Scaled by the total (float rounding can leave it just under 1), and never 0, so
        # the first token whose cumulative mass reaches it has a probability above zero.
        targets = (uniforms.to(cdf.dtype).clamp(min=1e-12) * cdf[:, -1])[:, None]
        draws = torch.searchsorted(cdf, targets).squeeze(1).clamp(max=cdf.shape[1] - 1)
        chosen[index] = draws
        return chosen, logp.gather(1, chosen[:, None]).squeeze(1)

    def _stop_reason(self, row: _Row, token: int) -> types.StopReason | None:
        params = row.request.params
        if token in self._eos_ids or token in params.stop_ids:
            return "stop"
        if params.stop_strings:
            text = self.tokenizer.decode(row.tokens)
            if any(s in text for s in params.stop_strings):
                return "stop"
        if len(row.tokens) >= params.max_tokens:
            return "length"
        return None

    def _finish(self, row: _Row, reason: types.StopReason) -> None:
        request = row.request
        request.sequences[row.index] = types.SampledSequence(
            stop_reason=reason,
            sequence_id=f"{self.name}-{next(self._sequence_ids)}",
            tokens_np=np.asarray(row.tokens, dtype=np.int32),
            logprobs_np=np.asarray(row.logprobs, dtype=np.float32),
        )
        self.stats.sequences += 1
        self.stats.sampled_tokens += len(row.tokens)
        request.remaining -= 1
        if request.remaining == 0 and not request.future.done():
            sequences = [s for s in request.sequences if s is not None]
            request.future.set_result(types.SampleResponse(sequences=sequences))


def _prompt_options_unsupported(**settings: tuple[object, object]) -> None:
    for name, (value, default) in settings.items():
        if value != default:
            raise ValueError(
                f"the local backend does not support {name}={value!r} in sample(); "
                "use compute_logprobs() for prompt logprobs"
            )


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
    )


def _is_plain_dynamic_cache(cache: Any) -> bool:
    """True for a ``DynamicCache`` whose layers all hold ``[batch, heads, time, dim]``
    ``keys``/``values`` tensors (safe to pad and join along batch)."""
    if type(cache).__name__ != "DynamicCache":
        return False
    layers = getattr(cache, "layers", None)
    if not layers:
        return False
    for layer in layers:
        if type(layer).__name__ != "DynamicLayer":
            return False
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor):
            return False
        if keys.dim() != 4 or values.dim() != 4:
            return False
    return True


def _prompt_ints(prompt: types.ModelInput) -> list[int]:
    chunks = prompt.chunks
    if len(chunks) == 1 and isinstance(chunks[0], types.EncodedTextChunk):
        return list(chunks[0].tokens)
    return prompt.to_ints()  # raises ValueError for image chunks


_MASK64 = (1 << 64) - 1


def _splitmix64(value: int) -> int:
    """SplitMix64's finaliser: a well-mixed 64-bit hash of ``value``."""
    z = (value + 0x9E37_79B9_7F4A_7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58_476D_1CE4_E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D0_49BB_1331_11EB) & _MASK64
    return z ^ (z >> 31)


def _row_stream(seed: int | None, index: int) -> int | None:
    """The random stream of sample ``index`` of a request seeded with ``seed``."""
    if seed is None:
        return None
    return _splitmix64(_splitmix64(seed & _MASK64) ^ index)


def _uniform(stream: int, position: int) -> float:
    """The stream's uniform draw in (0, 1) for the token at ``position``."""
    return ((_splitmix64(stream ^ _splitmix64(position)) >> 11) + 0.5) / (1 << 53)


def _stop_condition(
    stop: str | Sequence[str] | Sequence[int] | None,
) -> tuple[frozenset[int], tuple[str, ...]]:
    if stop is None:
        return frozenset(), ()
    if isinstance(stop, str):
        stop = [stop]
    ids = [s for s in stop if isinstance(s, int)]
    strings = [s for s in stop if isinstance(s, str)]
    if len(ids) + len(strings) != len(stop) or (ids and strings):
        raise ValueError("stop must be a string, a list of strings, or a list of token ids")
    if any(not s for s in strings):
        raise ValueError("stop strings must not be empty")
    return frozenset(ids), tuple(strings)


def _truncate(scaled: torch.Tensor, top_k: list[int], top_p: list[float]) -> torch.Tensor:
    """Logits with the tokens outside each row's top-k and top-p set to -inf."""
    vocab = scaled.shape[-1]
    if any(0 < k < vocab for k in top_k):
        k = torch.tensor([k if 0 < k < vocab else vocab for k in top_k], device=scaled.device)
        ordered = scaled.sort(dim=-1, descending=True).values
        kth = ordered.gather(1, (k - 1)[:, None])
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if any(p < 1.0 for p in top_p):
        p = torch.tensor(top_p, device=scaled.device, dtype=scaled.dtype)
        ordered, order = scaled.sort(dim=-1, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        # Drop a token when the tokens ranked above it already reach top_p (the first
        # token is always kept).
        drop_sorted = (probs.cumsum(dim=-1) - probs) >= p[:, None]
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    return scaled


def _rebuild_sampling_client(loaded: LoadedModel, settings: dict[str, Any]) -> LocalSamplingClient:
    """Unpickle a ``LocalSamplingClient`` (see ``LocalSamplingClient.__reduce__``)."""
    return LocalSamplingClient(loaded, **settings)
