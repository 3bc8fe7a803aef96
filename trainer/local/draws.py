"""The sampler's random draws: top-k and top-p truncation of the logits, and the random
stream of each row of a seeded request (a hash of the seed, the sample's index and the
token's position), so that a row draws the same whatever its neighbours in a batch."""

from __future__ import annotations

import torch

_MASK64 = (1 << 64) - 1


def splitmix64(value: int) -> int:
    """SplitMix64's finaliser: a well-mixed 64-bit hash of ``value``."""
    z = (value + 0x9E37_79B9_7F4A_7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58_476D_1CE4_E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D0_49BB_1331_11EB) & _MASK64
    return z ^ (z >> 31)


def row_stream(seed: int | None, index: int) -> int | None:
    """The random stream of sample ``index`` of a request seeded with ``seed`` (None for
    an unseeded request: it draws from the sampler's generator)."""
    if seed is None:
        return None
    return splitmix64(splitmix64(seed & _MASK64) ^ index)


def uniform(stream: int, position: int) -> float:
    """The stream's uniform draw in (0, 1) for the token at ``position``."""
    return ((splitmix64(stream ^ splitmix64(position)) >> 11) + 0.5) / (1 << 53)


def truncate(scaled: torch.Tensor, top_k: list[int], top_p: list[float]) -> torch.Tensor:
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


def inverse_cdf(candidates: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One token per row of ``candidates`` (logits, -inf outside the row's choices), drawn
    by the row's uniform in (0, 1] through the cumulative distribution."""
    cdf = torch.softmax(candidates, dim=-1).cumsum(dim=-1)
    # Scaled by the total (float rounding can leave it just under 1), and never 0, so the
    # first token whose cumulative mass reaches it has a probability above zero.
    targets = (uniforms.to(cdf.dtype).clamp(min=1e-12) * cdf[:, -1])[:, None]
    return torch.searchsorted(cdf, targets).squeeze(1).clamp(max=cdf.shape[1] - 1)
