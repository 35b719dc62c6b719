"""Loading models without Python's cyclic garbage collector, then freezing what was loaded.

A load creates hundreds of thousands of Python objects (transformers' modules, the tokenizer, imports), and the
collector's full passes over a growing heap ran 8 times during the app's load of SmolLM2 q4 with its draft, the
last ones ~130-190 ms each: ~0.7 s of a ~5 s load (2-core Intel Xeon). Paused for the load and run once after it
(~0.2 s), then with what the load made frozen (``gc.freeze``: kept out of every later pass), the engine loaded and
warmed up in 3.8-4.0 s against 4.2-4.3 s, and later full passes do not walk the model's objects again.

Frozen objects are never collected: before an engine is dropped, :func:`release_frozen` hands them back to the
collector, so the reference cycles of a dropped model are freed by the next collection.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body (a load) with the collector off; on success, collect once and freeze what is alive."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
    gc.collect()
    gc.freeze()


def release_frozen() -> None:
    """Let the collector see what earlier loads froze (call before dropping an engine, then collect)."""
    gc.unfreeze()
