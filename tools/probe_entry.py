"""One game's catalogue entry: what its probe children report, turned into the entry.

``probe_game`` runs the game's child (``tools.probe_child``) under ``PHASE_LIMITS_S``,
killing one that hangs (``broken: "timed out during <phase>"``). A game that needs nltk
data or an API key is probed a second time with stand-ins, so that its player counts are
known while its ``requires`` still says what a real run needs; a game that needs a newer
Python is parsed by one, when one is installed; a game that cannot be built at all has its
player count and description read from its source.
"""

from __future__ import annotations

import glob
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools.probe_child import (
    PHASE_LIMITS_S,
    ChildReport,
    GameRun,
    child_main,
    first_sentence,
    merge_requires,
)
from tools.probe_sandbox import textarena_dir

# A share of the turns on which the extractor must find moves, and the largest share of
# invalid moves among those turns, for ``legal_moves`` to be true.
LEGAL_FOUND_SHARE = 0.5
LEGAL_INVALID_SHARE = 0.1


def _run_child(ta_id: str, stand_ins: bool = False, dummy_keys: Sequence[str] = ()) -> ChildReport:
    """Probe ``ta_id`` in a spawned child, enforcing PHASE_LIMITS_S; never raises."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(
        target=child_main,
        args=(sender, ta_id, stand_ins, list(dummy_keys)),
        daemon=True,
    )
    report = ChildReport()
    process.start()
    sender.close()
    deadline = time.monotonic() + PHASE_LIMITS_S["start"]
    try:
        while not report.done:
            if receiver.poll(0.1):
                try:
                    kind, payload = receiver.recv()
                except (EOFError, OSError):
                    break
                if kind == "done":
                    report.done = True
                    break
                for name, value in payload.items():
                    if name == "runs":
                        value = [GameRun(**run) if isinstance(run, dict) else run for run in value]
                    if name == "phase" and value != report.phase:
                        deadline = time.monotonic() + PHASE_LIMITS_S[value]
                    setattr(report, name, value)
            elif not process.is_alive():
                if not receiver.poll(0):
                    break
            elif time.monotonic() > deadline:
                report.timed_out = f"timed out during {report.phase}"
                break
    finally:
        if process.is_alive():
            process.kill()
        process.join(5)
        receiver.close()
    if not report.done and not report.timed_out and not report.crashed:
        report.crashed = f"child process exited with code {process.exitcode} in {report.phase}"
    return report


def _newer_pythons() -> list[tuple[tuple[int, int], str]]:
    """Interpreters of Python 3.12 or newer found on this machine, oldest first."""
    candidates: list[str] = []
    for name in ("python3.12", "python3.13", "python3.14"):
        found = shutil.which(name)
        if found:
            candidates.append(found)
    pyenv_root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates.extend(
        sorted(glob.glob(os.path.join(pyenv_root, "versions", "3.1*", "bin", "python")))
    )
    found_versions: dict[tuple[int, int], str] = {}
    for candidate in candidates:
        try:
            result = subprocess.run(
                [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if result.returncode != 0:
            continue
        try:
            major, minor = (int(part) for part in result.stdout.strip().split("."))
        except ValueError:
            continue
        if (major, minor) >= (3, 12):
            found_versions.setdefault((major, minor), candidate)
    return sorted(found_versions.items())


_NEWER_PYTHONS: list[tuple[tuple[int, int], str]] | None = None
_NEWER_PYTHONS_LOCK = threading.Lock()


def _python_that_parses(folder: Path) -> str | None:
    """The oldest Python >= 3.12 here that parses every file of ``folder``, as "3.12".

    Returns "3.12" without checking when no such interpreter is installed, and None when
    none of the installed ones parses the files (the game is simply broken).
    """
    global _NEWER_PYTHONS
    with _NEWER_PYTHONS_LOCK:
        if _NEWER_PYTHONS is None:
            _NEWER_PYTHONS = _newer_pythons()
    if not _NEWER_PYTHONS:
        return "3.12"
    files = [str(path) for path in sorted(folder.glob("*.py"))]
    check = "import ast, sys\nfor f in sys.argv[1:]: ast.parse(open(f, encoding='utf-8').read())"
    for (major, minor), interpreter in _NEWER_PYTHONS:
        result = subprocess.run(
            [interpreter, "-c", check, *files], capture_output=True, timeout=60, check=False
        )
        if result.returncode == 0:
            return f"{major}.{minor}"
    return None


def _static_facts(source_file: Path) -> tuple[int | None, str]:
    """Player count and description read from the source of a game that cannot be built."""
    try:
        source = source_file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None, ""
    players: int | None = None
    if re.search(r"\bTwoPlayerState\(", source):
        players = 2
    elif re.search(r"\bSinglePlayerState\(", source):
        players = 1
    class_doc = r"^class \w+\([^()]*\):\s*(?:\"\"\"|''')(.*?)(?:\"\"\"|''')"
    doc = re.search(class_doc, source, re.S | re.M)
    return players, first_sentence(doc.group(1)) if doc else ""


def _summarise_runs(runs: list[GameRun]) -> dict[str, Any]:
    """The catalogue's play fields from the games played."""
    turns = sum(run.steps for run in runs)
    found = sum(run.turns_with_moves for run in runs)
    invalid = sum(run.invalid_with_moves for run in runs)
    finished_steps = [run.steps for run in runs if run.finished]
    errors = [run.step_error for run in runs if run.step_error]
    return {
        "legal_moves": bool(
            turns and found >= LEGAL_FOUND_SHARE * turns and invalid <= LEGAL_INVALID_SHARE * found
        ),
        "finished": bool(runs) and all(run.finished for run in runs),
        "typical_turns": int(statistics.median(finished_steps)) if finished_steps else None,
        "private_messages": any(run.private for run in runs),
        "step_error": errors[0] if errors else None,
    }


def _players_fields(supported: list[int]) -> dict[str, Any]:
    if not supported:
        return {"min_players": None, "max_players": None}
    fields: dict[str, Any] = {"min_players": min(supported), "max_players": max(supported)}
    if supported != list(range(min(supported), max(supported) + 1)):
        fields["player_counts"] = sorted(supported)
    return fields


def _structural_error(report: ChildReport) -> str | None:
    """Why the probe of a buildable game learned nothing, if it learned nothing."""
    if report.timed_out:
        return report.timed_out
    if report.crashed:
        return report.crashed
    if report.make_error:
        return report.make_error
    if not report.supported:
        errors = list(report.reset_errors.values())
        # The count checks (assertions) say little; another error is the real cause.
        telling = [error for error in errors if not error.startswith("AssertionError")]
        errors = telling or errors
        common = max(set(errors), key=errors.count) if errors else "no player count tried"
        return f"reset failed for every player count: {common}"
    return None


def probe_game(game_id: str, ta_id: str, verbose: bool = False) -> dict[str, Any]:
    """Probe one user-facing game id (instantiating ``ta_id``) and return its catalogue entry."""
    started = time.monotonic()
    report = _run_child(ta_id)
    requires = dict(report.requires)
    broken: str | None = None
    description = report.description
    facts: ChildReport = report

    if report.syntax_file:
        version = _python_that_parses(Path(report.syntax_file).parent)
        if version is None:
            broken = report.make_error
        else:
            requires["python"] = [version]
    elif requires.get("nltk") or requires.get("env"):
        # Measure the structure with stand-ins; keep what the real game requires.
        facts = _run_child(ta_id, stand_ins=True, dummy_keys=requires.get("env", []))
        # A failure with stand-ins may be their fault (a word list without 7-letter
        # nouns, say), so it never marks the game broken; the counts then come from source.
        merge_requires(requires, facts.requires)
        description = description or facts.description
    elif report.network_error and not report.supported:
        broken = f"needs network access: {report.network_error}"
    elif not requires:
        broken = _structural_error(report)
    if facts is report and report.timed_out and broken is None and report.supported:
        broken = report.timed_out

    entry: dict[str, Any] = {"id": game_id, "ta_id": ta_id}
    entry.update(_players_fields(facts.supported))
    if entry["min_players"] is None:
        source = Path(report.syntax_file) if report.syntax_file else _entry_point_file(ta_id)
        players, static_description = _static_facts(source)
        if players is not None:
            entry.update(min_players=players, max_players=players)
        description = description or static_description
    entry["requires"] = {
        key: (values[0] if key == "python" else values) for key, values in sorted(requires.items())
    }
    entry["broken"] = broken
    entry.update(_summarise_runs(facts.runs))
    entry["description"] = description
    if verbose:
        _print_details(game_id, facts, time.monotonic() - started)
    return entry


def _entry_point_file(ta_id: str) -> Path:
    """The source file of the class that ``ta_id`` instantiates, found without importing it."""
    entry_point = textarena_registry()[ta_id].entry_point
    if not isinstance(entry_point, str):
        return Path(sys.modules[entry_point.__module__].__file__ or "")
    module = entry_point.split(":", 1)[0]
    root = textarena_dir().parent
    return root.joinpath(*module.split(".")).with_suffix(".py")


def _print_details(game_id: str, report: ChildReport, seconds: float) -> None:
    runs = " ".join(
        f"{run.num_players}p/s{run.seed}:{run.steps}{'F' if run.finished else '-'}"
        f"(m{run.turns_with_moves},i{run.invalid_with_moves}{',P' if run.private else ''})"
        for run in report.runs
    )
    print(f"  {game_id}: {seconds:.1f}s players={report.supported} {runs}", file=sys.stderr)


def textarena_registry() -> dict[str, Any]:
    """The registry, imported quietly in this process (imports are cheap and safe)."""
    from textarena.envs.registration import ENV_REGISTRY

    return dict(ENV_REGISTRY)
