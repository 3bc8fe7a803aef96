"""The conformance kit: the checks every game, built-in or plugin, is held to.

For text games, the checks that PettingZoo's ``api_test``/``seed_test`` and OpenSpiel's
random-simulation tests make. :func:`check_game` plays a few seeded episodes of one game
through its guarded ``GameSession`` with random and garbage-sending players (a game of
simultaneous moves, ``SimultaneousGame``, round by round: every seat asked moves) and
reports:

``builds``
    the factory builds a game that starts at the tested player count.
``seeded``
    the same seed and the same moves give the same transcript for every seat and the same
    outcome.
``interleaved``
    ... also when two games are played move by move in turns on one thread, with other
    code drawing from the global ``random`` in between.
``hidden``
    what spectators are shown matches what the game shows its seats. No public message,
    public state or public board shown while the game is live carries a sentence that was
    sent privately to some seats but not all; where moves are private, no public text
    carries a move's text (a canary is appended to every move). Two different legal moves
    of one seat are played on two copies of the game at a few points: where spectators see
    moves (the game is registered with public moves), the game must show the move to every
    seat too (the copies' public messages, state or board differ), and it must not echo a
    move to single seats only (both fail naming ``hidden_information=``); where the move is
    private (or its simultaneous round is not over), the public state and board must not
    tell the two apart unless a public message does. Where the game can redraw what a seat
    does not know (``Game.resample_hidden``, called on a copy), the copy it was called on is
    unchanged and the redrawn game shows the seat the same public state, public board and
    legal moves; a failure there names ``resample_hidden``.
``views``
    ``public_state``, ``public_board``, ``full_board`` and ``full_state`` never raise and
    return what they must (a ``PublicBoard`` that JSON can hold): the failure is reported
    with the line of the game that raised it.
``legal_moves``
    every listed legal move is accepted (the move played, and others tried on copies of
    the game at a few points).
``invalid_moves``
    garbage (empty text, prose, a made-up bracketed move, 2,000 brackets) and well-formed
    illegal moves (a move listed at an earlier turn, another seat's move, a number past
    every number the game listed) take the invalid-move path in a game that lists its
    moves: refused, and the mover forfeits (``forfeit`` policy) or may retry once and then
    forfeits (``retry``); in any game, none of them makes the game raise (the report names
    the game's line that raised).
``ends``
    random play finishes by the game's rules within the turn cap; garbage-sending players
    end it too (by forfeit, or at the cap for games that accept any text).
``rewards``
    on every ending seen (finished, forfeited, truncated at the cap) each reward is finite
    and within ``GameSpec.reward_range``, and they sum to ``GameSpec.reward_sum`` when the
    game declares a constant sum.
``pickles``
    the game's factory, spec and kit pickle, and the unpickled factory builds the same game.

A check that does not apply (a game that lists no legal moves has no ``legal_moves`` to
try) is ``skip``, with the reason. Limits: ``episodes`` random episodes (2), the turn cap
of ``SessionLimits`` (1,000), ``MAX_FORK_POINTS`` points per episode where copies are
tried, ``time_budget_s`` of CPU time per game (60 s of this process's CPU time, not wall
time, so a busy machine does not change a verdict; checks not reached in time fail: a game
too slow to check is not vouched for).

Use: ``arena check-game ID``; :func:`assert_conforms` in a plugin's own tests;
``python -m games.conformance --write`` (``make games-table``) runs the kit on every
built-in game, in parallel, and writes ``games/conformance_results.json`` (which the
registry reads: a game that fails is unavailable, with the reason) and ``docs/games.md``.

Where each part lives: ``report`` (the checks and their outcomes), ``episodes`` (playing a
game's episodes, replays and copies, under the budget), ``kit`` (:func:`check_game`: one
game's checks in order) with one module per concern (``moves``, ``hidden``, ``replays``,
``endings``; ``state`` is what they share), ``runner`` (many games in worker processes),
``results`` (the stored verdicts and the table), ``vouch`` (a plugin game checked before a
command plays it, and refused when it fails) and ``cli`` (``python -m games.conformance``).
"""

from games.conformance.cli import main
from games.conformance.episodes import (
    FALLBACK_MOVE,
    GARBAGE,
    KIT_LIMITS,
    MAX_FORK_POINTS,
    MAX_MOVES_PER_POINT,
    Episode,
    garbage_chooser,
    random_chooser,
)
from games.conformance.hidden import CANARY, MIN_SECRET_CHARS
from games.conformance.kit import assert_conforms, check_game
from games.conformance.report import (
    CHECKS,
    DEFAULT_EPISODES,
    DEFAULT_TIME_BUDGET_S,
    UNCHECKED,
    CheckResult,
    CheckStatus,
    Report,
)
from games.conformance.results import RESULTS_PATH, TABLE_PATH, render_results, render_table
from games.conformance.runner import candidates, check_all

__all__ = [
    "CANARY",
    "CHECKS",
    "DEFAULT_EPISODES",
    "DEFAULT_TIME_BUDGET_S",
    "FALLBACK_MOVE",
    "GARBAGE",
    "KIT_LIMITS",
    "MAX_FORK_POINTS",
    "MAX_MOVES_PER_POINT",
    "MIN_SECRET_CHARS",
    "RESULTS_PATH",
    "TABLE_PATH",
    "UNCHECKED",
    "CheckResult",
    "CheckStatus",
    "Episode",
    "Report",
    "assert_conforms",
    "candidates",
    "check_all",
    "check_game",
    "garbage_chooser",
    "main",
    "random_chooser",
    "render_results",
    "render_table",
]
