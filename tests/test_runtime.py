"""arena.runtime.freeze_heap: what a long phase does once its set-up is done."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from arena.runtime import FULL_COLLECTION_EVERY, freeze_heap


class _Node:
    next: object = None


@pytest.fixture
def gc_state() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_freeze_heap_freezes_survivors_and_spaces_full_collections(gc_state: None) -> None:
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    assert gc.get_freeze_count() == 0
    survivor = [_Node() for _ in range(100)]  # tracked by the collector, as events are
    freeze_heap()
    assert gc.get_freeze_count() >= len(survivor)
    assert gc.get_threshold() == (700, 10, FULL_COLLECTION_EVERY)
    # What is made after the freeze is still collected: a fresh cycle dies young.
    node = _Node()
    node.next = node
    gone = weakref.ref(node)
    del node
    gc.collect(0)
    assert gone() is None


def test_freeze_heap_keeps_a_higher_cadence_and_a_disabled_collector(gc_state: None) -> None:
    gc.set_threshold(700, 10, 1000)
    freeze_heap()
    assert gc.get_threshold()[2] == 1000
    gc.set_threshold(0, 10, 10)  # threshold 0: the process turned automatic collection off
    freeze_heap()
    assert gc.get_threshold() == (0, 10, 10)
