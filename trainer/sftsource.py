"""What ``arena train --sft-from SOURCE`` names, read from its text in one place
(``SftSource.parse``), and the checks of the supervised warm start's settings
(``check_sft``, which ``TrainConfig.validate`` runs before any work).

SOURCE is either a query over the run's database, ``db:KEY=VALUE,...`` with the keys of
``arena export``'s query (``storage.export.ExportQuery.parse``:
``db:game=TicTacToe-v0,player=optimal``), or a dataset that ``arena export`` wrote: a
``.jsonl``, ``.jsonl.gz`` or ``.parquet`` file, its shards, or a glob pattern
(``storage.exportread.dataset_files``). Every error is one line that starts with
``--sft-from`` (or the option at fault) and says what to do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from storage.export import BadQuery, ExportQuery
from storage.exportread import dataset_files
from storage.exportschema import RESULTS

DB_SOURCE = "db:"
"""What starts a SOURCE that is a query over the run's database."""


@dataclass(frozen=True)
class SftSource:
    """Where the supervised warm start's answers come from."""

    text: str
    """The SOURCE as given."""
    query: ExportQuery | None = None
    """A ``db:`` source's query (its games: the run's, where it names none)."""
    files: tuple[Path, ...] = ()
    """An export's files, in order (none for a ``db:`` source)."""

    @classmethod
    def parse(cls, text: str, games: Sequence[str], option: str = "--sft-from") -> SftSource:
        """The source ``text`` names, for a run of ``games``, given as ``option``. Raises
        ValueError (one line, starting with ``option``)."""
        given = text.strip()
        if given.startswith(DB_SOURCE):
            try:
                query = ExportQuery.parse(given[len(DB_SOURCE) :], games=games)
            except BadQuery as exc:
                raise ValueError(f"{option} {given!r}: {exc}") from None
            other = [g for g in query.games if g not in games]
            if other:
                raise ValueError(
                    f"{option} {given!r}: {other[0]} is not a game of this run "
                    f"({', '.join(games)}); its answers would teach nothing it plays"
                )
            return cls(given, query=query)
        if not given:
            raise ValueError(
                f"{option} is empty: give an export file (ttt.parquet, ttt.jsonl) or a "
                "query, db:game=GAME,player=NAME"
            )
        try:
            files = dataset_files(given)
        except ValueError as exc:
            raise ValueError(
                f"{option} {given!r}: {exc}; give a file written by `arena export` "
                "or a query, db:game=GAME,player=NAME"
            ) from None
        return cls(given, files=tuple(files))


class SftSettings(Protocol):
    """The settings ``check_sft`` reads (``TrainConfig``'s)."""

    @property
    def sft_from(self) -> str | None: ...
    @property
    def sft_seats(self) -> tuple[str, ...]: ...
    @property
    def sft_results(self) -> tuple[str, ...]: ...
    @property
    def sft_steps(self) -> int: ...
    @property
    def sft_batch(self) -> int: ...
    @property
    def sft_learning_rate(self) -> float | None: ...
    @property
    def games(self) -> tuple[str, ...]: ...
    def resolved_format(self) -> str: ...


def check_sft(config: SftSettings) -> SftSource | None:
    """The source of a run's supervised warm start (None without one), once its settings
    (``TrainConfig``'s ``sft_*`` fields) are checked against each other and the run's games
    and observation format. Raises ValueError (one line naming the option at fault)."""
    if config.sft_from is None:
        if config.sft_seats or config.sft_results:
            raise ValueError("--sft-seats and --sft-results choose what --sft-from teaches")
        return None
    parsed = SftSource.parse(config.sft_from, config.games)
    view = config.resolved_format()
    if parsed.query is None and view != "full":
        raise ValueError(
            f"--sft-from {parsed.text!r}: an export file holds the full chat, and this run "
            f"shows its seats the {view} view; use a query over the database, "
            "which rebuilds any view (db:game=GAME,player=NAME)"
        )
    wrong = [r for r in config.sft_results if r not in RESULTS]
    if wrong:
        choices = ", ".join(RESULTS)
        raise ValueError(f"--sft-results: unknown result {wrong[0]!r}; choose from {choices}")
    if config.sft_steps < 1 or config.sft_batch < 1:
        raise ValueError(
            "--sft-steps and --sft-batch must be 1 or more, not "
            f"{config.sft_steps} and {config.sft_batch}"
        )
    rate = config.sft_learning_rate
    if rate is not None and rate <= 0:
        raise ValueError(f"--sft-learning-rate must be positive, not {rate}")
    return parsed


class OffPolicySettings(Protocol):
    """The settings ``check_offpolicy`` reads (``TrainConfig``'s)."""

    @property
    def offpolicy_from(self) -> str | None: ...
    @property
    def offpolicy_share(self) -> float: ...
    @property
    def offpolicy_clip(self) -> float: ...
    @property
    def offpolicy_seats(self) -> tuple[str, ...]: ...
    @property
    def games(self) -> tuple[str, ...]: ...
    def resolved_format(self) -> str: ...


def check_offpolicy(config: OffPolicySettings) -> SftSource | None:
    """The source of a run's off-policy answers in RL (``trainer.offpolicy``; None without
    one, or with a share of 0), once its settings (``TrainConfig``'s ``offpolicy_*``
    fields) are checked. Raises ValueError (one line naming the option at fault)."""
    share, clip = config.offpolicy_share, config.offpolicy_clip
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"--offpolicy-share must be between 0 (off) and 1, not {share}")
    if not 0.0 <= clip <= 1.0:
        raise ValueError(f"--offpolicy-clip must be between 0 and 1, not {clip}")
    if config.offpolicy_from is None:
        if config.offpolicy_seats:
            raise ValueError("--offpolicy-seats chooses whose answers --offpolicy-from adds")
        return None
    parsed = SftSource.parse(config.offpolicy_from, config.games, "--offpolicy-from")
    view = config.resolved_format()
    if parsed.query is None and view != "full":
        raise ValueError(
            f"--offpolicy-from {parsed.text!r}: an export file holds the full chat, and this "
            f"run shows its seats the {view} view; use a query over the database, "
            "which rebuilds any view (db:game=GAME,player=NAME)"
        )
    return parsed if share > 0 else None
