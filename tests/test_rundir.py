"""A training run's directory (``storage.rundir``): its files, its lock, a run's identity."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from storage import open_database
from storage.rundir import RunDirectory, RunInUse, UnknownCheckpoint, find_run
from storage.runs import RunNameTaken, claim_run, list_checkpoints
from tests.test_trainer import tiny as tiny_run
from trainer.config import TrainConfig
from trainer.train import Trainer

HOLD_LOCK = """
import sys, time
from storage.rundir import RunDirectory
with RunDirectory(sys.argv[1]).lock():
    print("locked", flush=True)
    time.sleep(600)
"""


def holder(log_dir: Path) -> subprocess.Popen[str]:
    """A process that holds ``log_dir``'s lock until killed (it says when it has it)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(log_dir)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_metrics_and_checkpoints_round_trip(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path / "run")
    assert not run.holds_run() and run.metrics() == [] and run.checkpoints() == []
    run.write_config({"run_name": "alpha", "game_id": "TicTacToe-v0"})
    assert (run.run_name, run.game_id) == ("alpha", "TicTacToe-v0")
    for step in (-1, 0, 1, 2):
        run.append_metrics(step, {"x": float(step)})
    with run.metrics_path.open("a") as f:
        f.write('{"step": 3, "x"')  # a torn last line (a killed process)
    assert run.holds_run()
    assert [r["step"] for r in run.metrics()] == [-1, 0, 1, 2]
    assert run.drop_metrics_from(1) == 2
    assert [r["step"] for r in run.metrics()] == [-1, 0]
    for step in (0, 5, 9):
        run.append_checkpoint({"step": step, "state_path": f"s{step}"})
    run.append_checkpoint({"step": 7, "sampler_path": "league", "league": True})
    assert run.last_state() == {"step": 9, "state_path": "s9"}
    assert run.checkpoint(5) == {"step": 5, "state_path": "s5"}
    assert run.checkpoint(6) is None
    run.mark_best(5, yardstick=0.5)
    run.mark_best(9, yardstick=0.75)  # only one entry is best
    assert run.best() == {"step": 9, "state_path": "s9", "best": True, "yardstick": 0.75}
    assert [e.get("best", False) for e in run.checkpoints()] == [False, False, True, False]
    with pytest.raises(UnknownCheckpoint, match="no checkpoint at step 4"):
        run.mark_best(4)


def test_find_run_by_name_in_the_runs_folder_or_the_given_dirs(tmp_path: Path) -> None:
    elsewhere = RunDirectory(tmp_path / "elsewhere" / "dir")
    elsewhere.write_config({"run_name": "beta"})
    elsewhere.append_checkpoint({"step": 1, "state_path": "x"})
    usual = RunDirectory(tmp_path / "runs" / "gamma")
    usual.append_checkpoint({"step": 1, "state_path": "y"})
    runs = tmp_path / "runs"
    assert find_run("gamma", runs) == usual
    assert find_run("beta", runs) is None
    assert find_run("beta", runs, [str(elsewhere.path)]) == elsewhere
    assert find_run("gamma", runs, [str(elsewhere.path)]) == usual  # names must match


def test_a_held_lock_is_refused_and_a_dead_holders_is_taken_over(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path / "run")
    proc = holder(run.path)
    try:
        with pytest.raises(RunInUse, match=f"process {proc.pid} on"), run.lock():
            pass
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with run.lock():  # the kernel released the dead process's lock
        assert f"process {os.getpid()} on" in (run.path / "run.lock").read_text()
        with pytest.raises(RunInUse), run.lock():  # held by this process now
            pass


def tiny(tmp_path: Path, **overrides: object) -> TrainConfig:
    """The trainer tests' tiny run, named after its log dir unless told."""
    return tiny_run(tmp_path, **{"run_name": None, **overrides})


async def test_trainer_refuses_a_run_directory_another_process_trains(tmp_path: Path) -> None:
    proc = holder(tmp_path / "run")
    try:
        with pytest.raises(RunInUse, match="is being trained by process"):
            await Trainer(tiny(tmp_path)).run()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


async def test_claim_run_refuses_a_second_run_of_one_name(tmp_path: Path) -> None:
    db = await open_database(str(tmp_path / "arena.db"))
    try:
        first = str(tmp_path / "a")
        await claim_run(db, "same", log_dir=first, config={"log_dir": "a"}, resume=False)
        # The same directory again (it held no run yet), and a resume: the run keeps it.
        await claim_run(db, "same", log_dir=first, config={"log_dir": "a"}, resume=False)
        await claim_run(db, "same", log_dir=first, config={"log_dir": "a"}, resume=True)
        with pytest.raises(RunNameTaken, match=r"run name 'same' is taken .*by a"):
            await claim_run(
                db, "same", log_dir=str(tmp_path / "b"), config={"log_dir": "b"}, resume=False
            )
    finally:
        await db.close()


@pytest.mark.slow
async def test_resumed_run_keeps_its_name_and_logs_no_step_twice(tmp_path: Path) -> None:
    db_path = str(tmp_path / "arena.db")
    database = await open_database(db_path)
    try:
        await Trainer(tiny(tmp_path, run_name="first"), database=database).run()
        with pytest.raises(ValueError, match="would rename it"):
            await Trainer(tiny(tmp_path, run_name="other", num_batches=3), database=database).run(
                resume=True
            )
        # No --run-name: the run goes on as "first", and its checkpoints are stored so.
        records = await Trainer(tiny(tmp_path, num_batches=3), database=database).run(resume=True)
        stored = {name for _, name in await list_checkpoints(database, "first")}
        with pytest.raises(RunNameTaken):
            await Trainer(
                tiny(tmp_path, run_name="first", log_dir=str(tmp_path / "second")),
                database=database,
            ).run()
    finally:
        await database.close()
    assert [r.step for r in records] == [2, 3]
    run = RunDirectory(tmp_path / "run")
    assert run.run_name == "first"
    steps = [r["step"] for r in run.metrics()]
    assert steps == [-1, 0, 1, 2, 3]  # the first run's final evaluation (step 2) replayed
    assert "test/random/win" in run.metrics()[-1]
    assert {f"checkpoint:first@{c['step']}" for c in run.checkpoints()} <= stored
    assert not (tmp_path / "second" / "metrics.jsonl").exists()


def test_arena_train_on_a_busy_run_exits_2_with_one_line(tmp_path: Path) -> None:
    proc = holder(tmp_path / "run")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "arena_cli", "train", "--log-dir", str(tmp_path / "run"),
             "--db", "", "--num-batches", "1", "--no-serve", "--quiet"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is being trained by process" in lines[0], result.stderr
    assert lines[0].startswith("arena train: error:")


def test_the_end_summary_reads_the_run_directory(tmp_path: Path) -> None:
    from trainer.summary import WIDTH, summary_lines

    run = RunDirectory(tmp_path / "kuhn")
    run.write_config({"run_name": "kuhn", "game_id": "KuhnPoker-v0"})
    first = {"test/random/win": 0.4, "test/random/draw": 0.0, "test/random/loss": 0.6}
    run.append_metrics(0, {**first, "test/yardstick/exploitability": 0.46, "time/total": 1.0})
    run.append_metrics(1, {"time/total": 1.0})
    last = {"test/random/win": 0.7, "test/random/draw": 0.0, "test/random/loss": 0.3}
    run.append_metrics(2, {**last, "test/yardstick/exploitability": 0.08})
    run.append_checkpoint({"step": 2, "next_step": 2, "state_path": "s2", "sampler_path": "s2"})
    run.mark_best(2, exploitability=0.08)
    text = "\n".join(lines := summary_lines(run))
    assert "run kuhn (KuhnPoker-v0): 2 RL steps" in text
    assert "W 0.40  D 0.00  L 0.60" in text and "W 0.70  D 0.00  L 0.30" in text
    assert "yardstick/exploitability" in text and "0.4600" in text and "0.0800" in text
    row = next(line for line in lines if line.startswith("yardstick/exploitability"))
    assert row.split() == ["yardstick/exploitability", "0.4600", "0.0800"]  # apart, in order
    assert "best checkpoint: step 2 (exploitability 0.080)" in text
    assert "arena play --game KuhnPoker-v0 --players run:kuhn@2,random" in text
    assert all(len(line) <= WIDTH for line in lines)
