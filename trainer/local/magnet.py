"""The exact KL at an answer's tokens, toward a magnet that moves slowly (magnetic mirror
descent), and how far each optimizer step moved the policy.

The sampled KL penalty (``TrainConfig.kl_penalty_coef``) reads one number per token: the
log-ratio of the token that was sampled. Once a decision turns near-deterministic, the
other move is never sampled and the penalty loses its pull. Here the local backend reads
the whole distribution of the next token, from the logits, at every token of every answer
(the positions a datum's ``mask`` marks), and adds to the loss

    reverse * KL(policy || magnet) + forward * KL(magnet || policy)

summed over those tokens. Summed along a sampled answer, the per-token KL is an unbiased
estimate of the KL between the answers' distributions (the chain rule), and tokens both
models are sure of (an answer's brackets) add about nothing; so the figures measure the
decision, not the formatting. The forward term is a cross-entropy toward the magnet: its
gradient (policy minus magnet, over the whole vocabulary) pulls back a move the policy has
given up, which the sampled penalty cannot.

The magnet is an exponential moving average of the trained weights (LoRA: the adapter's),
``magnet_rate`` a step; ``reset`` moves it onto the policy (NashPG's phases).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

MAGNET_FILE = "magnet.pt"
"""A checkpoint's magnet, beside the optimizer's state."""

STEP_KL_EXAMPLES = 16
"""Datums of a step whose answers are re-scored after the optimizer step, to measure how
far the step moved the policy (``policy_step_kl``): one extra forward pass over at most
these many datums a step."""


@dataclass(frozen=True)
class DecisionKL:
    """The exact KL terms the local training client adds to the loss (see the module
    docstring). Every coefficient 0 measures the figures without changing the loss."""

    reverse: float = 0.0
    """Coefficient of KL(policy || magnet) at each answer token."""
    forward: float = 0.0
    """Coefficient of KL(magnet || policy) at each answer token (a cross-entropy toward
    the magnet)."""
    magnet_rate: float = 0.0
    """Share of the way the magnet moves toward the trained weights after each optimizer
    step (an exponential moving average); 0 keeps it where it is until ``reset``."""

    def validate(self) -> None:
        """Raise ValueError for a negative coefficient or a rate outside [0, 1]."""
        if self.reverse < 0 or self.forward < 0:
            raise ValueError("the exact KL coefficients must not be negative")
        if not 0.0 <= self.magnet_rate <= 1.0:
            raise ValueError(f"magnet_rate must be in [0, 1], got {self.magnet_rate}")


class Magnet:
    """A slowly moving copy of the trained parameters (``params``, in order)."""

    def __init__(self, params: Sequence[torch.nn.Parameter], rate: float) -> None:
        self.params = list(params)
        self.rate = rate
        self.weights = [p.detach().clone() for p in self.params]

    @torch.no_grad()
    def update(self) -> None:
        """One step of the moving average toward the parameters."""
        if self.rate <= 0:
            return
        for weight, param in zip(self.weights, self.params, strict=True):
            weight.lerp_(param.detach(), self.rate)

    @torch.no_grad()
    def reset(self) -> None:
        """The magnet becomes the parameters as they are now."""
        for weight, param in zip(self.weights, self.params, strict=True):
            weight.copy_(param.detach())

    @contextmanager
    def swapped(self) -> Iterator[None]:
        """Inside, the model computes with the magnet's weights. Use it only without a
        gradient and before the pass that will be differentiated: autograd keeps the
        parameters themselves, not copies."""
        saved = [p.detach().clone() for p in self.params]
        with torch.no_grad():
            for weight, param in zip(self.weights, self.params, strict=True):
                param.copy_(weight)
        try:
            yield
        finally:
            with torch.no_grad():
                for old, param in zip(saved, self.params, strict=True):
                    param.copy_(old)

    def state_dict(self) -> dict[str, Any]:
        """The magnet's weights and rate (saved with a checkpoint)."""
        return {"rate": self.rate, "weights": [w.cpu() for w in self.weights]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict``'s weights. Raises ValueError when they do not fit."""
        weights = state.get("weights", [])
        if len(weights) != len(self.weights) or any(
            w.shape != own.shape for w, own in zip(weights, self.weights, strict=True)
        ):
            raise ValueError("the checkpoint's magnet does not fit this model's trained weights")
        for own, saved in zip(self.weights, weights, strict=True):
            own.copy_(saved.to(own.device))


def answer_kl(
    logits_NV: torch.Tensor, magnet_logp_NV: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """At ``N`` positions: KL(policy || magnet), KL(magnet || policy) and the policy's
    entropy, each ``[N]``, from the policy's logits (differentiable) and the magnet's
    log-probabilities."""
    logp = torch.log_softmax(logits_NV.float(), dim=-1)
    magnet = magnet_logp_NV.float()
    p = logp.exp()
    reverse = (p * (logp - magnet)).sum(-1)
    forward = (magnet.exp() * (magnet - logp)).sum(-1)
    entropy = -(p * logp).sum(-1)
    return reverse, forward, entropy


def answer_starts(mask_BT: torch.Tensor) -> torch.Tensor:
    """How many answers (runs of consecutive marked tokens) ``mask_BT`` holds."""
    marked = mask_BT > 0
    before = torch.zeros_like(marked)
    before[:, 1:] = marked[:, :-1]
    return (marked & ~before).sum()


def kl_divergence(old_logp_NV: torch.Tensor, new_logp_NV: torch.Tensor) -> torch.Tensor:
    """KL(old || new) at each of ``N`` positions, from log-probabilities."""
    return (old_logp_NV.exp() * (old_logp_NV - new_logp_NV)).sum(-1)


@dataclass
class _Captured:
    """One datum's tokens and the policy's log-probabilities at its answer tokens, as
    they were before the optimizer step."""

    tokens: list[int]
    positions: torch.Tensor
    """``[T]`` bool: the answer tokens."""
    logp_NV: torch.Tensor


class Regularizer:
    """What the training client keeps for the exact KL: the settings, the magnet, the
    figures of the current ``forward_backward`` call, and the answers it re-scores after
    the optimizer step."""

    def __init__(self, settings: DecisionKL, params: Sequence[torch.nn.Parameter]) -> None:
        settings.validate()
        self.settings = settings
        self.magnet = Magnet(params, settings.magnet_rate)
        self._sums: dict[str, float] = {}
        self._captured: list[_Captured] = []

    def save(self, directory: Path) -> None:
        """Write the magnet into a checkpoint ``directory``."""
        torch.save(self.magnet.state_dict(), directory / MAGNET_FILE)

    def restore(self, directory: Path | None) -> None:
        """The magnet of the checkpoint in ``directory``; where it has none (or no
        directory is given), the magnet starts at the weights as they are."""
        saved = directory / MAGNET_FILE if directory is not None else None
        if saved is not None and saved.is_file():
            self.magnet.load_state_dict(torch.load(saved, weights_only=True))
        else:
            self.magnet.reset()

    def begin(self) -> None:
        """A ``forward_backward`` call starts: its figures start at 0."""
        self._sums = {}

    def sums(self) -> dict[str, float]:
        """The call's figures, summed over answer tokens (``kl_reverse:sum``,
        ``kl_forward:sum``, ``entropy:sum``) with the counts ``answer_tokens:sum`` and
        ``answers:sum``."""
        return dict(self._sums)

    def penalty(
        self,
        tokens: Sequence[list[int]],
        positions_BT: torch.Tensor,
        logits_NV: torch.Tensor,
        magnet_logits_NV: torch.Tensor,
    ) -> torch.Tensor:
        """The KL terms to add to a micro-batch's loss (the policy's ``logits_NV`` at the
        ``positions_BT`` of its datums ``tokens``, the magnet's beside them); records the
        figures and, while fewer than ``STEP_KL_EXAMPLES`` are kept, the datums whose
        answers are re-scored after the step."""
        magnet_logp = torch.log_softmax(magnet_logits_NV.float(), dim=-1)
        reverse, forward, entropy = answer_kl(logits_NV, magnet_logp)
        s = self.settings
        for key, value in (
            ("kl_reverse:sum", reverse.detach().sum()),
            ("kl_forward:sum", forward.detach().sum()),
            ("entropy:sum", entropy.detach().sum()),
            ("answer_tokens:sum", torch.tensor(float(reverse.numel()))),
            ("answers:sum", answer_starts(positions_BT)),
        ):
            self._sums[key] = self._sums.get(key, 0.0) + float(value)
        self._capture(tokens, positions_BT, logits_NV)
        return (s.reverse * reverse + s.forward * forward).sum()

    def _capture(
        self, tokens: Sequence[list[int]], positions_BT: torch.Tensor, logits_NV: torch.Tensor
    ) -> None:
        logp = torch.log_softmax(logits_NV.detach().float(), dim=-1)
        counts = positions_BT.sum(1).tolist()
        start = 0
        for row, (ids, count) in enumerate(zip(tokens, counts, strict=True)):
            if len(self._captured) >= STEP_KL_EXAMPLES:
                return
            if count:
                positions = positions_BT[row, : len(ids)].detach().cpu()
                rows = logp[start : start + int(count)].cpu()
                self._captured.append(_Captured(list(ids), positions, rows))
            start += int(count)

    def after_step(self, score: Any) -> dict[str, float]:
        """After the optimizer step: how far it moved the policy at the kept answers
        (``policy_step_kl``: KL(before || after), summed over an answer's tokens, a mean
        per answer), re-scored by ``score(tokens_list, positions_list) -> [logp_NV]``;
        then the magnet's own step."""
        captured, self._captured = self._captured, []
        metrics: dict[str, float] = {}
        if captured:
            new = score([c.tokens for c in captured], [c.positions for c in captured])
            answers = 0
            total = 0.0
            for c, logp in zip(captured, new, strict=True):
                total += float(kl_divergence(c.logp_NV, logp.cpu()).sum())
                answers += int(answer_starts(c.positions.unsqueeze(0)))
            metrics["policy_step_kl"] = total / max(answers, 1)
        self.magnet.update()
        return metrics
