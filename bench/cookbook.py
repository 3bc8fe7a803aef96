"""Arena's builder against the Tinker cookbook's own text_arena builder, under the
cookbook's driver and policy interface: self-play games per second, same games, same
renderer, same moves.

Both sides are rolled out by the cookbook's ``tinker_cookbook.rl.rollouts.do_group_rollout``
with one token policy (the cookbook's ``TokenCompleter`` interface: prompt in, tokens out)
that decodes its prompt, reads the legal moves and answers one at random. Both render with
the cookbook's ``role_colon`` renderer over one byte-level tokenizer built here (nothing is
downloaded). Cookbook: ``TwoPlayerEnvGroupBuilder`` (``recipes.multiplayer_rl.text_arena``;
one game per group, ``num_envs=2``, self-play); arena: ``MatchGroupBuilder`` (8 games per
group, as ``arena train`` plays them, with its guards, clocks, events and trajectories;
nothing listens to the events; the ``last`` observation format, what the cookbook's env
shows a seat: the messages since its last move). A batch is 64 games at once either way.
Rounds alternate the two; the median of each is kept. The ratio is arena / cookbook.

The cookbook's builder does much less per move (no move validation beyond TextArena's, no
time limits, no events, no crash handling): what the ratio shows is what arena's machinery
costs against that, or saves (its group plays 8 games on one game thread).

    python -m bench.cookbook [--games 512] [--rounds 3] [--json]
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import random
from typing import Any

from arena.match import MatchSettings
from bench.common import emit, median, parser, timed

GAMES = ("TicTacToe-v0", "ConnectFour-v0")
BATCH = 64
"""Games rolled out at once (a training step's: 8 groups of 8)."""
ARENA_GROUP = 8
TOKENIZER_NAME = "bench-cookbook-bytes"
OBSERVATION_FORMAT = "last"
"""Arena's prompts: what was said since the seat last moved, as the cookbook's env gives
TextArena's observation (the ``full`` format repeats the whole transcript each move)."""


def byte_tokenizer() -> Any:
    """A Hugging Face fast tokenizer over bytes (256 tokens and an end-of-text token),
    built in code: what the cookbook's renderers take."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    core = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )
    tokenizer.name_or_path = TOKENIZER_NAME
    return tokenizer


class RandomLegalMoves:
    """A cookbook ``TokenCompleter``: decodes the prompt, reads the game's legal moves from
    it and answers one at random (``[0]`` when it finds none)."""

    def __init__(self, tokenizer: Any, game_id: str, seed: int) -> None:
        self.tokenizer = tokenizer
        self.game_id = game_id
        self.rng = random.Random(seed)

    async def __call__(self, model_input: Any, stop: Any) -> Any:
        from tinker_cookbook.completers import TokensWithLogprobs

        from arena.renderers import prompt_tokens
        from games.registry import read_legal_moves

        text = self.tokenizer.decode(prompt_tokens(model_input))
        moves = read_legal_moves(text[text.rfind("User:") :], self.game_id)
        move = self.rng.choice(moves) if moves else "[0]"
        tokens = self.tokenizer.encode(move + "\n", add_special_tokens=False)
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=[0.0] * len(tokens))


def _renderer(tokenizer: Any) -> Any:
    from tinker_cookbook.renderers import get_renderer

    return get_renderer("role_colon", tokenizer)


def cookbook_loop(game_id: str, num_games: int, seed: int, tokenizer: Any) -> int:
    """Self-play ``num_games`` games through the cookbook's builder and driver; the number
    of games that ended."""
    from tinker_cookbook.recipes.multiplayer_rl.text_arena.env import TwoPlayerEnvGroupBuilder
    from tinker_cookbook.rl.rollouts import do_group_rollout

    renderer = _renderer(tokenizer)
    policy = RandomLegalMoves(tokenizer, game_id, seed)

    async def run() -> int:
        builder = TwoPlayerEnvGroupBuilder(
            game_name=game_id, renderer=renderer, num_envs=2, self_play=True
        )
        played = 0
        for start in range(0, num_games, BATCH):
            size = min(BATCH, num_games - start)
            groups = await asyncio.gather(*(do_group_rollout(builder, policy) for _ in range(size)))
            played += sum(  # a game counts once both seats' episodes ended
                all(t.transitions and t.transitions[-1].episode_done for t in g.trajectories_G)
                for g in groups
            )
        return played

    with contextlib.redirect_stdout(io.StringIO()):  # TextArena prints as it plays
        return asyncio.run(run())


def arena_loop(game_id: str, num_games: int, seed: int, tokenizer: Any) -> int:
    """Self-play ``num_games`` games through arena's builder under the cookbook's driver;
    the number of games that ended (an aborted one is an error)."""
    from tinker_cookbook.rl.rollouts import do_group_rollout

    from arena.envs import MatchGroupBuilder
    from arena.renderers import RendererConfig, register_tokenizer

    register_tokenizer(TOKENIZER_NAME, tokenizer)
    renderer = RendererConfig(name="role_colon", tokenizer_path=TOKENIZER_NAME)
    policy = RandomLegalMoves(tokenizer, game_id, seed)

    async def run() -> int:
        played = 0
        for start in range(0, num_games, BATCH):
            size = min(BATCH, num_games - start)
            builders = [
                MatchGroupBuilder(
                    MatchSettings(
                        game_id, renderer=renderer, observation_format=OBSERVATION_FORMAT
                    ),
                    group_size=ARENA_GROUP,
                    seed=seed + start + g * ARENA_GROUP,
                )
                for g in range(size // ARENA_GROUP)
            ]
            groups = await asyncio.gather(*(do_group_rollout(b, policy) for b in builders))
            aborted = sum(int(m.get("aborted", 0)) for g in groups for m in g.metrics_G)
            if aborted:
                raise RuntimeError(f"{aborted} seats aborted during the benchmark")
            played += sum(len(g.trajectories_G) for g in groups) // 2
        return played

    return asyncio.run(run())


def main() -> None:
    from arena.eventbus import default_bus
    from arena.runtime import freeze_heap

    args_parser = parser(__doc__.splitlines()[0])
    args_parser.add_argument("--games", type=int, default=512, help="games per measurement")
    args = args_parser.parse_args()
    if args.games % BATCH:
        raise SystemExit(f"--games must be a multiple of {BATCH}")
    assert not default_bus().has_subscribers  # nothing recorded: the core only
    tokenizer = byte_tokenizer()
    for game_id in GAMES:  # warm up both paths (imports, caches), then settle the heap
        cookbook_loop(game_id, BATCH, 0, tokenizer)
        arena_loop(game_id, BATCH, 0, tokenizer)
    freeze_heap()
    results: dict[str, object] = {}
    for game_id in GAMES:
        cookbook, arena = [], []
        for r in range(args.rounds):
            seed = 1000 * r
            cookbook.append(
                timed(lambda g=game_id, s=seed: cookbook_loop(g, args.games, s, tokenizer))
            )
            arena.append(timed(lambda g=game_id, s=seed: arena_loop(g, args.games, s, tokenizer)))
        cb, ar = median(cookbook), median(arena)
        print(
            f"{game_id:<16} cookbook builder {cb:7.1f} games/s   arena builder {ar:7.1f}"
            f"   arena / cookbook {ar / cb:.2f}"
        )
        results[game_id] = {
            "cookbook_games_per_s": round(cb, 1),
            "arena_games_per_s": round(ar, 1),
            "ratio": round(ar / cb, 3),
        }
    emit(results, args.json)


if __name__ == "__main__":
    main()
