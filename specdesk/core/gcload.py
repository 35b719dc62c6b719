"""Loading models without Python's cyclic garbage collector, then freezing what was loaded (``specdesk serve``).

A load creates hundreds of thousands of Python objects (transformers' modules, the tokenizer, imports), and the
collector's full passes over the growing heap ran 8 times while SmolLM2 q4 and its draft loaded, the last ones
~130-190 ms each. Paused for the load and run once after it (~0.2 s), then with what the load made frozen
(``gc.freeze``: kept out of every later pass), the engine loaded and warmed up in 3.8-4.0 s against 4.2-4.3 s
(2-core Intel Xeon), and later full passes do not walk the model's objects again.

Not in the desktop app: there the collector must not run on the engine's thread over objects the window made.
Tried there (frozen at load, unfrozen and collected on the engine thread when a pair was dropped), the collection
reached Qt objects of windows closed meanwhile and the GUI tests deadlocked on loading a second pair.

Frozen objects are never collected (``gc.unfreeze`` hands them back): fine for a server that keeps its engine
until it exits.
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

