"""One model built at a time in a process.

transformers builds a checkpoint's model on empty ("meta") weights by patching torch
process-wide while it loads, so a module built on another thread meanwhile (a second model,
LoRA adapters) would get meta weights and fail later with "Cannot copy out of meta tensor".
Every place that builds modules holds ``BUILD_LOCK`` while it does.
"""

from __future__ import annotations

import threading

BUILD_LOCK = threading.RLock()
"""Held while a model, a copy of one or its adapters are built."""
