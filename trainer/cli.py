"""``arena train``: self-play training from the command line.

Its options are ``TrainConfig``'s fields, one each (``--game`` for ``game_id``), and their
help is the field's docstring (``field_docs``): the config is the one place they are
described.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import contextlib
import dataclasses
import functools
import inspect
import itertools
import sys
import textwrap
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from arena.eventbus import EventBus, default_bus
from games.cli import add_allow_failing, vouch
from games.console import EXIT_FAILED, EXIT_OK, fail
from trainer.config import TrainConfig
from trainer.modelsettings import fit_to_model, settings_line
from trainer.renames import RENAMED_FIELDS, renamed_option, upgrade_names
from trainer.summary import evaluation_text, summary_lines

if TYPE_CHECKING:
    from storage.rundir import RunDirectory
    from trainer.train import Trainer

LiveView = Callable[
    [Any, EventBus, str, int, list[str]], contextlib.AbstractAsyncContextManager[Any]
]
"""``(database, bus, host, port, run log dirs)`` -> a context that serves the browser view
while it is open (``web.cli.live_view``)."""


def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring (the string right under it in the class body), whitespace
    folded, for help texts."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, following in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.target.id] = " ".join(following.value.value.split())
    return docs


def option_name(field: str) -> str:
    """The ``arena train`` option of a ``TrainConfig`` field (``--game`` for ``game_id``)."""
    return "--" + ("game" if field == "game_id" else field.replace("_", "-"))


def add_renamed_options(
    parser: argparse.ArgumentParser, renamed: dict[str, str], kinds: dict[str, type]
) -> None:
    """Hidden options under the old names of ``renamed`` (old -> new field name), each one
    storing into its new field with a note; ``kinds`` gives each new field's type."""
    for old, new in renamed.items():
        parser.add_argument(
            option_name(old),
            dest=new,
            type=kinds[new],
            action=renamed_option(option_name(new)),
            default=argparse.SUPPRESS,
            help=argparse.SUPPRESS,
        )


def add_train_options(parser: argparse.ArgumentParser) -> None:
    """One option per ``TrainConfig`` field, its help the field's docstring (and the old
    names of ``RENAMED_FIELDS``, hidden)."""

    hints = typing.get_type_hints(TrainConfig)
    helps = field_docs(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        flag = option_name(f.name)
        hint = hints[f.name]
        default = f.default
        help_text = helps.get(f.name, "")
        if "(default" not in help_text:
            help_text += f" (default: {default})"
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if any(typing.get_origin(a) is tuple for a in args):  # an optional tuple
            origin = tuple
        if hint is bool:
            parser.add_argument(flag, action=_GivenFlag, default=default, help=help_text)
        elif origin is tuple:
            parser.add_argument(
                flag,
                action=_Given,
                type=lambda v: tuple(x.strip() for x in v.split(",") if x.strip()),
                default=default,
                help=help_text + " (comma-separated)",
            )
        else:
            literals = [a for a in args if isinstance(a, str)]
            choices = f.metadata.get("choices")
            if origin is typing.Literal:
                choices = list(args)
            elif any(typing.get_origin(a) is typing.Literal for a in args):
                choices = [
                    x
                    for a in args
                    if typing.get_origin(a) is typing.Literal
                    for x in typing.get_args(a)
                ]
            kind: type = str
            for candidate in (int, float):
                if hint is candidate or candidate in args:
                    kind = candidate
                    break
            parser.add_argument(
                flag,
                dest=f.name,
                action=_Given,
                type=kind,
                choices=choices or (literals or None),
                default=default,
                help=help_text,
            )
    add_renamed_options(parser, RENAMED_FIELDS, {new: int for new in RENAMED_FIELDS.values()})


class _Given(argparse._StoreAction):
    """Stores the value and notes that the option was given (``given_options``)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        super().__call__(parser, namespace, values, option)
        _note_given(namespace, self.dest)


class _GivenFlag(argparse.BooleanOptionalAction):
    """``--x/--no-x``, noting that it was given."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        super().__call__(parser, namespace, values, option)
        _note_given(namespace, self.dest)


def _note_given(namespace: Any, dest: str) -> None:
    given = set(getattr(namespace, "given_options", ()))
    namespace.given_options = given | {dest}


def given_options(args: argparse.Namespace) -> set[str]:
    """The ``TrainConfig`` fields given on the command line (whatever their value)."""
    return set(getattr(args, "given_options", ()))


def _config_fields() -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(TrainConfig)}


def with_stored_settings(values: dict[str, Any], run_dir: RunDirectory) -> dict[str, Any]:
    """``values`` (settings from the command line) for resuming the run in ``run_dir``: a
    resumed run goes on as it was started, with its stored settings (old names upgraded,
    with a note) except the ones given on this command line."""
    fields = _config_fields()
    merged = dict(values)
    stored = upgrade_names(run_dir.config(), RENAMED_FIELDS, f"{run_dir.config_path}: ")
    for name, value in stored.items():
        if name in fields and merged.get(name) == fields[name].default:
            default = fields[name].default
            merged[name] = (
                tuple(value) if isinstance(default, tuple) or isinstance(value, list) else value
            )
    return merged


def cmd_train(args: argparse.Namespace, live_view: LiveView | None = None) -> int:
    """Self-play training with a progress bar and a line per step; ``live_view`` serves
    the browser view while it trains (the web package's ``web.cli.live_view``)."""
    from tqdm import tqdm

    from matchmaking.recording import NotStored
    from storage.errors import StorageError
    from storage.rundir import RunDirectory, RunInUse
    from trainer.backend import BackendError
    from trainer.progress import no_bars, tqdm_bars
    from trainer.train import Trainer

    values, chosen = fit_to_model(train_values(args), given_options(args))
    if chosen:
        print(settings_line(str(values["model"]), str(values.get("device", "auto")), chosen))
    try:
        config = TrainConfig(**values)
        bar = tqdm(total=config.num_batches, desc="train", unit="step", disable=args.quiet or None)
        bars = no_bars if args.quiet else tqdm_bars
        trainer = Trainer(config, report=tqdm.write, progress=_step_lines(bar), bars=bars)
    except (BackendError, ValueError) as exc:
        fail("arena train", str(exc))

    not_stored = None
    try:
        asyncio.run(_train(trainer, args, live_view))
    except (BackendError, ValueError, StorageError, RunInUse) as exc:
        fail("arena train", str(exc))
    except NotStored as exc:
        not_stored = str(exc)
    finally:
        bar.close()
    print()
    print("\n".join(summary_lines(RunDirectory(trainer.config.log_dir), config.game_id)))
    if not_stored:
        print(f"arena train: error: {not_stored}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def train_values(args: argparse.Namespace) -> dict[str, Any]:
    """The ``TrainConfig`` settings of ``arena train``'s command line: a resumed run's
    stored settings under the ones given, a fresh run's log directory stamped with its games
    and the time, each game vouched for (exits as ``vouch`` does for a failing game)."""
    import time

    from storage.rundir import RunDirectory
    from trainer.config import split_games

    values = {k: v for k, v in vars(args).items() if k in _config_fields()}
    if args.resume and values.get("log_dir") not in (None, "runs/latest"):
        values = with_stored_settings(values, RunDirectory(values["log_dir"]))
    games = split_games(str(values.get("game_id") or "game"))
    if values.get("log_dir") in (None, "runs/latest"):
        stamp = time.strftime("%Y%m%d-%H%M%S")
        values["log_dir"] = f"runs/{'+'.join(games)}-{stamp}"
    if "game_id" in values:
        values["game_id"] = ",".join(games)
        for game_id in games:
            vouch("arena train", game_id, args.allow_failing)
    return values


STEP_LINE_METRICS = (
    ("env/all/reward/total", "reward"),
    ("env/all/win", "win"),
    ("env/all/invalid_moves", "invalid/game"),
    ("optim/loss", "loss"),
    ("time/total", "s"),
)
"""The metrics on ``arena train``'s line per step, each with its label."""


def _step_lines(bar: Any) -> Callable[[int, dict[str, float]], None]:
    """The trainer's progress callback: advance ``bar`` (a tqdm bar) and write a line per
    step, and the evaluation's results after a step that evaluated."""
    from tqdm import tqdm

    def progress(step: int, metrics: dict[str, float]) -> None:
        bar.update(1)
        parts = [f"step {step}"]
        for key, label in STEP_LINE_METRICS:
            if key in metrics:
                parts.append(f"{label} {metrics[key]:.3f}")
        tqdm.write("  ".join(parts))
        if any(k.startswith("test/") for k in metrics):
            tqdm.write(f"  evaluation at step {step}: " + evaluation_text(metrics))

    return progress


def _stop_on_sigint(trainer: Trainer) -> Callable[[], None]:
    """The Ctrl-C handler of a training run: the first stops after the current step, the
    second at once (both save the finished steps), a third aborts without saving."""
    from tqdm import tqdm

    stops = 0

    def on_sigint() -> None:
        nonlocal stops
        stops += 1
        if stops == 1:
            tqdm.write(
                "stopping after this step, then saving (Ctrl-C again: stop at once, "
                "still saving the finished steps; a third time: abort without saving)"
            )
            trainer.request_stop()
        elif stops == 2:
            tqdm.write("stopping at once; saving the finished steps")
            trainer.request_stop(now=True)
        else:
            raise KeyboardInterrupt

    return on_sigint


async def _train(trainer: Trainer, args: argparse.Namespace, live_view: LiveView | None) -> None:
    """Run ``trainer`` with its matches recorded, Ctrl-C stopping it (``_stop_on_sigint``),
    and the browser view served while it trains (unless ``--no-serve``)."""
    import signal

    from matchmaking.recording import recording

    config = trainer.config
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, _stop_on_sigint(trainer))
    db = args.db if config.db is None else config.db
    bus = default_bus()
    async with recording(db, bus) as database:
        trainer.database = database
        view: contextlib.AbstractAsyncContextManager[Any] = contextlib.nullcontext()
        if not args.no_serve and live_view is not None:
            view = live_view(database, bus, args.host, args.port, [config.log_dir])
        async with view:
            await trainer.run(args.resume)


def register(sub: Any, live_view: LiveView | None = None) -> None:
    """Add ``train`` to the ``arena`` command; ``live_view`` serves the browser view."""
    train = sub.add_parser(
        "train",
        help="self-play training on a game (local model by default)",
        description="Train a model by self-play. Every match is recorded; metrics and "
        "checkpoints go to --log-dir. Ctrl-C stops after the current step and saves.",
    )
    add_train_options(train)
    train.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    train.add_argument("--no-serve", action="store_true", help="do not start the browser view")
    train.add_argument("--host", default="127.0.0.1", help="browser view address")
    train.add_argument("--port", type=int, default=8765, help="browser view port (default: 8765)")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    add_allow_failing(train)
    train.set_defaults(func=functools.partial(cmd_train, live_view=live_view))
    register_eval(sub)


def cmd_eval(args: argparse.Namespace) -> int:
    """``arena eval``."""
    from trainer.scorecard import eval_command

    return eval_command(
        [p.strip() for p in args.players.split(",") if p.strip()],
        args.games,
        args.games_per_pair,
        db=args.db,
        record=not args.no_record,
        png=args.png or None,
        seed=args.seed,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        concurrency=args.concurrency,
        runs_dir=args.runs_dir,
        as_json=args.json,
        quiet=args.quiet,
    )


def register_eval(sub: Any) -> None:
    """Add ``eval`` to the ``arena`` command."""
    from storage.cli import add_db_option

    ev = sub.add_parser(
        "eval",
        help="models and bots on a list of games: win/draw/loss, invalid moves, yardsticks",
        description="Each player plays each game against random and the game's yardstick "
        "bots (or its strongest bot), half the games in each seat; the matches are recorded "
        "and rated. Prints a table per player, game and opponent and writes it as a PNG.",
    )
    ev.add_argument(
        "--players",
        required=True,
        help="comma-separated: models (model:smollm2, model:FILE.gguf, model:DIR), served "
        "models (openai:BASE_URL#MODEL), checkpoints (run:NAME@STEP) and bots",
    )
    ev.add_argument(
        "--games",
        default="all",
        help="comma-separated game ids, or all: TicTacToe-v0, ConnectFour-v0, Kuhn-v0, "
        "Goofspiel-v0, LowestUnique-v0, Haggle-v0, RockPaperScissors-v0 (default: all)",
    )
    ev.add_argument(
        "--games-per-pair", type=int, default=20, help="games per player and opponent (default: 20)"
    )
    ev.add_argument(
        "--max-tokens", type=int, help="a model's answer length in tokens (default: 32)"
    )
    ev.add_argument(
        "--temperature", type=float, default=1.0, help="a model's sampling temperature (default: 1)"
    )
    ev.add_argument("--seed", type=int, default=0, help="seed of the first game (default: 0)")
    ev.add_argument("--concurrency", type=int, default=32, help="games at once per line-up")
    ev.add_argument("--runs-dir", default="runs", help="where run:NAME looks (default: runs)")
    ev.add_argument(
        "--png", default="arena-eval.png", help="where the table's picture goes ('' for none)"
    )
    ev.add_argument("--no-record", action="store_true", help="do not store the matches")
    ev.add_argument("--json", action="store_true", help="print JSON")
    ev.add_argument("--quiet", action="store_true", help="no progress")
    add_db_option(ev)
    ev.set_defaults(func=cmd_eval)
