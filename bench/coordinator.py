"""Random-move self-play through the arena stack vs a raw TextArena loop, same games.

Arena: ``MatchGroupBuilder`` + ``GameCoordinator`` + ``PlayerEnv`` + byte renderer, with a
token policy that reads the legal moves from its prompt and answers one at random; the
games rolled out a training batch at a time (8 groups of 8 games, concurrently, as
``arena train`` does). Raw: ``textarena.make`` (default wrappers), reading the
legal moves from the observation text, one game after another. Both pick moves with the
same extractor, so the ratio measures what the arena machinery costs. All run in one
process, after the same warm-up and ``arena.runtime.freeze_heap()`` (as in ``arena train``).

Floor: the per-move work arena cannot skip (the guarded game, each seat's prompt, the same
token policy) with the least coordination that plays it (``floor_loop``). It splits the
gap: floor/raw is what the components cost, arena/floor what arena's coordination costs.

    python -m bench.coordinator [--games 400] [--json]
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import random

import textarena as ta

from arena.envs import MatchGroupBuilder
from arena.eventbus import default_bus
from arena.policies import RandomMovePolicy
from arena.rollouts import do_group_rollout
from arena.runtime import freeze_heap
from bench.common import emit, median, parser, timed
from games.registry import read_legal_moves
from trainer.config import TrainConfig

GAMES = ("TicTacToe-v0", "ConnectFour-v0")


def raw_loop(game_id: str, num_games: int, seed: int) -> int:
    """Play ``num_games`` games with TextArena directly; return the number played."""
    rng = random.Random(seed)
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink):
        for i in range(num_games):
            env = ta.make(game_id)
            env.reset(num_players=2, seed=seed + i)
            done = False
            while not done:
                _pid, observation = env.get_observation()
                moves = read_legal_moves(observation, game_id)
                done, _info = env.step(rng.choice(moves) if moves else "[0]")
            env.close()
            sink.seek(0)
            sink.truncate()
    return num_games


def arena_loop(
    game_id: str,
    num_games: int,
    seed: int,
    group_size: int = TrainConfig.group_size,
    batch_size: int = TrainConfig.batch_size,
) -> int:
    """Play ``num_games`` self-play games through arena, a training step's batch at a time
    (``batch_size`` groups of ``group_size`` games, concurrently, as ``arena train``
    rolls them out); return the number played."""

    async def run() -> int:
        policy = RandomMovePolicy(seed=seed, game_id=game_id)
        builders = [
            MatchGroupBuilder(game_id, group_size=group_size, seed=seed + g * group_size)
            for g in range(num_games // group_size)
        ]
        aborted = 0
        for start in range(0, len(builders), batch_size):
            batch = builders[start : start + batch_size]
            groups = await asyncio.gather(*(do_group_rollout(b, policy) for b in batch))
            aborted += sum(m.get("aborted", 0) for g in groups for m in g.metrics_G)
        if aborted:
            raise RuntimeError(f"{aborted} seats aborted during the benchmark")
        return len(builders) * group_size

    return asyncio.run(run())


def floor_loop(
    game_id: str,
    num_games: int,
    seed: int,
    batch: int = TrainConfig.group_size * TrainConfig.batch_size,
) -> int:
    """The per-move work arena cannot skip, with the least coordination that plays it:
    the guarded game (``GameSession``), each seat's prompt (``SeatView``, the same byte
    renderer) and the same token policy, two seat tasks per game handing the turn over
    by a future, ``batch`` games at a time. No env, coordinator, clock, abort handling or
    trajectories: what arena costs above this is its coordination, what this costs above
    raw is the components. Returns the number of games that finished."""
    from arena.renderers import ByteRenderer
    from arena.seatview import SeatView
    from games import make as make_game

    policy = RandomMovePolicy(seed=seed, game_id=game_id)
    renderer = ByteRenderer()
    stop = renderer.get_stop_sequences()

    async def game(game_seed: int) -> int:
        session = make_game(game_id, 2, game_seed)
        loop = asyncio.get_running_loop()
        views = [SeatView(s, game_id, renderer, "full") for s in range(2)]
        turns = [loop.create_future(), loop.create_future()]

        async def seat(s: int) -> None:
            while True:
                await turns[s]
                if session.done:
                    return
                turns[s] = loop.create_future()
                messages = session.seat_messages(s)
                ob = views[s].prompt(messages, 0, session.legal_moves(s))
                action = await policy(ob, stop)
                session.step(s, views[s].move(action.tokens))
                if session.done:
                    turns[1 - s].set_result(None)
                    return
                turns[session.current_player()].set_result(None)

        turns[session.current_player()].set_result(None)
        await asyncio.gather(seat(0), seat(1))
        session.close()
        outcome = session.outcome
        return int(outcome is not None and outcome.status.value == "finished")

    async def run() -> int:
        played = 0
        for start in range(0, num_games, batch):
            size = min(batch, num_games - start)
            played += sum(await asyncio.gather(*(game(seed + start + i) for i in range(size))))
        return played

    return asyncio.run(run())


def main() -> None:
    args_parser = parser(__doc__.splitlines()[0])
    args_parser.add_argument("--games", type=int, default=400, help="games per measurement")
    args = args_parser.parse_args()
    assert not default_bus().has_subscribers  # nothing recorded: this measures the core only
    for game_id in GAMES:  # warm up every path (imports, the catalogue), then settle the
        raw_loop(game_id, 8, 0)  # heap as `arena train` does (arena.runtime.freeze_heap)
        arena_loop(game_id, 8, 0)
        floor_loop(game_id, 8, 0)
    freeze_heap()
    results: dict[str, object] = {}
    for game_id in GAMES:
        raw, arena, floor = [], [], []
        for r in range(args.rounds):
            seed = 1000 * r
            raw.append(timed(lambda g=game_id, s=seed: raw_loop(g, args.games, s)))
            arena.append(timed(lambda g=game_id, s=seed: arena_loop(g, args.games, s)))
            floor.append(timed(lambda g=game_id, s=seed: floor_loop(g, args.games, s)))
        raw_gps, arena_gps, floor_gps = median(raw), median(arena), median(floor)
        ratio = arena_gps / raw_gps
        print(
            f"{game_id:<16} raw {raw_gps:7.1f} games/s  arena {arena_gps:7.1f}  ratio {ratio:.2f}"
            f"   (floor {floor_gps:7.1f}: {floor_gps / raw_gps:.2f} of raw;"
            f" arena {arena_gps / floor_gps:.2f} of floor)"
        )
        results[game_id] = {
            "raw_games_per_s": round(raw_gps, 1),
            "arena_games_per_s": round(arena_gps, 1),
            "ratio": round(ratio, 3),
            "floor_games_per_s": round(floor_gps, 1),
            "floor_ratio": round(floor_gps / raw_gps, 3),
            "arena_of_floor": round(arena_gps / floor_gps, 3),
        }
    emit(results, args.json)


if __name__ == "__main__":
    main()
