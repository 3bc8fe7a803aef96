"""``arena serve``: the web server as a plain function returning an exit code.

It opens the database (the live matches another process records are left alone: they have
an owner with a lease), follows it for live matches, charts the training runs it finds,
records the matches people play against bots in the browser, and serves until Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence
from typing import TextIO

from arena.runtime import freeze_heap
from matchmaking.seek import MatchmakerConfig
from storage import open_database
from storage.errors import DatabaseUnavailable, SchemaOutdated, StorageError
from storage.rundir import DEFAULT_RUN_SOURCES
from web.hosts import is_loopback
from web.hub import DEFAULT_HOST, DEFAULT_PORT, WebHub
from web.limits import ServerLimits
from web.recording import HubRecording

EXIT_OK = 0
EXIT_USAGE = 2
"""Exit code for bad input (an unusable database, an address in use), as the CLI's."""


def serve_command(
    db: str | None = None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    runs: Sequence[str] = DEFAULT_RUN_SOURCES,
    follow: bool = True,
    record: bool = True,
    poll_interval_s: float = 0.5,
    limits: ServerLimits | None = None,
    allowed_hosts: Sequence[str] = (),
    matchmaker: MatchmakerConfig | None = None,
    fill: Sequence[str] | None = None,
    runs_dir: str = "runs",
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Serve the web UI for database ``db`` (a path or URL; None: ``ARENA_DB`` or
    ``arena.db``) on ``host``:``port`` until Ctrl-C (or SIGTERM); returns the exit code.

    ``runs``: training log dirs, metrics files or globs to chart. ``follow``: poll the
    database for matches other processes play. ``record``: store the matches played in
    the browser. ``allowed_hosts``: host names the server answers to besides its address
    (requests naming any other ``Host`` are refused: DNS rebinding). A ``host`` other than
    loopback prints a warning: anyone who can reach it can watch every match and play. Bad
    input (an unusable database, an address in use, a malformed host name) prints one line
    on ``err`` and returns 2; it raises nothing else.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    if not is_loopback(host):
        print(
            f"arena: warning: serving on {host}, not loopback: anyone who can reach this "
            "address can watch every match and start matches; there is no login",
            file=err,
        )
    try:
        return asyncio.run(
            _serve(
                db,
                host,
                port,
                runs,
                follow,
                record,
                poll_interval_s,
                limits,
                allowed_hosts,
                matchmaker,
                fill,
                runs_dir,
                out,
                err,
            )
        )
    except (StorageError, ValueError) as exc:
        print(f"arena: error: {exc}", file=err)
    except OSError as exc:
        print(f"arena: error: cannot serve on {host}:{port}: {exc.strerror or exc}", file=err)
    except KeyboardInterrupt:
        return EXIT_OK
    return EXIT_USAGE


async def _serve(
    db_spec: str | None,
    host: str,
    port: int,
    runs: Sequence[str],
    follow: bool,
    record: bool,
    poll_interval_s: float,
    limits: ServerLimits | None,
    allowed_hosts: Sequence[str],
    matchmaker: MatchmakerConfig | None,
    fill: Sequence[str] | None,
    runs_dir: str,
    out: TextIO,
    err: TextIO,
) -> int:
    try:
        db = await open_database(db_spec)  # matches whose recording process is gone: aborted
    except DatabaseUnavailable as exc:  # a read-only file, folder or disk: serve what it holds
        try:
            db = await open_database(db_spec, read_only=True)
        except SchemaOutdated:  # it says what to run; a reader never upgrades
            raise
        except StorageError:
            raise exc from None
        record = False
        print(f"arena: warning: {exc}; serving it read-only, browser matches are not recorded",
              file=err)  # fmt: skip
    recording: HubRecording | None = None
    hub = WebHub(
        db,
        None,
        limits=limits,
        follow_db=follow,
        poll_interval_s=poll_interval_s,
        run_sources=runs,
        allowed_hosts=allowed_hosts,
        matchmaker=matchmaker,
        fill=fill,
        runs_dir=runs_dir,
    )
    try:
        if record:
            try:
                recording = await HubRecording.start(db, hub)  # a read-only database fails
            except StorageError as exc:
                print(f"arena: warning: browser matches are not recorded: {exc}", file=err)
        await hub.start(host, port)
        print(f"Arena is served at {hub.url}  (Ctrl-C stops it)", file=out, flush=True)
        # Set-up is done: without this, each full garbage collection walks every module's
        # objects and stalls every match and connection for 0.1 s or more.
        freeze_heap()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        print("stopping", file=out, flush=True)
    finally:
        await hub.close()
        if recording is not None:
            await recording.close()
        await db.close()
    return EXIT_OK
