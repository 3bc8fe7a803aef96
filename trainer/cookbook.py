"""Arena's games under the Tinker cookbook's own RL trainer (``tinker_cookbook.rl.train``).

``SelfPlayDatasetBuilder`` is a cookbook ``RLDatasetBuilder`` (a ``chz`` config, as the
cookbook's recipes use): give it to ``rl.train.Config(dataset_builder=...)`` and the
cookbook's loop trains on arena's self-play groups, with arena's recording of every match
and, optionally, the live browser view. From the shell (a chz entry point, the cookbook's
style)::

    python -m trainer.cookbook model_name=Qwen/Qwen3-4B-Instruct-2507 \\
        game_id=TicTacToe-v0 log_path=runs/cookbook-ttt

or in Python::

    from tinker_cookbook.rl.train import Config, main
    from trainer.cookbook import SelfPlayDatasetBuilder
    from arena.rollouts import GameRetry

    builder = SelfPlayDatasetBuilder(
        game_id="KuhnPoker-v0",
        model_name_for_tokenizer="Qwen/Qwen3-4B-Instruct-2507",
        renderer_name="qwen3_instruct",
    )
    config = Config(
        learning_rate=4e-5, dataset_builder=builder,
        model_name="Qwen/Qwen3-4B-Instruct-2507", renderer_name="qwen3_instruct",
        max_tokens=64, log_path="runs/cookbook-kuhn",
        rollout_error_tolerance=GameRetry(max_retries=2),   # whole-game retries
    )
    asyncio.run(main(config))
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

import chz
from tinker_cookbook.rl.types import RLDataset, RLDatasetBuilder

from arena.envs import MatchGroupBuilder
from arena.match import MatchSettings
from arena.renderers import RendererConfig
from arena.types import EnvGroupBuilder
from games.limits import SessionLimits
from trainer.dataset import SelfPlayDataset

logger = logging.getLogger("arena.cookbook")


class BotTestDataset(RLDataset):
    """The cookbook's test set: the learner against each bot, in every seat (one batch)."""

    def __init__(self, builders: list[MatchGroupBuilder]) -> None:
        self.builders = builders

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        if index != 0:
            raise IndexError(f"batch {index} out of range 0..0")
        return self.builders

    def __len__(self) -> int:
        return 1


@chz.chz
class SelfPlayDatasetBuilder(RLDatasetBuilder):
    """Self-play groups of an arena game, for the cookbook's trainer (see the module doc).

    Each batch holds ``batch_size`` groups of ``group_size`` games; rewards are centred
    within a group. Matches are recorded to ``db`` (None: ``$ARENA_DB`` or ``./arena.db``;
    "" turns it off) and, with ``serve_port``, shown live at ``http://127.0.0.1:PORT/``.
    """

    game_id: str = "TicTacToe-v0"
    model_name_for_tokenizer: str
    """The tokenizer of the model being trained (the cookbook's ``get_tokenizer`` loads it)."""
    renderer_name: str
    """A cookbook renderer (``qwen3_instruct``, ``llama3``, ...) or ``chat``."""
    num_players: int = 2
    batch_size: int = 8
    """Groups per batch."""
    group_size: int = 8
    """Games per group."""
    num_batches: int = 100
    seed: int = 0
    observation_format: str = "full"
    """``full`` (the seat's transcript), ``last`` or ``compact``."""
    bot_fraction: float = 0.0
    """Share of groups in which the learner plays bots instead of itself."""
    bots: tuple[str, ...] = ("random",)
    test_games: int = 0
    """Games per bot in the test set (0: no test set)."""
    move_timeout_s: float = 120.0
    invalid_move_penalty: float = -1.0
    db: str | None = None
    serve_port: int | None = None

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        """Build the datasets, and start recording (and serving) for this process."""
        renderer = RendererConfig(
            name=self.renderer_name, tokenizer_path=self.model_name_for_tokenizer
        )
        renderer.build()  # fail now, with a clear message, if the tokenizer cannot load
        fmt: Any = self.observation_format
        settings = MatchSettings(
            self.game_id,
            self.num_players,
            SessionLimits(
                invalid_move_penalty=self.invalid_move_penalty, move_timeout_s=self.move_timeout_s
            ),
            renderer,
            fmt,
        )
        train = SelfPlayDataset(
            settings,
            num_batches=self.num_batches,
            batch_size=self.batch_size,
            group_size=self.group_size,
            seed=self.seed,
            bot_fraction=self.bot_fraction,
            bots=self.bots,
            run_id="cookbook",
        )
        test: RLDataset | None = None
        if self.test_games > 0:
            builders = [
                MatchGroupBuilder(
                    settings,
                    learner_seats=(seat,),
                    opponents=(bot,) * (self.num_players - 1),
                    group_size=max(1, self.test_games // self.num_players),
                    seed=10_000_000 + 1_000_000 * seat,
                    group_id=f"test-{bot}-s{seat}",
                )
                for bot in self.bots
                for seat in range(self.num_players)
            ]
            test = BotTestDataset(builders)
        await _start_recording(self.db, self.serve_port)
        return train, test


_KEEPER: asyncio.Task[None] | None = None


LiveView = Callable[[Any, Any, str, int, list[str]], contextlib.AbstractAsyncContextManager[Any]]
_live_view: LiveView | None = None


def use_live_view(view: LiveView) -> None:
    """Serve the browser view with ``view`` when a builder has ``serve_port``
    (``web.cli.live_view``; ``arena cookbook`` installs it)."""
    global _live_view
    _live_view = view


async def _start_recording(db: str | None, port: int | None) -> None:
    """Record the default bus to ``db`` (and serve it on ``port``) until the event loop
    ends: ``asyncio.run`` cancels the keeper task last, which drains the recorder."""
    global _KEEPER
    if db == "" or (_KEEPER is not None and not _KEEPER.done()):
        return
    from arena.eventbus import default_bus
    from storage import Recorder, open_database

    database = await open_database(db)
    recorder = Recorder(database, default_bus())
    recorder.start()
    from matchmaking.live import RatingKeeper

    keeper = RatingKeeper(database, default_bus())
    keeper.start()
    view = contextlib.AsyncExitStack()
    if port is not None and _live_view is None:
        logger.warning(
            "serve_port=%s: no browser view in this process; start through "
            "`arena cookbook ... serve_port=%s`, or run `arena serve` beside it",
            port,
            port,
        )
    elif port is not None and _live_view is not None:
        await view.enter_async_context(_live_view(database, default_bus(), "127.0.0.1", port, []))

    async def keep() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            with contextlib.suppress(Exception):
                await view.aclose()
            with contextlib.suppress(BaseException):
                await recorder.close()
            with contextlib.suppress(BaseException):
                await keeper.close()
            await database.close()

    _KEEPER = asyncio.get_running_loop().create_task(keep(), name="arena-cookbook-recording")


@chz.chz
class CookbookRun:
    """``python -m trainer.cookbook``: the cookbook's RL trainer on an arena game."""

    model_name: str = chz.field(doc="the hosted base model, e.g. Qwen/Qwen3-4B-Instruct-2507")
    log_path: str = chz.field(doc="the cookbook's log directory (metrics, checkpoints)")
    game_id: str = chz.field(default="TicTacToe-v0", doc="an arena game id (`arena games`)")
    renderer_name: str | None = chz.field(
        default=None, doc="a cookbook renderer (default: the one recommended for the model)"
    )
    learning_rate: float = chz.field(default=4e-5, doc="Adam learning rate")
    max_tokens: int = chz.field(default=64, doc="longest sampled move, in tokens")
    batch_size: int = chz.field(default=8, doc="groups per batch")
    group_size: int = chz.field(default=8, doc="games per group (rewards centred within)")
    num_batches: int = chz.field(default=50, doc="training steps")
    lora_rank: int = chz.field(default=32, doc="LoRA rank")
    observation_format: str = chz.field(default="full", doc="full, last or compact")
    db: str | None = chz.field(
        default=None, doc="where matches are recorded (default: $ARENA_DB or ./arena.db; '' off)"
    )
    serve_port: int | None = chz.field(default=None, doc="serve the live view on this port")
    max_retries: int = chz.field(
        default=2, doc="whole-game retries per group (arena.rollouts.GameRetry)"
    )


async def run(cli: CookbookRun) -> None:
    """Build the cookbook's ``Config`` for ``cli`` and run ``tinker_cookbook.rl.train.main``."""
    from tinker_cookbook import model_info
    from tinker_cookbook.rl.train import Config, main

    from arena.rollouts import GameRetry
    from trainer.backend import check_tinker_credentials

    check_tinker_credentials()  # one clear line before any work
    renderer = cli.renderer_name or model_info.get_recommended_renderer_name(cli.model_name)
    builder = SelfPlayDatasetBuilder(
        game_id=cli.game_id,
        model_name_for_tokenizer=cli.model_name,
        renderer_name=renderer,
        batch_size=cli.batch_size,
        group_size=cli.group_size,
        num_batches=cli.num_batches,
        observation_format=cli.observation_format,
        db=cli.db,
        serve_port=cli.serve_port,
    )
    config = Config(
        learning_rate=cli.learning_rate,
        dataset_builder=builder,
        model_name=cli.model_name,
        recipe_name="arena_selfplay",
        renderer_name=renderer,
        max_tokens=cli.max_tokens,
        log_path=cli.log_path,
        lora_rank=cli.lora_rank,
        rollout_error_tolerance=GameRetry(max_retries=cli.max_retries),
    )
    await main(config)


def cli_main(argv: list[str] | None = None) -> int:
    """Parse ``key=value`` arguments (chz) and run; errors are one line, exit status 2."""
    from trainer.backend import BackendError

    cli = chz.entrypoint(CookbookRun, argv=argv)
    try:
        asyncio.run(run(cli))
    except (BackendError, ValueError) as exc:
        print(f"trainer.cookbook: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
