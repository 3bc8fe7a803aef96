"""``tools.pgserver.find_binaries``: PostgreSQL's programs found on PATH or where Debian puts
them (off PATH, one folder per version), and a clear error where there are none."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import pgserver


def _programs(
    folder: Path, names: tuple[str, ...] = ("initdb", "pg_ctl", "postgres", "psql")
) -> None:
    folder.mkdir(parents=True)
    for name in names:
        program = folder / name
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)


def test_debian_binaries_off_path_are_found_newest_complete_version_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "usr" / "lib" / "postgresql"
    _programs(root / "9.6" / "bin")
    _programs(root / "13" / "bin")
    _programs(root / "16" / "bin", ("initdb", "pg_ctl", "postgres"))  # no psql: incomplete
    monkeypatch.setattr(pgserver, "DEBIAN_BINARIES", str(root / "*" / "bin"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv(pgserver.BIN_ENV, raising=False)
    assert pgserver.find_binaries() == root / "13" / "bin"
    monkeypatch.setenv(pgserver.BIN_ENV, str(root / "9.6" / "bin"))  # the variable comes first
    assert pgserver.find_binaries() == root / "9.6" / "bin"


def test_no_binaries_anywhere_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pgserver, "DEBIAN_BINARIES", str(tmp_path / "none" / "*" / "bin"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv(pgserver.BIN_ENV, raising=False)
    with pytest.raises(pgserver.PostgresUnavailable, match="apt-get install postgresql"):
        pgserver.find_binaries()
