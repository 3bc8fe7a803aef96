"""A strict fake of the hosted Tinker service, for the tests of the hosted path.

The service itself cannot be reached here. ``FakeServiceClient`` stands in for
``tinker.ServiceClient``: it has the real constructor's signature, and every client it
hands out is the local backend's (``trainer.local.LocalServiceClient`` and the training,
sampling and REST clients it returns), whose methods have the real SDK's signatures (checked
against the installed ``tinker`` by ``test_local_clients_have_the_sdk_signatures``) and
return the real ``tinker.types``. A recording proxy logs each call and when each returned
future is awaited, so tests can check the order of submission; it forwards to the real
methods, so an unknown keyword fails as it would against the service.

Known hosted model names are mapped to a small model directory whose tokenizer has a chat
template (``tests.chat_model``), so the hosted path runs through a real chat template.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from trainer.local import LocalModelConfig
from trainer.local.futures import LocalFuture
from trainer.local.service import LocalServiceClient


class _RecordedFuture:
    """An awaitable future that logs when it is awaited."""

    def __init__(self, inner: Any, label: str, log: list[tuple[str, Any]]) -> None:
        self._inner = inner
        self._label = label
        self._log = log

    def __await__(self) -> Any:
        self._log.append(("await", self._label))
        result = yield from self._inner.__await__()
        return _wrap(result, self._log)

    def result(self, timeout: float | None = None) -> Any:
        self._log.append(("result", self._label))
        return _wrap(self._inner.result(timeout), self._log)

    async def result_async(self, timeout: float | None = None) -> Any:
        self._log.append(("await", self._label))
        return _wrap(await self._inner.result_async(timeout), self._log)

    def __getattr__(self, name: str) -> Any:
        # A future of a client is usable as the client, as the SDK's backcompat futures.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(_Recorder(self._inner.result(), self._log), name)


class _Recorder:
    """Forwards every attribute to ``inner``; public method calls are logged."""

    def __init__(self, inner: Any, log: list[tuple[str, Any]]) -> None:
        self._inner = inner
        self._log = log

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name.startswith("_") or not callable(value):
            return value
        log = self._log

        if inspect.iscoroutinefunction(value):

            async def call_async(*args: Any, **kwargs: Any) -> Any:
                log.append((name, _summary(name, args, kwargs)))
                return _wrap(await value(*args, **kwargs), log, name)

            return call_async

        def call(*args: Any, **kwargs: Any) -> Any:
            log.append((name, _summary(name, args, kwargs)))
            return _wrap(value(*args, **kwargs), log, name)

        return call

    def __reduce__(self) -> Any:
        return self._inner.__reduce__()


def _wrap(value: Any, log: list[tuple[str, Any]], label: str = "") -> Any:
    from trainer.local.sampler import LocalSamplingClient
    from trainer.local.service import LocalRestClient
    from trainer.local.training import LocalTrainingClient

    if isinstance(value, LocalFuture):
        return _RecordedFuture(value, label, log)
    if isinstance(value, LocalTrainingClient | LocalSamplingClient | LocalRestClient):
        return _Recorder(value, log)
    return value


def _summary(name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    if name in ("forward_backward", "forward_backward_async"):
        data = args[0] if args else kwargs["data"]
        loss = args[1] if len(args) > 1 else kwargs.get("loss_fn")
        keys = sorted({k for d in data for k in d.loss_fn_inputs})
        return {"loss_fn": loss, "inputs": keys, "datums": len(data)}
    if name.startswith("create_") or name.startswith("save_") or name.startswith("load_"):
        return {"args": args, **kwargs}
    return None


class FakeServiceClient:
    """``tinker.ServiceClient``, faked by the local backend (see the module docstring).

    Set ``FakeServiceClient.models`` (hosted name -> local model directory) and
    ``FakeServiceClient.checkpoint_dir`` before use; ``FakeServiceClient.calls`` logs
    every call of every instance, in order.
    """

    models: ClassVar[dict[str, str]] = {}
    checkpoint_dir: ClassVar[Path | None] = None
    calls: ClassVar[list[tuple[str, Any]]] = []

    def __init__(
        self,
        user_metadata: dict[str, str] | None = None,
        project_id: str | None = None,
        *,
        display_name: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        default_headers_overrides: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        FakeServiceClient.calls.append(("ServiceClient", {"user_metadata": user_metadata}))
        config = LocalModelConfig(seed=0, max_batch_size=64)
        self._inner = _Recorder(
            LocalServiceClient(config, checkpoint_dir=self.checkpoint_dir, models=self.models),
            FakeServiceClient.calls,
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
