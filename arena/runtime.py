"""Process-wide settings for arena's long-running work (training, serving, benchmarks).

``freeze_heap()``: when a long phase starts, nearly everything alive (modules, the model,
the game catalogue: a few hundred thousand objects once torch, tinker and textarena are
loaded) lives as long as the process. Python's cyclic garbage collector would still walk
all of it at every full collection (about 0.1-0.2 s each on 2 cores, several a minute
during self-play, where games allocate fast). ``gc.freeze()`` moves those objects out of
its sight; objects made later are collected as usual.
"""

from __future__ import annotations

import gc


def freeze_heap() -> None:
    """Collect garbage now, then exempt every surviving object from later collections
    (``gc.freeze``). Call it when a long phase starts, after its set-up; calling it again
    later freezes what was added since."""
    gc.collect()
    gc.freeze()
