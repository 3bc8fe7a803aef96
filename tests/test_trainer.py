"""The training loop end to end on the local backend, resume, executors, and errors."""

from __future__ import annotations

import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from arena.eventbus import default_bus
from arena.match import MatchSettings
from arena.policies import RandomMovePolicy
from games.limits import SessionLimits
from storage import Recorder, list_matches, open_database
from storage.runs import list_checkpoints, list_runs
from tests.conftest import no_hang
from trainer.backend import BackendError
from trainer.config import TrainConfig
from trainer.dataset import SelfPlayDataset
from trainer.train import Trainer, rollout_batch


def tiny(tmp_path: Path, **overrides: object) -> TrainConfig:
    values: dict[str, object] = {
        "log_dir": str(tmp_path / "run"),
        "num_batches": 2,
        "batch_size": 2,
        "group_size": 2,
        "warmup_steps": 3,
        "warmup_games": 8,
        "eval_every": 1,
        "eval_games": 8,
        "save_every": 1,
        "run_name": "tiny",
        "db": "",
    }
    values.update(overrides)
    return TrainConfig(**values)  # type: ignore[arg-type]


def read_jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
async def test_short_run_writes_metrics_checkpoints_and_records_matches(tmp_path: Path) -> None:
    config = tiny(tmp_path)
    database = await open_database(str(tmp_path / "arena.db"))
    try:
        async with Recorder(database, default_bus()):
            records = await Trainer(config, database=database).run()
        matches = await list_matches(database, run="tiny", limit=1000)
        everything = await list_matches(database, limit=1000)
        runs = await list_runs(database)
        checkpoints_stored = await list_checkpoints(database, "tiny")
    finally:
        await database.close()
    run = Path(config.log_dir)
    assert json.loads((run / "config.json").read_text())["game_id"] == "TicTacToe-v0"
    metrics = read_jsonl(run / "metrics.jsonl")
    steps = [m for m in metrics if isinstance(m["step"], int) and 0 <= m["step"] < 2]
    assert [m["step"] for m in steps] == [0, 1]
    for m in steps:
        for key in ("env/all/reward/total", "env/all/win", "time/total", "optim/datums"):
            assert key in m
        assert "test/random/win" in m and "test/optimal/draw" in m
    assert metrics[0]["step"] == -1 and "warmup/loss_final" in metrics[0]
    checkpoints = read_jsonl(run / "checkpoints.jsonl")
    full = [c for c in checkpoints if c.get("state_path")]
    assert [c["next_step"] for c in full] == [1, 2]  # saved after steps 0 and 1
    assert all(c["step"] <= c["next_step"] for c in full)  # optimizer steps taken
    assert all(Path(str(c["state_path"])).exists() for c in full)
    assert len(records) == 3  # two steps and the final evaluation
    # training games (2 steps x 2 groups x 2 games) and evaluation games, all recorded
    train_games = [m for m in matches if m.group_id and m.group_id.startswith("b")]
    assert len(train_games) == 8
    # Evaluation seats are recorded as the exact weights they played with; warm-up games
    # (random legal moves) as the random bot: neither pollutes the learner's results.
    evaluation = [m for m in matches if m.group_id and m.group_id.startswith("eval")]
    learner_seats = {s.policy for m in evaluation for s in m.seats if s.kind == "checkpoint"}
    # (the weights after 0, 1, ... optimizer steps; a step without datums takes none)
    assert learner_seats == {f"checkpoint:tiny@{c['step']}" for c in full} | {"checkpoint:tiny@0"}
    warmup = [m for m in everything if m.group_id == "warmup"]
    assert warmup and all(s.policy == "random" for m in warmup for s in m.seats)
    assert all(m.status in ("finished", "truncated") for m in matches)
    assert [r.id for r in runs] == ["tiny"] and runs[0].config["num_batches"] == 2  # type: ignore[index]
    # The stored checkpoints, and the weights evaluated (checkpoint:tiny@<updates>).
    assert {name for _, name in checkpoints_stored} >= {
        f"checkpoint:tiny@{c['step']}" for c in full
    } | learner_seats


@pytest.mark.slow
async def test_resume_continues_from_the_last_checkpoint(tmp_path: Path) -> None:
    await Trainer(tiny(tmp_path, eval_every=0)).run()
    records = await Trainer(tiny(tmp_path, eval_every=0, num_batches=4)).run(resume=True)
    assert [r.step for r in records] == [2, 3]
    steps = [m["step"] for m in read_jsonl(Path(tmp_path / "run" / "metrics.jsonl"))]
    assert steps == [-1, 0, 1, 2, 3]


def test_tinker_backend_without_key_fails_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.delenv("TINKER_CREDENTIAL_CMD", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(BackendError, match="TINKER_API_KEY"):
        Trainer(tiny(tmp_path, backend="tinker", model="Qwen/Qwen3-4B-Instruct-2507"))
    assert not (tmp_path / "run").exists()


def test_bad_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="num_batches"):
        Trainer(tiny(tmp_path, num_batches=0))
    with pytest.raises(ValueError, match="takes 2 players"):
        Trainer(tiny(tmp_path, num_players=3))


def test_old_config_names_still_work_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import dataclasses

    old = TrainConfig(log_dir=str(tmp_path), steps=7, groups_per_batch=3, games_per_group=5)
    assert (old.num_batches, old.batch_size, old.group_size) == (7, 3, 5)
    assert capsys.readouterr().err.splitlines() == [
        "note: TrainConfig's steps is now num_batches; the old name still works",
        "note: TrainConfig's groups_per_batch is now batch_size; the old name still works",
        "note: TrainConfig's games_per_group is now group_size; the old name still works",
    ]
    assert "steps" not in old.to_json() and old.to_json()["num_batches"] == 7
    assert dataclasses.replace(old, seed=3).num_batches == 7
    with pytest.raises(ValueError, match="give num_batches alone"):
        TrainConfig(steps=3, num_batches=4)
    assert TrainConfig(**old.to_json()) == old


async def test_bot_fraction_puts_the_learner_against_bots() -> None:
    dataset = SelfPlayDataset(
        MatchSettings("TicTacToe-v0"),
        num_batches=2,
        batch_size=4,
        group_size=2,
        bot_fraction=0.5,
        bots=("random", "optimal"),
    )
    builders = list(dataset.get_batch(1))
    against_bots = [b for b in builders if b.opponents]  # type: ignore[attr-defined]
    assert len(against_bots) == 2
    assert {b.opponents for b in against_bots} == {("random",), ("optimal",)}  # type: ignore[attr-defined]
    with pytest.raises(IndexError):
        dataset.get_batch(2)


@pytest.mark.slow
async def test_rollouts_run_on_a_spawn_process_pool() -> None:
    dataset = SelfPlayDataset(
        MatchSettings("TicTacToe-v0"), num_batches=1, batch_size=2, group_size=2
    )
    builders = list(dataset.get_batch(0))
    policy = RandomMovePolicy(seed=3)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        remote = (await rollout_batch(builders, policy, pool)).groups
    local = (await rollout_batch(builders, RandomMovePolicy(seed=3))).groups
    assert len(remote) == 2 and all(len(g.trajectories_G) == 4 for g in remote)
    assert all(m["aborted"] == 0 for g in remote for m in g.metrics_G)
    assert len(local) == len(remote)


@pytest.mark.slow
async def test_a_new_run_refuses_a_log_dir_that_holds_one(tmp_path: Path) -> None:
    await Trainer(tiny(tmp_path, num_batches=1, eval_every=0)).run()
    with pytest.raises(ValueError, match="--resume"):
        await Trainer(tiny(tmp_path, num_batches=1, eval_every=0)).run()


@pytest.mark.slow
async def test_model_policy_rolls_out_on_a_spawn_process_pool() -> None:
    """The trainer's own policy (a local sampling client) pickles to worker processes."""
    from trainer.backend import SamplerPolicy
    from trainer.local import LocalModelConfig, create_local_training_client

    client = create_local_training_client(LocalModelConfig(seed=0))
    sampler = await client.save_weights_and_get_sampling_client()
    policy = SamplerPolicy(sampler, max_tokens=4)
    dataset = SelfPlayDataset(
        MatchSettings("TicTacToe-v0", observation_format="compact"),
        num_batches=1,
        batch_size=2,
        group_size=2,
    )
    builders = list(dataset.get_batch(0))
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        groups = (await rollout_batch(builders, policy, pool)).groups
    assert len(groups) == 2 and all(len(g.trajectories_G) == 4 for g in groups)
    actions = [t.ac for g in groups for traj in g.trajectories_G for t in traj.transitions]
    assert actions and all(a.maybe_logprobs is not None for a in actions)
    assert all(m["aborted"] == 0 for g in groups for m in g.metrics_G)


def _train_command(log_dir: Path, *extra: str) -> list[str]:
    import sys

    return [
        sys.executable, "-m", "arena_cli", "train", "--batch-size", "1",
        "--group-size", "2", "--warmup-steps", "2", "--warmup-games", "4",
        "--eval-every", "0", "--save-every", "0", "--no-serve", "--db", "", "--quiet",
        "--log-dir", str(log_dir), *extra,
    ]  # fmt: skip


def _interrupt_after_steps(log_dir: Path, presses: int) -> str:
    """Run ``arena train`` until it has logged 3 steps, press Ctrl-C ``presses`` times (each
    press once the previous one was acknowledged, as a person would); its output (it must
    exit 0)."""
    import signal
    import subprocess
    import threading
    import time

    command = _train_command(log_dir, "--num-batches", "1000")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    acknowledged = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if line.startswith("stopping"):
                acknowledged.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        metrics = log_dir / "metrics.jsonl"
        deadline = time.monotonic() + 300  # a hang guard, not a bound on the run
        while time.monotonic() < deadline and process.poll() is None:
            if metrics.exists() and len(metrics.read_text().splitlines()) >= 4:
                break
            time.sleep(0.2)
        for _ in range(presses):
            acknowledged.clear()
            process.send_signal(signal.SIGINT)
            assert acknowledged.wait(300), "".join(lines)
        process.wait(timeout=300)
        reader.join(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    output = "".join(lines)
    assert process.returncode == 0, output
    return output


@pytest.mark.slow
@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_saves_the_finished_steps_and_resume_logs_no_step_twice(
    tmp_path: Path, presses: int
) -> None:
    import subprocess

    log_dir = tmp_path / "run"
    output = _interrupt_after_steps(log_dir, presses)
    assert "stopping after this step" in output
    assert ("stopping at once" in output) == (presses == 2)
    assert "next:" in output and "arena play --game TicTacToe-v0 --players run:run@" in output
    metrics = log_dir / "metrics.jsonl"
    steps = [
        m["step"] for m in read_jsonl(metrics) if isinstance(m["step"], int) and m["step"] >= 0
    ]
    full = [c for c in read_jsonl(log_dir / "checkpoints.jsonl") if c.get("state_path")]
    assert full and full[-1]["next_step"] == steps[-1] + 1 < 1000  # no finished step lost
    target = steps[-1] + 3
    resumed = subprocess.run(
        _train_command(log_dir, "--resume", "--num-batches", str(target)),
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    after = [
        m["step"] for m in read_jsonl(metrics) if isinstance(m["step"], int) and m["step"] >= 0
    ]
    assert after == list(range(target))  # every step once, in order


@pytest.mark.slow
async def test_kl_penalty_against_the_warmed_up_base(tmp_path: Path) -> None:
    """The cookbook's KL penalty: the reference is the model as RL starts (the warmed-up
    base), its figures go to metrics.jsonl, and a resumed run keeps the same reference."""
    config = tiny(tmp_path, eval_every=0, kl_penalty_coef=0.1, drop_constant_reward_groups=False)
    await Trainer(config).run()
    metrics = [m for m in read_jsonl(Path(config.log_dir) / "metrics.jsonl") if m["step"] >= 0]
    trained = [m for m in metrics if m.get("optim/datums", 0) > 0]
    assert trained and all("kl_policy_base" in m for m in trained)
    if trained[0]["step"] == 0:  # same weights as the reference at step 0
        assert trained[0]["kl_policy_base"] == pytest.approx(0.0, abs=1e-4)
    checkpoints = read_jsonl(Path(config.log_dir) / "checkpoints.jsonl")
    reference = checkpoints[-1]["kl_reference_path"]
    assert Path(str(reference)).exists()
    resumed = tiny(
        tmp_path,
        eval_every=0,
        kl_penalty_coef=0.1,
        num_batches=3,
        drop_constant_reward_groups=False,
    )
    await Trainer(resumed).run(resume=True)
    assert read_jsonl(Path(config.log_dir) / "checkpoints.jsonl")[-1]["kl_reference_path"] == (
        reference
    )


@pytest.mark.slow
async def test_a_moving_kl_reference_becomes_the_policy_every_n_steps(tmp_path: Path) -> None:
    """``kl_reference_every``: every N steps the reference is saved from the policy as it
    is then, and the checkpoint names it (a resumed run goes on from it)."""
    with pytest.raises(ValueError, match="kl_reference_every"):
        tiny(tmp_path, kl_reference_every=-1).validate()
    no_exact = {"kl_reverse_coef": 0.0, "kl_forward_coef": 0.0}
    with pytest.raises(ValueError, match="needs kl_penalty_coef"):
        tiny(tmp_path, kl_penalty_coef=0.0, kl_reference_every=2, **no_exact).validate()
    config = tiny(
        tmp_path,
        eval_every=0,
        num_batches=4,
        kl_penalty_coef=0.1,
        kl_reference_every=2,
        drop_constant_reward_groups=False,
        **no_exact,
    )
    await Trainer(config).run()
    checkpoints = read_jsonl(Path(config.log_dir) / "checkpoints.jsonl")
    references = [str(c["kl_reference_path"]) for c in checkpoints if "state_path" in c]
    assert len(references) == 4  # one checkpoint a step, saved after the step moved it
    assert Path(references[0]).name == "kl-reference"  # the warmed-up base
    assert [Path(r).name for r in references[1:]] == [
        "kl-reference-000002", "kl-reference-000002", "kl-reference-000004",
    ]  # fmt: skip
    assert all(Path(r).exists() for r in references)


async def test_a_hung_sampler_fails_its_games_within_the_time_limit() -> None:
    """Every sampling call has a time limit: a sampler that never answers fails its games
    (dropped, counted), every seat is woken, and no task is left pending."""
    import asyncio

    from tinker_cookbook.exceptions import AllTrajectoriesFailedError

    from arena.envs import MatchGroupBuilder
    from arena.rollouts import do_group_rollout
    from trainer.backend import SamplerPolicy

    class HungSampler:
        def sample(self, prompt: object, num_samples: int, sampling_params: object) -> object:
            return asyncio.get_running_loop().create_future()  # never completes

    policy = SamplerPolicy(HungSampler(), max_tokens=4, timeout_s=0.3)  # type: ignore[arg-type]
    builder = MatchGroupBuilder(
        MatchSettings("TicTacToe-v0", limits=SessionLimits(move_timeout_s=10.0)), group_size=2
    )
    # The 0.3 s sample limit ends them, not the 10 s move clock: the error names it.
    with pytest.raises(AllTrajectoriesFailedError, match="SampleTimeoutError"):
        await no_hang(do_group_rollout(builder, policy), "the rollout")
    await asyncio.sleep(0)
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


@pytest.mark.parametrize(("always", "expected"), [("pass", 1.0), ("bet", 1.0 / 3.0)])
async def test_kuhn_yardstick_reports_exact_exploitability(always: str, expected: float) -> None:
    """A scripted policy that always passes (check or fold) or always bets (bet or call),
    measured by Kuhn poker's yardstick on real hands through the prompts a seat sees: the
    known exploitabilities."""
    from arena.renderers import ByteTokenizer, prompt_tokens
    from arena.types import TokensWithLogprobs
    from trainer.evaluate import measure_yardstick, yardstick_key

    tokenizer = ByteTokenizer()

    async def policy(ob: object, stop: object) -> TokensWithLogprobs:
        text = tokenizer.decode(prompt_tokens(ob))  # type: ignore[arg-type]
        tail = text[text.rfind("available actions") :]
        options = ("[check]", "[fold]") if always == "pass" else ("[bet]", "[call]")
        move = options[0] if options[0] in tail else options[1]
        return TokensWithLogprobs([*tokenizer.encode(move), ByteTokenizer.EOS], None)

    figures = await measure_yardstick(policy, "KuhnPoker-v0", [], samples=4)
    assert yardstick_key("KuhnPoker-v0") == "test/yardstick/exploitability"
    assert figures["test/yardstick/exploitability"] == pytest.approx(expected, abs=1e-9)
    assert figures["test/yardstick/invalid_rate"] == 0.0


@pytest.mark.slow
async def test_the_best_checkpoint_by_the_yardstick_is_marked_and_anchors_the_league(
    tmp_path: Path,
) -> None:
    from storage.rundir import RunDirectory

    config = tiny(tmp_path, num_batches=3, save_every=0)
    await Trainer(config).run()
    run = Path(config.log_dir)
    key = "test/yardstick/non_loss_vs_optimal"
    evaluations = [m for m in read_jsonl(run / "metrics.jsonl") if key in m]
    assert len(evaluations) == 4  # steps 0, 1, 2 and the final one
    entries = read_jsonl(run / "checkpoints.jsonl")
    marked = [c for c in entries if c.get("best")]
    assert len(marked) == 1  # one best, the first evaluation that reached the top figure
    best = marked[0]
    values = [float(m[key]) for m in evaluations]  # type: ignore[arg-type]
    assert best["non_loss_vs_optimal"] == max(values) and best["best_key"] == key
    assert Path(str(best["sampler_path"])).exists()
    assert RunDirectory(run).best() == best
    # every earlier best got its own saved weights too
    saved = [c for c in entries if Path(str(c.get("sampler_path"))).name.startswith("best-")]
    assert len(saved) == sum(v > max(values[:i], default=-1) for i, v in enumerate(values))
    league = json.loads((run / "league.json").read_text())
    assert league["best"]["sampler_path"] == best["sampler_path"]


def test_learning_rate_schedules_fall_to_their_final_fraction() -> None:
    constant = TrainConfig(learning_rate=1e-3, lr_schedule="constant")
    assert constant.learning_rate_at(0.0) == constant.learning_rate_at(1.0) == 1e-3
    linear = TrainConfig(learning_rate=1e-3, lr_schedule="linear", lr_final_fraction=0.1)
    assert linear.learning_rate_at(0.0) == pytest.approx(1e-3)
    assert linear.learning_rate_at(0.5) == pytest.approx(5.5e-4)
    assert linear.learning_rate_at(2.0) == pytest.approx(1e-4)  # past the end: the floor
    cosine = TrainConfig(learning_rate=1e-3, lr_schedule="cosine", lr_final_fraction=0.0)
    assert cosine.learning_rate_at(0.5) == pytest.approx(5e-4)
    assert cosine.learning_rate_at(1.0) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="lr_final_fraction"):
        TrainConfig(lr_final_fraction=1.5).validate()


def test_each_step_deals_its_groups_to_the_games_in_turn() -> None:
    from trainer.train import groups_of_step

    games = ["A", "B", "C"]
    totals = dict.fromkeys(games, 0)
    for step in range(3):
        shares = groups_of_step(games, step, 8)
        assert sum(shares.values()) == 8
        assert max(shares.values()) - min(shares.values()) <= 1
        for game, n in shares.items():
            totals[game] += n
    assert totals == {"A": 8, "B": 8, "C": 8}  # over 3 steps, the same share each
    assert groups_of_step(["A"], 5, 8) == {"A": 8}  # one game: every group
    assert groups_of_step(games, 0, 2) == {"A": 1, "B": 1}  # a game with no slot is left out


def test_invalid_answers_are_counted_per_answer_the_learner_gave() -> None:
    import tinker

    from arena.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
    from trainer.rollout import batch_metrics

    def seat(answers: int, invalid: int) -> tuple[Trajectory, dict[str, int]]:
        move = Transition(
            ob=tinker.ModelInput.from_ints([1]), ac=TokensWithLogprobs([2], [-0.5]),
            reward=0.0, episode_done=False,
        )  # fmt: skip
        trajectory = Trajectory([move] * answers, final_ob=tinker.ModelInput.from_ints([1, 2]))
        return trajectory, {"aborted": 0, "invalid_moves": invalid, "turns": 4, "seat": 0}

    def group(*seats: tuple[Trajectory, dict[str, int]]) -> TrajectoryGroup:
        trajectories = [t for t, _m in seats]
        return TrajectoryGroup(trajectories, [0.0] * len(seats), [m for _t, m in seats])  # type: ignore[arg-type]

    # Game A: 1 invalid in 4 answers and 0 in 2; game B: 3 invalid in 3 answers.
    groups = [group(seat(4, 1), seat(2, 0)), group(seat(3, 3))]
    metrics = batch_metrics(groups, [["A"], ["B"]])
    assert metrics["env/A/invalid_per_answer"] == pytest.approx(1 / 6)
    assert metrics["env/B/invalid_per_answer"] == pytest.approx(1.0)
    assert metrics["env/all/invalid_per_answer"] == pytest.approx(4 / 9)
    assert metrics["env/all/invalid_moves"] == pytest.approx(4 / 3)  # per seat, as before
    assert metrics["env/all/turns"] == 4.0
    silent = batch_metrics([group(seat(0, 0))], [["C"]])  # no answer: no share to give
    assert "env/C/invalid_per_answer" not in silent


def test_bad_multi_game_settings_are_refused(tmp_path: Path) -> None:
    assert TrainConfig(game_id=" TicTacToe-v0, KuhnPoker-v0 ").games == (
        "TicTacToe-v0",
        "KuhnPoker-v0",
    )
    with pytest.raises(ValueError, match="named twice"):
        tiny(tmp_path, game_id="TicTacToe-v0,TicTacToe-v0").validate()
    with pytest.raises(Exception, match="NoSuchGame-v0"):
        tiny(tmp_path, game_id="TicTacToe-v0,NoSuchGame-v0").validate()
    with pytest.raises(ValueError, match="no game"):
        tiny(tmp_path, game_id=" , ").validate()


@pytest.mark.slow
async def test_one_model_trains_on_several_games_each_evaluated_with_its_own_yardstick(
    tmp_path: Path,
) -> None:
    from storage.rundir import RunDirectory
    from trainer.summary import summary_lines

    games = ("TicTacToe-v0", "KuhnPoker-v0")
    config = tiny(
        tmp_path,
        game_id=",".join(games),
        num_batches=2,
        batch_size=4,
        league_snapshot_every=1,
        yardstick_samples=16,
    )
    database = await open_database(str(tmp_path / "arena.db"))
    try:
        async with Recorder(database, default_bus()):
            await Trainer(config, database=database).run()
        matches = await list_matches(database, run="tiny", limit=1000)
    finally:
        await database.close()
    trained = [m for m in matches if m.group_id and m.group_id.startswith("b")]
    # 2 steps x 4 groups x 2 games, dealt two groups a game a step
    assert sorted({m.game_id for m in trained}) == sorted(games)
    assert sum(m.game_id == "KuhnPoker-v0" for m in trained) == 8 and len(trained) == 16
    run = RunDirectory(config.log_dir)
    assert run.games == games
    rows = run.metrics()
    evaluations = [r for r in rows if "test/mean_score" in r]
    assert len(evaluations) == 3  # steps 0 and 1, and the final one
    for row in evaluations:
        for figure in (
            "test/TicTacToe-v0/random/win",
            "test/TicTacToe-v0/optimal/draw",
            "test/TicTacToe-v0/yardstick/non_loss_vs_optimal",
            "test/KuhnPoker-v0/nash/score",
            "test/KuhnPoker-v0/yardstick/exploitability",
        ):
            assert figure in row, figure
        means = [row[f"test/{g}/mean_score"] for g in games]
        assert row["test/mean_score"] == pytest.approx(sum(means) / 2)
        assert not any(k.startswith("test/random/") for k in row)  # nothing unattributed
    trained_rows = [r for r in rows if "time/total" in r]
    for game_id in games:  # each game's training games and league apart
        assert all(f"env/{game_id}/reward/total" in r for r in trained_rows)
        assert all(f"league/{game_id}/pool_size" in r for r in trained_rows)
    best = run.best()
    assert best is not None and best["best_key"] == "test/mean_score"
    league = json.loads((Path(config.log_dir) / "league.json").read_text())
    assert sorted(league["games"]) == sorted(games)
    for state in league["games"].values():  # the best anchors every game's league
        assert state["best"]["sampler_path"] == best["sampler_path"]
    text = "\n".join(summary_lines(run))
    assert "vs TicTacToe-v0/optimal" in text and "KuhnPoker-v0/exploitability" in text
    for game_id in games:
        assert f"arena play --game {game_id} --players run:tiny@" in text
    assert max(len(line) for line in text.splitlines()) <= 100
    # resumed, it goes on with both games' leagues
    resumed = tiny(
        tmp_path, game_id=",".join(games), num_batches=3, batch_size=4, yardstick_samples=16
    )
    records = await Trainer(resumed).run(resume=True)
    assert records[0].step == 2


def test_losing_by_an_invalid_move_costs_at_least_the_games_worst_legal_outcome() -> None:
    config = TrainConfig()
    assert config.resolved_invalid_move_penalty("TicTacToe-v0") == -1.0
    # in Kuhn-v0 a called bet loses 2: a forfeit at -1 would be a cheaper fold
    assert config.resolved_invalid_move_penalty("Kuhn-v0") == -2.0
    assert config.match_settings("Kuhn-v0").limits.invalid_move_penalty == -2.0
    chosen = TrainConfig(invalid_move_penalty=-3.0)
    assert chosen.resolved_invalid_move_penalty("Kuhn-v0") == -3.0


@pytest.mark.slow
async def test_training_games_sample_at_the_rollout_temperature_and_evaluations_do_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rollout_temperature`` is the learner's temperature in its training games only:
    near 0 they are played almost greedily (the sampler's entropy per action token is
    about 0), while every evaluation still samples at ``temperature``."""
    import trainer.train as train_module

    rollouts: list[float] = []
    evaluations: list[float] = []
    real_rollout, real_evaluate = train_module.rollout_batch, Trainer._evaluate

    async def rollout(builders, policy, *args, **kwargs):  # type: ignore[no-untyped-def]
        rollouts.append(policy.temperature)
        return await real_rollout(builders, policy, *args, **kwargs)

    def evaluate(self, policy, *args, **kwargs):  # type: ignore[no-untyped-def]
        evaluations.append(policy.temperature)
        return real_evaluate(self, policy, *args, **kwargs)

    monkeypatch.setattr(train_module, "rollout_batch", rollout)
    monkeypatch.setattr(Trainer, "_evaluate", evaluate)
    config = tiny(tmp_path, rollout_temperature=1e-3, drop_constant_reward_groups=False)
    await Trainer(config).run()
    assert rollouts == [1e-3, 1e-3] and evaluations == [1.0, 1.0, 1.0]
    metrics = [m for m in read_jsonl(Path(config.log_dir) / "metrics.jsonl") if m["step"] >= 0]
    entropies = [m["optim/entropy"] for m in metrics if "optim/entropy" in m]
    assert entropies and max(entropies) < 0.01  # type: ignore[type-var]
    with pytest.raises(ValueError, match="rollout_temperature"):
        tiny(tmp_path, rollout_temperature=0.0).validate()


@pytest.mark.slow
async def test_a_kl_phase_ends_early_once_the_policy_reaches_the_kl_limit(tmp_path: Path) -> None:
    """``kl_phase_limit``: a NashPG phase also ends at the first step whose KL to the
    reference reaches the limit (a tiny limit: every step that has a KL ends its phase),
    and the step says so (``kl/phase_ended``)."""
    with pytest.raises(ValueError, match="kl_phase_limit"):
        tiny(tmp_path, kl_penalty_coef=0.1, kl_phase_limit=0.5).validate()
    config = tiny(
        tmp_path,
        eval_every=0,
        num_batches=3,
        kl_penalty_coef=0.1,
        kl_reference_every=100,
        kl_phase_limit=1e-12,
        drop_constant_reward_groups=False,
        kl_reverse_coef=0.0,
        kl_forward_coef=0.0,
    )
    await Trainer(config).run()
    rows = [r for r in read_jsonl(Path(config.log_dir) / "metrics.jsonl") if r["step"] >= 0]
    for row in rows:
        crossed = float(row.get("kl_policy_base", 0.0)) >= 1e-12
        assert row.get("kl/phase_ended") == (1.0 if crossed else None)
    assert any("kl/phase_ended" in r for r in rows)


@pytest.mark.slow
async def test_a_branched_run_trains_on_per_move_advantages_and_counts_the_branches(
    tmp_path: Path,
) -> None:
    """``branches``: the step's games are branched, their cost is logged
    (``branch/games``, ``branch/moves``), the advantages' spread by move number is logged,
    and the continuations are not recorded as matches."""
    database = await open_database(str(tmp_path / "arena.db"))
    try:
        config = tiny(
            tmp_path,
            eval_every=0,
            branches=2,
            branch_points=2,
            opponents="self",
            drop_constant_reward_groups=False,
        )
        async with Recorder(database, default_bus()):
            await Trainer(config, database=database).run()
        stored = len(await list_matches(database, run="tiny", limit=1000))
    finally:
        await database.close()
    rows = [r for r in read_jsonl(Path(config.log_dir) / "metrics.jsonl") if r["step"] >= 0]
    for row in rows:
        assert row["branch/games"] > 0 and row["branch/moves"] > 0
        assert "advantage/move_1/std" in row
    assert stored == config.num_batches * config.batch_size * config.group_size


@pytest.mark.slow
async def test_a_language_model_plays_in_the_league_under_its_own_name(tmp_path: Path) -> None:
    """``--league-bots model:DIR``: the league's bot groups seat the model as released
    (its own chat template, recorded under its weights' hash); a league bot that is not a
    bot or a model is refused before the run starts."""
    from tests.tiny_models import write_tiny_model_dir

    path = write_tiny_model_dir(tmp_path / "tiny-llama", "llama")
    config = tiny(
        tmp_path,
        num_batches=1,
        opponents="league",
        league_bot_share=1.0,
        league_past_share=0.0,
        league_bots=(f"model:{path}",),
        eval_every=0,
        warmup_steps=0,
    )
    database = await open_database(str(tmp_path / "arena.db"))
    try:
        async with Recorder(database, default_bus()):
            await Trainer(config, database=database).run()
        matches = await list_matches(database, run="tiny", limit=100)
    finally:
        await database.close()
    trained = [m for m in matches if m.group_id and m.group_id.startswith("b")]
    assert len(trained) == 4  # 2 groups of 2 games, both against the model
    for match in trained:
        names = sorted(s.policy.split("@")[0] for s in match.seats)
        assert names == ["learner", "model:tiny-llama"], names
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert any(f"league/score/model:{path}" in r for r in rows)
    with pytest.raises(ValueError, match="is not a bot, model:NAME or openai"):
        tiny(tmp_path, opponents="league", league_bots=("agent:alice",)).validate()
    with pytest.raises(ValueError, match="does not exist"):
        tiny(tmp_path, opponents="league", league_bots=("model:nope.gguf",)).validate()


async def test_the_exact_kl_is_charted_and_its_magnet_moves_onto_the_policy_each_phase(
    tmp_path: Path,
) -> None:
    """The built-in model's default on Kuhn poker: the exact KL toward the magnet, the
    step's KL and the answers' entropy in every step's metrics; with phases of one step
    the magnet is the policy again at each step's start (its KL there is 0)."""
    config = tiny(
        tmp_path,
        game_id="Kuhn-v0",
        eval_every=0,
        num_batches=3,
        kl_reference_every=1,
        drop_constant_reward_groups=False,
    )
    assert config.decision_kl() is not None and config.resolved_kl_coef() == 0.0
    await Trainer(config).run()
    rows = [r for r in read_jsonl(Path(config.log_dir) / "metrics.jsonl") if r["step"] >= 0]
    trained = [r for r in rows if "optim/loss" in r]
    assert len(trained) == 3
    for row in trained:
        assert float(row["kl/reverse"]) == pytest.approx(0.0, abs=1e-5)
        assert float(row["policy/step_kl"]) >= 0.0 and float(row["policy/answer_entropy"]) > 0
        assert row["kl/phase_ended"] == 1.0
