"""A private, throw-away PostgreSQL server for the tests and benchmarks.

``start_server()`` runs ``initdb`` in a new temporary folder, starts ``postgres`` on a free
port of 127.0.0.1 (its unix socket in that folder too) with ``pg_ctl start -w``, and
returns a ``PostgresServer``; ``stop()`` stops it and removes the folder. Nothing outside
the folder is touched, and no password is needed: connections from this machine are
trusted, except for the members of the role ``password_login``, which must give their
password (to test a wrong one).

PostgreSQL refuses to run as root; as root, the server runs as the unprivileged user
``nobody`` (``ARENA_PG_USER`` names another), which owns the folder. The binaries are found
on ``PATH``, in ``ARENA_PG_BIN``, or in Debian's ``/usr/lib/postgresql/<version>/bin``.

    server = start_server()
    try:
        url = server.create_database("arena_test")  # postgresql+asyncpg://arena@...
    finally:
        server.stop()

    python -m tools.pgserver        # start one, print its URL, stop it on Ctrl-C
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

SUPERUSER = "arena"
"""The role ``initdb`` creates; it owns every database of the server."""
PASSWORD_GROUP = "password_login"
"""Members of this role log in with a password (scram-sha-256); everyone else is trusted."""
BIN_ENV = "ARENA_PG_BIN"
"""Environment variable naming the folder that holds ``initdb``, ``pg_ctl``, ``postgres``."""
USER_ENV = "ARENA_PG_USER"
"""Environment variable naming the user that runs the server when this process is root."""
DEFAULT_UNPRIVILEGED_USER = "nobody"
DEBIAN_BINARIES = "/usr/lib/postgresql/*/bin"
"""Where Debian and Ubuntu install each PostgreSQL version's programs (not on ``PATH``)."""
START_TIMEOUT_S = 60.0
"""How long ``pg_ctl start -w`` may wait for the server to accept connections."""
FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
"""Settings of a server whose data may be lost in a crash: faster, for tests."""
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_PROGRAMS = ("initdb", "pg_ctl", "postgres", "psql")


class PostgresUnavailable(RuntimeError):
    """No private PostgreSQL server can be started here; the message says why."""


def find_binaries() -> Path:
    """The folder holding PostgreSQL's ``initdb``, ``pg_ctl``, ``postgres`` and ``psql``.

    Raises PostgresUnavailable naming where it looked.
    """
    candidates: list[str] = []
    if os.environ.get(BIN_ENV):
        candidates.append(os.environ[BIN_ENV])
    for program in ("initdb", "pg_ctl", "postgres"):
        found = shutil.which(program)
        if found:
            candidates.append(os.path.dirname(os.path.realpath(found)))
    candidates += sorted(glob.glob(DEBIAN_BINARIES), key=_version, reverse=True)  # newest first
    for folder in candidates:
        if all(os.access(os.path.join(folder, p), os.X_OK) for p in _PROGRAMS):
            return Path(folder)
    looked = ", ".join(dict.fromkeys(candidates)) or f"PATH and {DEBIAN_BINARIES}"
    raise PostgresUnavailable(
        f"PostgreSQL's initdb, pg_ctl, postgres and psql were not found (looked in {looked}): "
        f"install PostgreSQL (apt-get install postgresql) or set {BIN_ENV}"
    )


def _version(folder: str) -> tuple[int, ...]:
    """The version a Debian folder ``.../postgresql/15/bin`` holds: ``(15,)``."""
    return tuple(int(d) for d in re.findall(r"\d+", Path(folder).parent.name))


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """A running private server (built by ``start_server``): its folder, port and URLs."""

    def __init__(self, root: Path, bin_dir: Path, port: int, user: pwd.struct_passwd | None):
        self.root = root
        """The temporary folder: ``data/`` (the cluster), ``server.log``, the socket."""
        self.bin_dir = bin_dir
        self.port = port
        self.host = "127.0.0.1"
        self._user = user
        self._stopped = False

    @property
    def data_dir(self) -> Path:
        """The cluster's data folder."""
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        """The server's log."""
        return self.root / "server.log"

    def url(self, database: str = "postgres", user: str = SUPERUSER, password: str = "") -> str:
        """The SQLAlchemy URL of ``database`` on this server (asyncpg driver)."""
        login = user + (f":{password}" if password else "")
        return f"postgresql+asyncpg://{login}@{self.host}:{self.port}/{database}"

    def sql(self, statement: str, database: str = "postgres") -> str:
        """Run one SQL statement as the superuser (``psql``, through the unix socket);
        return what it printed. Raises PostgresUnavailable with psql's message."""
        done = subprocess.run(
            [
                str(self.bin_dir / "psql"),
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                str(self.root),
                "-p",
                str(self.port),
                "-U",
                SUPERUSER,
                "-d",
                database,
                "-c",
                statement,
            ],
            capture_output=True,
            text=True,
            env=_clean_env(),
            timeout=120,
        )
        if done.returncode != 0:
            raise PostgresUnavailable(f"psql failed: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def create_database(self, name: str) -> str:
        """Create an empty database ``name`` (lower-case letters, digits, ``_``); return
        its URL."""
        if not _NAME.fullmatch(name):
            raise ValueError(f"not a plain database name: {name!r}")
        self.sql(f"CREATE DATABASE {name}")
        return self.url(name)

    def create_password_user(self, name: str, password: str) -> None:
        """Create role ``name`` that logs in with ``password`` only (a member of
        ``PASSWORD_GROUP``) and owns nothing."""
        if not _NAME.fullmatch(name) or "'" in password:
            raise ValueError("plain names and passwords only")
        self.sql(f"CREATE ROLE {name} LOGIN PASSWORD '{password}' IN ROLE {PASSWORD_GROUP}")

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its folder (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            _run_as(
                self._user,
                [str(self.bin_dir / "pg_ctl"), "stop", "-D", str(self.data_dir), "-m", "fast"],
                timeout=60,
            )
        shutil.rmtree(self.root, ignore_errors=True)


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C.UTF-8"
    return env


def _run_as(
    user: pwd.struct_passwd | None, args: Sequence[str], timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args),
        capture_output=True,
        text=True,
        env=_clean_env(),
        timeout=timeout,
        cwd="/",
        user=None if user is None else user.pw_uid,
        group=None if user is None else user.pw_gid,
        extra_groups=None if user is None else [],
    )


def _unprivileged_user() -> pwd.struct_passwd | None:
    """None when this process may run PostgreSQL itself, else the user to run it as."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get(USER_ENV, DEFAULT_UNPRIVILEGED_USER)
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise PostgresUnavailable(
            f"running as root, and PostgreSQL refuses root; there is no user {name!r} to run "
            f"it as: create one or set {USER_ENV}"
        ) from None


def _failed(what: str, done: subprocess.CompletedProcess[str], log: Path | None = None) -> str:
    text = (done.stderr or done.stdout or "").strip()
    if log is not None and log.is_file():
        text = (text + "\n" + log.read_text(errors="replace")).strip()
    last = [line for line in text.splitlines() if line.strip()][-3:]
    return f"{what} failed (exit {done.returncode}): " + " | ".join(last)


def start_server(
    *, fast: bool = True, settings: dict[str, str] | None = None, attempts: int = 3
) -> PostgresServer:
    """Start a private server in a new temporary folder and return it (stop it with
    ``stop()``; it is also stopped when this process exits).

    ``fast``: ``FAST_SETTINGS`` (no fsync: data may be lost in a crash; for tests).
    ``settings``: more server settings (``{"max_connections": "200"}``). Raises
    PostgresUnavailable saying why the server could not be started.
    """
    bin_dir = find_binaries()
    user = _unprivileged_user()
    root = Path(tempfile.mkdtemp(prefix="arena-pg-", dir="/tmp" if user else None))
    try:
        if user is not None:
            os.chown(root, user.pw_uid, user.pw_gid)
        init = _run_as(
            user,
            [
                str(bin_dir / "initdb"),
                "-D",
                str(root / "data"),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ],
            timeout=120,
        )
        if init.returncode != 0:
            raise PostgresUnavailable(_failed("initdb", init))
        hba = root / "data" / "pg_hba.conf"
        hba.write_text(
            "local all all trust\n"
            f"host all +{PASSWORD_GROUP} 127.0.0.1/32 scram-sha-256\n"
            "host all all 127.0.0.1/32 trust\n"
        )
        options = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(root),
            **(FAST_SETTINGS if fast else {}),
            **(settings or {}),
        }
        log = root / "server.log"
        for attempt in range(attempts):
            port = free_port()
            flags = " ".join(f"-c {k}={v}" for k, v in options.items())
            start = _run_as(
                user,
                [
                    str(bin_dir / "pg_ctl"),
                    "start",
                    "-w",
                    "-t",
                    str(int(START_TIMEOUT_S)),
                    "-D",
                    str(root / "data"),
                    "-l",
                    str(log),
                    "-o",
                    f"-p {port} {flags}",
                ],
                timeout=START_TIMEOUT_S + 30,
            )
            if start.returncode == 0:
                break
            if attempt == attempts - 1 or "in use" not in log.read_text(errors="replace"):
                raise PostgresUnavailable(_failed("pg_ctl start", start, log))
            time.sleep(0.2)  # another program took the port: try another one
        server = PostgresServer(root, bin_dir, port, user)
        atexit.register(server.stop)
        try:
            server.sql(f"CREATE ROLE {PASSWORD_GROUP} NOLOGIN")
        except BaseException:
            server.stop()
            raise
        return server
    except BaseException:
        if (root / "data" / "postmaster.pid").exists():  # started, then something failed
            _run_as(user, [str(bin_dir / "pg_ctl"), "stop", "-D", str(root / "data"), "-m",
                           "immediate"], timeout=60)  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)
        raise


def main() -> None:
    """Start a server, print its URL, and stop it on Ctrl-C."""
    server = start_server(fast=False)
    try:
        print(f"PostgreSQL running: {server.url()}  (folder {server.root}); Ctrl-C stops it")
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
