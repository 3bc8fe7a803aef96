"""What fails the kit stays out: before a command plays a game, a plugin game with no
verdict for its current source is checked once and the verdict kept
(``games.verdicts``); a game that fails is refused unless the user allows it."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable

from games.conformance.kit import check_game
from games.registry import CONFORMANCE_REASON, get_spec, plugin_digest, reload_catalogue
from games.verdicts import ALLOW_ENV, allowed_failing, record, recorded


def allow_failing(game_ids: Iterable[str]) -> None:
    """Let ``game_ids`` play although they fail the kit, in this process and its children."""
    os.environ[ALLOW_ENV] = ",".join(sorted(allowed_failing() | set(game_ids)))
    reload_catalogue()


def vouch_for(
    game_id: str,
    *,
    allow: bool = False,
    say: Callable[[str], None] | None = None,
) -> None:
    """Before a command plays ``game_id``: a plugin game with no verdict for its current
    source is run through the kit first (a few seconds; said on ``say``, by default
    stderr) and the verdict kept. With ``allow``, a failing game is let through (said).

    Raises ValueError when the game fails the kit and ``allow`` is False (the message names
    the check, the reason and what to do). Unknown games raise UnknownGame.
    """

    def tell(line: str) -> None:
        (say or (lambda text: print(text, file=sys.stderr)))(line)

    spec = get_spec(game_id)
    digest = plugin_digest(game_id)
    if spec.source == "plugin" and digest is not None and recorded(game_id, digest) is None:
        report = check_game(game_id)
        record(game_id, digest, report.as_record())
        reload_catalogue()
        verdict = "PASS" if report.passed else "FAIL"
        tell(
            f"checked {game_id} with the conformance kit (first use of this source): "
            f"{verdict} {report.score()}"
        )
        spec = get_spec(game_id)
    if spec.available or not (spec.reason or "").startswith(CONFORMANCE_REASON):
        return
    if allow:
        allow_failing([game_id])
        tell(f"{game_id} {spec.reason}; playing it anyway (--allow-failing)")
        return
    raise ValueError(
        f"{game_id} {spec.reason}; fix the game (arena check-game {game_id} shows the "
        "whole report) or pass --allow-failing to play it anyway"
    )
