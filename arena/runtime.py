"""Process-wide settings for arena's long-running work (training, serving, benchmarks).

``freeze_heap()``: when a long phase starts, nearly everything alive (modules, the model,
the game catalogue: a few hundred thousand objects once torch, tinker and textarena are
loaded) lives as long as the process. Python's cyclic garbage collector would still walk
all of it at every full collection (about 0.1-0.2 s each on 2 cores, several a minute
during self-play, where games allocate fast). ``gc.freeze()`` moves those objects out of
its sight; objects made later are collected as usual.

It also makes full collections rarer (``FULL_COLLECTION_EVERY``). What a recorder or a
trainer keeps queued (tens of thousands of events, each with its messages: about 200,000
objects) outlives the young generations, and once the import-time heap is frozen, Python's
rule (a full collection once the objects promoted since the last one reach a quarter of
the old generation) fires every few thousand games and walks all of it again: about
0.15-0.4 s each, an event-loop stall, and a quarter of a millisecond per tic-tac-toe
game recorded (timed by ``gc.callbacks``). Raising the cadence took a 1,000-move game's
recorded/unrecorded speed from 0.34-0.35 to 0.61-0.72 and the recorder's own write rate
1.3-1.9x (``python -m bench.storage``, two alternating runs each). Young garbage is still
collected as often as before; only cycles that outlive the young generations wait longer.
"""

from __future__ import annotations

import gc

FULL_COLLECTION_EVERY = 100
"""Collections of the middle generation between two full ones, at least (Python's default
is 10)."""


def freeze_heap() -> None:
    """Collect garbage now, then exempt every surviving object from later collections
    (``gc.freeze``) and make full collections rarer (``FULL_COLLECTION_EVERY``, unless
    the process already set a higher one). Call it when a long phase starts, after its
    set-up; calling it again later freezes what was added since."""
    gc.collect()
    gc.freeze()
    young, middle, full = gc.get_threshold()
    if young and full < FULL_COLLECTION_EVERY:
        gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
