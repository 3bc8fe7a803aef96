"""A sampling request of the local sampler, checked at the call: its prompt (text tokens
inside the vocabulary) and its sampling parameters, resolved against the model's context;
and the rows (one a sample) it is decoded as."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from tinker import types

from trainer.local.draws import row_stream


@dataclass(frozen=True)
class Params:
    """A request's sampling parameters, checked and resolved."""

    max_tokens: int
    temperature: float
    top_k: int
    """0: off."""
    top_p: float
    seed: int | None
    stop_ids: frozenset[int]
    stop_strings: tuple[str, ...]


@dataclass
class Request:
    """One ``sample`` call: its prompt, parameters, future and the sequences done so far."""

    tokens: list[int]
    params: Params
    future: Future[types.SampleResponse]
    sequences: list[types.SampledSequence | None]
    remaining: int
    started: bool = False


@dataclass
class Row:
    """One sequence being sampled."""

    request: Request
    index: int
    stream: int | None
    """The row's own random stream (from the request's seed), or None: the sampler's."""
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


def new_rows(
    prompt: types.ModelInput,
    num_samples: int,
    sampling_params: types.SamplingParams,
    *,
    vocab_size: int,
    context_length: int,
) -> list[Row]:
    """The rows of a new request for ``num_samples`` continuations of ``prompt`` (its future
    is ``rows[0].request.future``). Raises ValueError as ``LocalSamplingClient.sample``
    does."""
    if num_samples < 1:
        raise ValueError(f"num_samples must be at least 1, got {num_samples}")
    tokens = prompt_tokens(prompt, vocab_size)
    params = resolve(sampling_params, len(tokens), context_length)
    future: Future[types.SampleResponse] = Future()
    request = Request(tokens, params, future, [None] * num_samples, num_samples)
    return [Row(request, i, row_stream(params.seed, i)) for i in range(num_samples)]


def prompt_tokens(prompt: types.ModelInput, vocab_size: int) -> list[int]:
    """The prompt's token ids. Raises ValueError for an empty prompt, one with non-text
    chunks, or ids outside ``[0, vocab_size)``."""
    chunks = prompt.chunks
    if len(chunks) == 1 and isinstance(chunks[0], types.EncodedTextChunk):
        tokens = list(chunks[0].tokens)
    else:
        tokens = prompt.to_ints()  # raises ValueError for image chunks
    if not tokens:
        raise ValueError("the prompt is empty")
    if min(tokens) < 0 or max(tokens) >= vocab_size:
        raise ValueError(f"prompt token ids must be in [0, {vocab_size})")
    return tokens


def resolve(sp: types.SamplingParams, prompt_len: int, context_length: int) -> Params:
    """``sp`` checked for a prompt of ``prompt_len`` tokens (``max_tokens=None``: the rest
    of the context). Raises ValueError for a prompt that leaves no room, a prompt plus
    ``max_tokens`` over ``context_length``, or a bad parameter."""
    room = context_length - prompt_len
    if room < 1:
        raise ValueError(
            f"the prompt has {prompt_len} tokens; the model's context_length is "
            f"{context_length}: shorten the prompt to leave room for sampled tokens"
        )
    max_tokens = room if sp.max_tokens is None else sp.max_tokens
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    if max_tokens > room:
        raise ValueError(
            f"prompt ({prompt_len} tokens) plus max_tokens ({max_tokens}) exceeds the "
            f"model's context_length ({context_length}); shorten the prompt or lower "
            "max_tokens"
        )
    if sp.temperature < 0:
        raise ValueError(f"temperature must not be negative, got {sp.temperature}")
    if not 0.0 < sp.top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {sp.top_p}")
    if sp.top_k < -1:
        raise ValueError(f"top_k must be -1 (off), 0 (off) or positive, got {sp.top_k}")
    stop_ids, stop_strings = stop_condition(sp.stop)
    return Params(
        max_tokens=max_tokens,
        temperature=float(sp.temperature),
        top_k=max(sp.top_k, 0),
        top_p=float(sp.top_p),
        seed=sp.seed,
        stop_ids=stop_ids,
        stop_strings=stop_strings,
    )


def stop_condition(
    stop: str | Sequence[str] | Sequence[int] | None,
) -> tuple[frozenset[int], tuple[str, ...]]:
    """The stop token ids and stop strings of ``SamplingParams.stop``. Raises ValueError
    for a mix of both, another kind, or an empty string."""
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


def prompt_options_unsupported(**settings: tuple[object, object]) -> None:
    """Raise ValueError naming the first of ``sample``'s prompt-logprob options that is not
    at its default (``name=(value, default)``): the local backend does not offer them."""
    for name, (value, default) in settings.items():
        if value != default:
            raise ValueError(
                f"the local backend does not support {name}={value!r} in sample(); "
                "use compute_logprobs() for prompt logprobs"
            )
