"""The local sampler's scheduler: one queue of rows to sample and prompts to score, and a
worker thread that takes what is waiting and hands it to the model.

A batch forms when decoding starts: the worker waits up to ``batch_window_s`` for more
rows while they keep coming (a pause of ``batch_quiet_s`` ends the wait) and the batch is
not full, then takes up to ``max_batch_size`` rows; rows that arrive while a batch decodes
wait for the next one. The worker starts when work arrives and ends shortly after the
queue runs dry, so an idle sampler holds no thread.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future

from trainer.local.sample_requests import Row

_IDLE_EXIT_S = 0.05
"""The worker thread lingers this long for new work before it exits."""
_WORKERS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
"""Live sampler worker threads (daemons, so a forgotten client never blocks exit)."""
_EXIT_JOIN_S = 10.0

Scoring = tuple[list[int], Future[list[float | None]]]
"""A prompt to score and the future of its logprobs."""


@atexit.register
def _join_workers() -> None:
    """Let running batches finish before the interpreter tears torch down: a daemon
    thread still inside a torch op at that point aborts the process."""
    deadline = time.monotonic() + _EXIT_JOIN_S
    for worker in list(_WORKERS):
        worker.join(max(0.0, deadline - time.monotonic()))


class Batcher:
    """The queue and its worker thread (see the module docstring): the worker passes each
    batch of rows to ``generate`` and the prompts to score to ``score``; when ``generate``
    raises, the requests of its rows fail with the error."""

    def __init__(
        self,
        generate: Callable[[list[Row]], None],
        score: Callable[[list[Scoring]], None],
        *,
        max_batch_size: int,
        batch_window_s: float,
        batch_quiet_s: float,
        name: str,
    ) -> None:
        self.generate = generate
        self.score = score
        self.max_batch_size = max_batch_size
        self.batch_window_s = batch_window_s
        self.batch_quiet_s = batch_quiet_s
        self.name = name
        """Names the worker thread (``arena-sampler-<name>``)."""
        self._cond = threading.Condition()
        self._pending: deque[Row] = deque()
        self._scoring: deque[Scoring] = deque()
        self._worker_running = False

    def add_rows(self, rows: list[Row]) -> None:
        """Queue ``rows`` for sampling."""
        with self._cond:
            self._pending.extend(rows)
            self._wake_locked()

    def add_scoring(self, tokens: list[int], future: Future[list[float | None]]) -> None:
        """Queue a prompt for scoring; ``future`` gets its logprobs."""
        with self._cond:
            self._scoring.append((tokens, future))
            self._wake_locked()

    def _wake_locked(self) -> None:
        self._cond.notify()
        if not self._worker_running:
            self._worker_running = True
            worker = threading.Thread(
                target=self._work, name=f"arena-sampler-{self.name}", daemon=True
            )
            _WORKERS.add(worker)
            worker.start()

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
                self.score(scoring)
            if not rows:
                continue
            try:
                self.generate(rows)
            except BaseException as exc:
                for request in {id(r.request): r.request for r in rows}.values():
                    if not request.future.done():
                        request.future.set_exception(exc)
                if not isinstance(exc, Exception):
                    with self._cond:
                        self._worker_running = False
                    raise

    def _gather_locked(self) -> None:
        """Wait (up to the window) while requests keep arriving and the batch is not full."""
        deadline = time.monotonic() + self.batch_window_s
        while len(self._pending) < self.max_batch_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._cond.wait(min(remaining, self.batch_quiet_s)):
                return

    def _take_locked(self) -> list[Row]:
        rows: list[Row] = []
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
