"""Loads run without the cyclic collector and freeze what they made; dropping an engine hands it back."""

from __future__ import annotations

import gc
import weakref

from specdesk.core.gcload import collector_paused


class _Node:
    pass


def test_a_load_pauses_the_collector_then_freezes_and_a_release_lets_cycles_go():
    gc.unfreeze()
    with collector_paused():
        assert not gc.isenabled()
        kept = _Node()
        kept.me = kept  # a reference cycle made while loading, alive at the end: frozen
        gone = _Node()
        gone.me = gone  # garbage made while loading: collected once at the end, not frozen
        gone_ref = weakref.ref(gone)
        del gone
    assert gc.isenabled() and gc.get_freeze_count() > 0
    assert gone_ref() is None
    kept_ref = weakref.ref(kept)
    del kept
    gc.collect()
    assert kept_ref() is not None  # frozen: the collector does not look at it (a dropped engine would stay)
    gc.unfreeze()
    gc.collect()
    assert kept_ref() is None and gc.get_freeze_count() == 0


def test_a_failed_load_turns_the_collector_back_on_and_freezes_nothing():
    gc.unfreeze()
    try:
        with collector_paused():
            raise ValueError("bad checkpoint")
    except ValueError:
        pass
    assert gc.isenabled() and gc.get_freeze_count() == 0
