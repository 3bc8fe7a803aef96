"""Training runs' metrics as a live feed, without I/O: ``subscribe`` to a run gets its
rows so far (``metrics``, ``reset: true``), then each poll's new rows. No versions, no
resume: a client that comes back subscribes again."""

from __future__ import annotations

from collections.abc import Mapping

from web.connections import Client
from web.limits import ServerLimits
from web.needs import Need
from web.outbox import Outbox
from web.pages.metrics import RunSeries
from web.protocol import ClientRequest, ProtocolError, dumps


class MetricsFeed:
    """Who follows which run's metrics (``HubCore`` owns one). ``runs``: the runs watched,
    by name (the asyncio layer adds runs as their files appear: the ``poll_runs`` need)."""

    def __init__(self, limits: ServerLimits, outbox: Outbox, runs: Mapping[str, RunSeries]) -> None:
        self.limits = limits
        self.outbox = outbox
        self.runs = runs
        self._watchers: dict[str, set[Client]] = {}

    def subscribe(self, client: Client, request: ClientRequest, polled: bool) -> Need | None:
        """``subscribe`` to a run (a ``poll_runs`` need first when it is not known yet).
        Raises ProtocolError (``unknown_run``, ``too_many_subscriptions``)."""
        name = request.text("run", max_chars=256)
        series = self.runs.get(name)
        if series is None and not polled:  # new runs appear when their files are read
            return Need("poll_runs", {}, lambda _: self.subscribe(client, request, polled=True))
        if series is None:
            known = ", ".join(sorted(self.runs)) or "none"
            raise ProtocolError("unknown_run", f"no training run {name!r}; watched runs: {known}")
        if name not in client.runs and client.subscriptions >= self.limits.max_subscriptions:
            raise ProtocolError(
                "too_many_subscriptions",
                f"at most {self.limits.max_subscriptions} streams per connection",
            )
        rows = series.rows.snapshot(self.limits.metrics_snapshot_rows)
        self.outbox.send(
            client,
            {
                "type": "metrics",
                "ref": request.id,
                "run": name,
                "info": series.info(),
                "rows": rows,
                "reset": True,
            },
        )
        self._watchers.setdefault(name, set()).add(client)
        client.runs.add(name)
        return None

    def unsubscribe(self, client: Client, name: str) -> None:
        """No more rows of run ``name`` for ``client``."""
        client.runs.discard(name)
        self._watchers.get(name, set()).discard(client)

    def forget(self, client: Client) -> None:
        """``client`` is gone: it follows no run any more."""
        for run in list(client.runs):
            watchers = self._watchers.get(run)
            if watchers is not None:
                watchers.discard(client)
        client.runs.clear()

    def rows(self, name: str, rows: list[dict[str, float | None]], reset: bool) -> None:
        """New rows of run ``name``: to the clients following it."""
        watchers = self._watchers.get(name)
        if watchers:
            message = {"type": "metrics", "run": name, "rows": rows, "reset": reset}
            self.outbox.out(list(watchers), dumps(message))
