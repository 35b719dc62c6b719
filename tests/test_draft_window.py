"""A draft model reads at most the last ``window`` tokens of a long prompt (drafters.CONTEXT_WINDOW): what it
proposes is exactly what a draft given only those tokens proposes, its buffers hold only them, a chat's next turn
keeps them until the conversation outgrows twice the window, and the output is the target's (greedy parity)."""

from __future__ import annotations

import pytest

from specdesk.core import drafters
from specdesk.core.samplingconfig import SamplingConfig
from tests.conftest import PROMPTS

GREEDY = SamplingConfig()


def long_ids(engine, n: int) -> list[int]:
    ids = []
    for p in PROMPTS * 8:
        ids += engine.encode(p)
    assert len(ids) >= n
    return ids[:n]


def test_a_long_prompts_start_is_left_out_and_the_proposals_are_those_of_its_end_alone(tiny_engine, monkeypatch):
    d = tiny_engine._model_drafter
    assert drafters.CONTEXT_WINDOW == 512 and d.window == drafters.CONTEXT_WINDOW  # the default
    monkeypatch.setattr(d, "window", 16)
    ids = long_ids(tiny_engine, 60)
    d.seq.release()
    d.start(ids[:-1], 100)
    windowed = d.propose(ids, 4, GREEDY, None).tokens.tolist()
    assert d.seq.length == 16 + len(windowed) and d.seq.decoder.capacity == 100 - (59 - 16)  # only the window
    d.commit(len(ids) + 1)  # the target kept the first drafted token: the draft's cache rolls back to it
    assert d.seq.length == len(ids) + 1 - 43
    d.seq.release()
    d.window = None
    d.start(ids[43:-1], 100)  # a draft given only the window's tokens
    assert d.propose(ids[43:], 4, GREEDY, None).tokens.tolist() == windowed
    d.seq.release()
    d.start(ids[:-1], 100)
    whole = d.propose(ids, 4, GREEDY, None).tokens.tolist()
    assert d.seq.length == 59 + len(whole)  # without a window: every token
    d.seq.release()


@pytest.mark.parametrize("k", [1, 4, "auto"])
def test_greedy_output_is_the_targets_with_a_window_and_a_chat_keeps_it(tiny_engine, monkeypatch, k):
    """The window's bookkeeping is checked at fixed k, which drafts every step; k=auto (which may have learned on
    this session's engine not to draft at all, and then has read nothing to keep) for the output alone."""
    d = tiny_engine._model_drafter
    monkeypatch.setattr(d, "window", 20)
    monkeypatch.setattr(tiny_engine, "reuse_cache", True)
    fixed = k != "auto"
    ids = long_ids(tiny_engine, 40)
    plain = tiny_engine.generate(ids, max_new_tokens=12, drafter="none").token_ids
    got = tiny_engine.generate(ids, max_new_tokens=12, drafter="model", k=k)
    assert got.token_ids == plain and (got.stats.drafted > 0 or not fixed)
    assert d._drop == 39 - 20
    # the next turn starts with this one: the draft keeps its window and reads only what is new
    turn = ids + got.token_ids + long_ids(tiny_engine, 5)
    plain2 = tiny_engine.generate(turn, max_new_tokens=12, drafter="none").token_ids
    got2 = tiny_engine.generate(turn, max_new_tokens=12, drafter="model", k=k)
    assert got2.token_ids == plain2
    assert d._drop == 39 - 20 or not fixed
    # grown past twice the window: read afresh from the last 20
    longer = turn + got2.token_ids
    got3 = tiny_engine.generate(longer, max_new_tokens=12, drafter="model", k=k)
    assert got3.token_ids == tiny_engine.generate(longer, max_new_tokens=12, drafter="none").token_ids
    assert d._drop == len(longer) - 1 - 20 or not fixed
    d.seq.release()
