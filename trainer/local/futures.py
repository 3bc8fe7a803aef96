"""Tinker-style futures for work done on local threads."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import TypeVar

import tinker

T = TypeVar("T")


class LocalFuture(tinker.APIFuture[T]):
    """A ``tinker.APIFuture`` over a ``concurrent.futures.Future`` completed by a worker thread.

    ``result()`` blocks; ``await fut`` or ``await fut.result_async()`` waits without blocking
    the event loop. Both re-raise the exception the operation raised. A timeout or a
    cancelled waiter does not cancel the operation itself (use ``future().cancel()`` for that).
    """

    def __init__(self, future: Future[T]) -> None:
        self._future = future

    def result(self, timeout: float | None = None) -> T:
        """The result, waiting up to ``timeout`` seconds.

        Raises TimeoutError when it is not ready in time, or what the operation raised.
        """
        return self._future.result(timeout)

    async def result_async(self, timeout: float | None = None) -> T:
        """The result, awaited; raises TimeoutError or what the operation raised."""
        async with asyncio.timeout(timeout):
            return await asyncio.shield(asyncio.wrap_future(self._future))

    def future(self) -> Future[T]:
        """The underlying ``concurrent.futures.Future``."""
        return self._future


class LocalClientFuture(LocalFuture[T]):
    """A future of a client that can also be used as the client, as the SDK's
    ``Backcompat*ClientFuture`` allows (deprecated there, with a FutureWarning; the same
    here): attribute access waits for the client and forwards to it. Prefer ``await``."""

    def __getattr__(self, name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(name)
        import warnings

        warnings.warn(
            "Using the future as the client is deprecated; await it (or call .result()) "
            "to get the client first",
            FutureWarning,
            stacklevel=2,
        )
        return getattr(self._future.result(), name)
