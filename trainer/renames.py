"""Old names that still work, all in one place: a training setting renamed to the
cookbook's name keeps its old name as a ``TrainConfig`` keyword argument, a ``config.json``
key (a run started before the rename resumes as it was) and an ``arena train`` option, with
a one-line note on stderr (docs/training.md, "Old names"). Light on purpose (the CLI's help
imports it)."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

RENAMED_FIELDS: dict[str, str] = {
    "steps": "num_batches",
    "groups_per_batch": "batch_size",
    "games_per_group": "group_size",
}
"""``TrainConfig``'s old field names and their names now (the cookbook's)."""


def renamed_note(old: str, new: str, where: str = "") -> None:
    """Print the one-line note that ``old`` is now called ``new`` to stderr; ``where``
    prefixes it (``"runs/x/config.json: "``)."""
    print(f"note: {where}{old} is now {new}; the old name still works", file=sys.stderr)


def upgrade_names(
    values: Mapping[str, Any], renamed: Mapping[str, str], where: str = ""
) -> dict[str, Any]:
    """``values`` (settings by name) with each old name of ``renamed`` (old -> new) changed
    to its new one, a note for each. Raises ValueError when a setting is given under both
    names with different values."""
    upgraded = dict(values)
    for old, new in renamed.items():
        if old not in upgraded:
            continue
        value = upgraded.pop(old)
        if new in upgraded and upgraded[new] != value:
            raise ValueError(f"{old} and {new} name the same setting: give {new} alone")
        renamed_note(old, new, where)
        upgraded[new] = value
    return upgraded


def accept_old_names(renamed: Mapping[str, str]) -> Callable[[type[T]], type[T]]:
    """A class decorator for a dataclass: its constructor also takes the old names of
    ``renamed`` (old -> new field name) as keyword arguments, with a note. The old names
    are not fields: ``dataclasses.replace``, ``asdict``, pickling and ``repr`` know the new
    ones only, and reading an old name as an attribute fails."""

    def decorate(cls: type[T]) -> type[T]:
        dataclass_init = cls.__init__
        where = f"{cls.__name__}'s "

        @functools.wraps(dataclass_init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            dataclass_init(self, *args, **upgrade_names(kwargs, renamed, where))

        setattr(cls, "__init__", __init__)  # noqa: B010 (mypy refuses a method assignment)
        return cls

    return decorate


def renamed_option(new_flag: str) -> type[argparse.Action]:
    """An argparse action for an option's old name: it stores the value as ``new_flag``
    does and prints a one-line note that the name changed."""

    class Renamed(argparse.Action):
        def __call__(
            self,
            parser: argparse.ArgumentParser,
            namespace: argparse.Namespace,
            values: Any,
            option_string: str | None = None,
        ) -> None:
            renamed_note(str(option_string), new_flag)
            setattr(namespace, self.dest, values)

    return Renamed
