"""The local training client's methods for the exact KL toward a magnet
(``trainer.local.magnet``): turning it on, moving the magnet, its figures around each
``forward_backward`` and optimizer step, and its place in checkpoints."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from trainer.local.forward import score_positions
from trainer.local.magnet import DecisionKL, Regularizer


class Regularized:
    """The local training client's methods for the exact KL (a mixin: it uses the
    client's ``_submit``, ``trainable_parameters`` and the checkpoint it was loaded from)."""

    _regularizer: Regularizer | None = None
    _loaded_from: Path | None = None
    _loaded: Any
    _device: torch.device

    def _submit(self, fn: Any, *args: Any) -> Any:
        raise NotImplementedError

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        raise NotImplementedError

    def _measured(self, run: Callable[[], Any]) -> Any:
        """``run()``'s forward/backward output, with the exact KL's figures of the call."""
        if self._regularizer is None:
            return run()
        self._regularizer.begin()
        output = run()
        output.metrics.update(self._regularizer.sums())
        return output

    def _after_step(self) -> dict[str, float]:
        """After an optimizer step: ``policy_step_kl``, and the magnet's own step."""
        if self._regularizer is None:
            return {}
        return self._regularizer.after_step(
            lambda tokens, positions: score_positions(self._loaded, tokens, positions, self._device)
        )

    def _save_magnet(self, directory: Path, with_optimizer: bool) -> None:
        if with_optimizer and self._regularizer is not None:
            self._regularizer.save(directory)

    def _restore_magnet(self, directory: Path) -> None:
        self._loaded_from = directory
        if self._regularizer is not None:
            self._regularizer.restore(directory)

    def regularize(self, settings: DecisionKL) -> None:
        """From now on, add the exact KL terms of ``settings`` at the answer tokens of
        datums that mark them (``mask``) and report them in ``forward_backward``'s
        metrics; ``optim_step`` then also reports ``policy_step_kl``. The magnet starts
        as the weights are now (a client loaded from a checkpoint: its saved magnet).
        Raises ValueError for bad settings."""
        settings.validate()
        self._submit(self._set_regularizer, settings).result()

    def _set_regularizer(self, settings: DecisionKL) -> None:
        self._regularizer = Regularizer(settings, self.trainable_parameters())
        self._regularizer.restore(self._loaded_from)

    def reset_magnet(self) -> Any:
        """A future: the magnet moves onto the weights as they are now (a NashPG phase
        ends). Raises RuntimeError when ``regularize`` was not called."""
        if self._regularizer is None:
            raise RuntimeError("reset_magnet needs regularize() first")
        return self._submit(self._regularizer.magnet.reset)
