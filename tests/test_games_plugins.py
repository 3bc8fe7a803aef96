"""Game plugins (the ``arena.games`` entry points) and ``arena new-game``: a plugin's games
are listed with their package and version, a broken plugin is listed as unavailable with
its error and breaks nothing else, and a scaffolded package installed with pip is listed,
played and trained."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import games
from arena_cli import main
from games.plugins import ENTRY_POINT_GROUP
from games.registration import registered, unregister_game
from games.registry import plugins, reload
from games.scaffold import ScaffoldError, names, write_package


def _distribution(site: Path, dist: str, version: str, points: dict[str, str]) -> None:
    """An installed distribution as pip leaves it: a dist-info folder with entry points."""
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = [f"[{ENTRY_POINT_GROUP}]", *(f"{name} = {value}" for name, value in points.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A site folder on sys.path; afterwards the plugins' games and modules are gone."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("ARENA_PLUGINS", str(folder))  # the plugins installed here, only
    before_games = set(registered())
    before_modules = set(sys.modules)
    yield folder
    for game_id in set(registered()) - before_games:
        unregister_game(game_id)
    for name in set(sys.modules) - before_modules:
        if name.startswith(
            ("good_plugin", "broken_plugin", "exiting_plugin", "clash_plugin", "careless_plugin")
        ):
            del sys.modules[name]
    monkeypatch.undo()
    reload()


def _write_plugins(site: Path) -> None:
    written = write_package("good-plugin", site / "src", game_id="GoodPlugin-v0")
    (site / "good_plugin").symlink_to(written.root / "src" / "good_plugin")
    _distribution(site, "good-plugin", "1.2.3", {"GoodPlugin-v0": "good_plugin.game"})
    (site / "broken_plugin.py").write_text("import no_such_module_here\n")
    _distribution(site, "broken-plugin", "0.0.1", {"BrokenPlugin-v0": "broken_plugin"})
    (site / "exiting_plugin.py").write_text("import sys\nsys.exit(3)\n")
    _distribution(site, "exiting-plugin", "0.2", {"ExitingPlugin-v0": "exiting_plugin"})
    (site / "clash_plugin.py").write_text(
        textwrap.dedent(
            """
            from games.native.lowest_unique import LowestUniqueGame
            from games.registration import register_game

            register_game("ClashFirst-v0", min_players=2, max_players=3)(LowestUniqueGame)
            register_game("TicTacToe-v0", min_players=2, max_players=2)(LowestUniqueGame)
            """
        )
    )
    _distribution(site, "clash-plugin", "1.0", {"ClashPlugin-v0": "clash_plugin"})
    reload()


def test_a_plugin_game_is_listed_with_its_package_and_version(site: Path) -> None:
    _write_plugins(site)
    spec = games.get_spec("GoodPlugin-v0")
    assert (spec.source, spec.package, spec.version, spec.available) == (
        "plugin",
        "good-plugin",
        "1.2.3",
        True,
    )
    found = {p.name: p for p in plugins()}
    assert found["GoodPlugin-v0"].games == ("GoodPlugin-v0",)
    assert found["GoodPlugin-v0"].error is None
    session = games.make("GoodPlugin-v0", 2, seed=0)
    assert session.legal_moves(session.current_player()) == ["[1]", "[2]", "[3]"]
    session.close()


def test_a_broken_plugin_is_unavailable_with_its_error_and_nothing_else_breaks(
    site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_plugins(site)
    broken = games.get_spec("BrokenPlugin-v0")
    assert not broken.available and broken.source == "plugin"
    assert broken.reason is not None
    assert "plugin broken-plugin 0.0.1 failed to load: ModuleNotFoundError" in broken.reason
    assert "no_such_module_here" in broken.reason
    exiting = games.get_spec("ExitingPlugin-v0")
    assert not exiting.available and "SystemExit: 3" in (exiting.reason or "")
    # A plugin that registers a taken id fails whole: its other game is withdrawn too.
    clash = games.get_spec("ClashPlugin-v0")
    assert "already registered" in (clash.reason or "")
    assert "ClashFirst-v0" not in {s.game_id for s in games.catalogue()}
    assert games.get_spec("TicTacToe-v0").source == "textarena"
    with pytest.raises(games.GameUnavailable, match="failed to load"):
        games.make("BrokenPlugin-v0")
    # The catalogue, and `arena games`, still work and say why.
    assert games.get_spec("GoodPlugin-v0").available
    assert main(["games", "--long"]) == 0
    out = capsys.readouterr().out
    assert "BrokenPlugin-v0" in out and "ModuleNotFoundError" in out
    assert "good-plugin 1.2.3" in out
    assert main(["games", "--json"]) == 0
    rows = {row["id"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["GoodPlugin-v0"]["package"] == "good-plugin"
    assert rows["GoodPlugin-v0"]["bots"] == ["random", "perfect"]
    assert rows["BrokenPlugin-v0"]["available"] is False


def test_check_game_prints_the_report_and_sets_the_exit_code(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check-game", "TicTacToe-v0", "--episodes", "1"]) == 0
    out = capsys.readouterr().out
    assert "TicTacToe-v0 (2 players, 1 episodes" in out and "PASS 10/10" in out
    assert main(["check-game", "Snake-v0", "--json"]) == 1
    record = json.loads(capsys.readouterr().out)
    assert "invalid_moves" in record["failed"]
    with pytest.raises(SystemExit) as info:
        main(["check-game", "TicTacToe-v9"])
    assert info.value.code == 2
    assert "unknown game 'TicTacToe-v9'" in capsys.readouterr().err


def test_new_game_refuses_bad_names_taken_ids_and_existing_directories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert names("my-game") == ("my-game", "my_game", "MyGame", "MyGame-v0")
    assert names("Dice_Duel", "DiceDuel-v2") == (
        "dice-duel",
        "dice_duel",
        "DiceDuel",
        "DiceDuel-v2",
    )
    with pytest.raises(ScaffoldError, match="bad game name '9lives'"):
        names("9lives")
    with pytest.raises(ScaffoldError, match="bad game id 'Duel'"):
        names("duel", "Duel")
    with pytest.raises(ScaffoldError, match="TicTacToe-v0 is taken"):
        write_package("tic-tac-toe", tmp_path, game_id="TicTacToe-v0")
    assert main(["new-game", "my-game", "--dir", str(tmp_path)]) == 0
    assert "wrote" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["new-game", "my-game", "--dir", str(tmp_path)])
    assert info.value.code == 2
    assert "exists" in capsys.readouterr().err
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert files == [
        "my-game/README.md",
        "my-game/pyproject.toml",
        "my-game/src/my_game/__init__.py",
        "my-game/src/my_game/game.py",
        "my-game/tests/test_game.py",
    ]
    assert '"MyGame-v0" = "my_game.game"' in (tmp_path / "my-game/pyproject.toml").read_text()
    # The safe choice by default: spectators see no move of a scaffolded game until the end.
    assert (
        "    hidden_information=True,\n" in (tmp_path / "my-game/src/my_game/game.py").read_text()
    )


def _isolated_python(root: Path) -> Path:
    """A fresh venv that sees this one's packages (a .pth adds them) but installs into its
    own site-packages, so installing a plugin leaves this venv untouched."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    Path(site, "_arena_parent.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return python


@pytest.mark.slow
def test_a_scaffolded_game_installed_with_pip_is_listed_played_and_trained(tmp_path: Path) -> None:
    written = write_package("dice-race", tmp_path / "work")
    python = _isolated_python(tmp_path / "venv")
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    env.pop("ARENA_PLUGINS", None)  # this venv's plugins: the one installed below

    def run(*args: str, timeout: float = 300) -> str:
        result = subprocess.run(
            [str(python), *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=timeout,
        )
        assert result.returncode == 0, f"{args}:\n{result.stdout}\n{result.stderr}"
        return result.stdout

    # Offline: no build isolation, no dependencies fetched.
    run("-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(written.root))
    listed = json.loads(run("-m", "arena_cli", "games", "--json"))
    row = next(r for r in listed if r["id"] == "DiceRace-v0")
    assert (row["source"], row["package"], row["version"], row["available"]) == (
        "plugin",
        "dice-race",
        "0.1.0",
        True,
    )
    played = json.loads(
        run(
            "-m",
            "arena_cli",
            "play",
            "--game",
            "DiceRace-v0",
            "--players",
            "random,perfect",
            "--games",
            "20",
            "--no-record",
            "--quiet",
            "--json",
        )
    )
    assert played["finished"] == 20 and played["aborted"] == 0
    assert played["seats"][1]["wins"] >= 15  # the perfect bot
    log_dir = tmp_path / "run"
    run(
        "-m",
        "arena_cli",
        "train",
        "--game",
        "DiceRace-v0",
        "--num-batches",
        "2",
        "--batch-size",
        "1",
        "--group-size",
        "2",
        "--warmup-steps",
        "0",
        "--eval-every",
        "0",
        "--save-every",
        "0",
        "--no-serve",
        "--db",
        "",
        "--quiet",
        "--log-dir",
        str(log_dir),
    )
    steps = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in steps if m["step"] >= 0] == [0, 1]
    assert "env/DiceRace-v0/turns" in steps[-1]
    # The package's own test (the conformance kit) passes where it is installed, with no
    # warning (-W error: pytest-asyncio's loop-scope warning would fail it).
    run("-m", "pytest", "-q", "-W", "error", "-p", "no:cacheprovider", str(written.root / "tests"))


@pytest.mark.slow
def test_a_game_that_kills_its_worker_fails_and_the_others_are_checked(site: Path) -> None:
    from games.conformance import check_all

    (site / "exiting_plugin.py").write_text(
        textwrap.dedent(
            """
            import os

            from games.native.lowest_unique import LowestUniqueGame
            from games.registration import register_game


            class Dies(LowestUniqueGame):
                def step(self, action):
                    os._exit(7)


            register_game("Dies-v0", min_players=2, max_players=2)(Dies)
            """
        )
    )
    _distribution(site, "exiting-plugin", "0.2", {"Dies-v0": "exiting_plugin"})
    reload()
    assert games.get_spec("Dies-v0").available
    reports = {r.game_id: r for r in check_all(["Dies-v0", "TicTacToe-v0"], jobs=2)}
    assert reports["TicTacToe-v0"].passed
    assert "crashed its worker" in reports["Dies-v0"].failures()["builds"]


def _careless_plugin(site: Path) -> None:
    """A plugin whose game raises on a well-formed illegal move (a number past its
    list): it fails the kit's ``invalid_moves``."""
    written = write_package("careless-plugin", site / "src", game_id="Careless-v0")
    game_file = written.game_file
    text = game_file.read_text()
    text = text.replace(
        "        number = int(found.group(1)) if found and len(found.group(1)) <= 3 else None\n",
        "        number = int(found.group(1)) if found and len(found.group(1)) <= 3 else None\n"
        "        if number is not None and number > 3:\n"
        "            raise KeyError(number)\n",
    )
    game_file.write_text(text)
    (site / "careless_plugin").symlink_to(written.root / "src" / "careless_plugin")
    _distribution(site, "careless-plugin", "0.1", {"Careless-v0": "careless_plugin.game"})
    reload()


def test_a_plugin_that_fails_the_kit_stays_out_unless_allowed(
    site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _careless_plugin(site)
    assert games.get_spec("Careless-v0").available  # not checked yet
    # First use: arena play checks it, remembers the verdict, and refuses it.
    with pytest.raises(SystemExit) as info:
        main(["play", "--game", "Careless-v0", "--games", "2", "--no-record", "--quiet"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "checked Careless-v0 with the conformance kit (first use of this source): FAIL" in err
    assert "Careless-v0 fails the conformance check invalid_moves" in err
    assert "KeyError" in err and "--allow-failing" in err
    # arena games lists it as unavailable, with the check.
    assert main(["games", "--json"]) == 0
    row = next(r for r in json.loads(capsys.readouterr().out) if r["id"] == "Careless-v0")
    assert row["available"] is False
    assert row["reason"].startswith("fails the conformance check invalid_moves")
    with pytest.raises(games.GameUnavailable, match="invalid_moves"):
        games.make("Careless-v0")
    # --allow-failing plays it all the same, and says so.
    code = main(
        [
            "play",
            "--game",
            "Careless-v0",
            "--games",
            "2",
            "--no-record",
            "--quiet",
            "--json",
            "--allow-failing",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)["finished"] == 2
    assert "playing it anyway (--allow-failing)" in captured.err
    os.environ.pop("ARENA_ALLOW_FAILING", None)
    reload()


def test_a_plugin_is_checked_again_once_its_source_changes(
    site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _careless_plugin(site)
    assert main(["check-game", "Careless-v0"]) == 1  # remembered as failing
    capsys.readouterr()
    reload()
    assert not games.get_spec("Careless-v0").available
    game_file = site / "careless_plugin" / "game.py"
    game_file.write_text(game_file.read_text().replace("raise KeyError(number)", "pass"))
    # What a new process does: import the plugin's new source.
    unregister_game("Careless-v0")
    for name in [m for m in sys.modules if m.startswith("careless_plugin")]:
        del sys.modules[name]
    reload()
    assert games.get_spec("Careless-v0").available  # a new source: no verdict yet
    assert main(["check-game", "Careless-v0"]) == 0
    capsys.readouterr()
    reload()
    assert games.get_spec("Careless-v0").available


def test_the_catalogue_loads_only_the_plugins_it_is_told_to(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_plugins(site)
    assert "GoodPlugin-v0" in {s.game_id for s in games.catalogue()}
    monkeypatch.setenv("ARENA_PLUGINS", "off")  # what the suite runs with
    reload()
    assert not any(s.source == "plugin" for s in games.catalogue())
    monkeypatch.setenv("ARENA_PLUGINS", str(site.parent / "elsewhere"))
    reload()
    assert not any(s.source == "plugin" for s in games.catalogue())


async def test_the_browser_lists_a_plugins_own_bots(site: Path) -> None:
    from arena.eventbus import EventBus
    from web.hub import serve

    _write_plugins(site)
    hub = await serve(None, EventBus(), port=0)
    try:
        reader, writer = await asyncio.open_connection(hub.host, hub.port)
        writer.write(f"GET /api/games HTTP/1.1\r\nHost: {hub.host}:{hub.port}\r\n\r\n".encode())
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 5)
        writer.close()
    finally:
        await hub.close()
    listed = {g["id"]: g for g in json.loads(data.partition(b"\r\n\r\n")[2])["games"]}
    assert listed["GoodPlugin-v0"]["bots"] == ["random", "perfect"]
