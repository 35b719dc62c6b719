"""Prompt lookup, stop conditions, cancellation, detokenization and the KV cache rollback."""

from __future__ import annotations

import threading
import pytest
import torch

from specdesk.core.detok import IncrementalDetokenizer
from specdesk.core.drafters import NgramDrafter
from specdesk.core.errors import BadSetting
from specdesk.core.events import DoneEvent, StepEvent
from specdesk.core.stops import StopStrings
from tests.conftest import PROMPTS


def lookup(ids, k, max_n=3, min_n=1):
    d = NgramDrafter(torch.device("cpu"), max_n=max_n, min_n=min_n)
    d.start(ids[:-1], 100)
    return d.lookup(ids, k)


def test_ngram_proposes_continuation_of_latest_match():
    #          0  1  2  3  4  5  6  7  8  9
    ids = [1, 2, 3, 9, 1, 2, 3, 7, 8, 1, 2, 3]
    assert lookup(ids, 2) == [7, 8]  # the latest earlier "1 2 3" is followed by 7 8
    # no occurrence is followed by 10 tokens: the one followed by the most (the earliest) wins
    assert lookup(ids, 10) == [9, 1, 2, 3, 7, 8, 1, 2, 3]
    assert lookup([5, 6, 7], 3) == []  # nothing repeats


def test_ngram_in_a_repeating_run_proposes_k_tokens():
    # the latest "5 5" ends right before the cursor; an occurrence 4 back still offers 4 tokens
    assert lookup([7] + [5] * 10, 4, max_n=2, min_n=2) == [5, 5, 5, 5]


def test_ngram_prefers_longer_matches_and_respects_min_n():
    ids = [4, 2, 3, 5, 1, 2, 3, 6, 0, 2, 3]
    # suffix "2 3": latest earlier occurrence at positions 5-6 -> 6 ; with "x 2 3" (n=3) no match
    assert lookup(ids, 1, max_n=3, min_n=2) == [6]
    assert lookup([1, 2, 9, 2], 2, max_n=3, min_n=2) == []  # a 1-gram match is below min_n
    assert lookup([1, 2, 9, 2], 2, max_n=3, min_n=1) == [9, 2]


def test_a_step_that_drafts_nothing_takes_the_one_empty_tensor(tiny_engine):
    """Plain steps (plain decoding, k=auto's plain steps, prompt lookup without a match) make no tensor: one made
    right after a pass cost ~40 us (a cold torch call), ~0.8% of a q4 SmolLM2 step. Each drafter hands out the same
    empty (0,) int64 tensor; a match still gets its own."""
    from specdesk.core.sampling import SamplingConfig

    cfg, ids = SamplingConfig(), [5, 6, 7, 5, 6]
    ngram, unmatched = NgramDrafter(torch.device("cpu")), NgramDrafter(torch.device("cpu"))
    ngram.start(ids[:-1], 100)
    unmatched.start([1, 2], 100)
    model, none = tiny_engine._drafter("model"), tiny_engine._drafter("none")
    empties = [unmatched.propose([1, 2, 3], 3, cfg, None).tokens, model.propose(ids, 0, cfg, None).tokens,
               none.propose(ids, 2, cfg, None).tokens, model.propose(ids, 0, cfg, None).tokens]
    assert all(t.shape == (0,) and t.dtype == torch.long for t in empties)
    assert all(t is empties[0] for t in empties)
    found = ngram.propose(ids, 3, cfg, None).tokens
    assert found.tolist() == [7, 5, 6] and found is not empties[0]


def test_ngram_index_is_incremental():
    d = NgramDrafter(torch.device("cpu"), max_n=2, min_n=1)
    d.start([], 100)
    ids = [1, 2, 3]
    assert d.lookup(ids, 2) == []
    ids += [1, 2]
    assert d.lookup(ids, 2) == [3, 1]
    ids += [5]
    assert d.lookup(ids, 2) == []
    ids += [1]
    assert d.lookup(ids, 3) == [2, 5, 1]  # the latest earlier "1" (index 3) was followed by 2 5 1


def test_stop_strings_cut_and_hold_back():
    s = StopStrings(("\n\n", "END"))
    assert s.feed("abc\n") == "abc"  # "\n" might start "\n\n": held
    assert s.feed("x E") == "\nx "  # released once it cannot be a stop; "E" held
    assert s.feed("ND more") == ""
    assert s.stopped


def test_detokenizer_streams_the_same_text_as_a_full_decode(tiny_engine):
    tok = tiny_engine.tokenizer
    text = "def naïve(x):\n    return 'é' * x  # ünïcödé ✓\n"
    ids = tok(text)["input_ids"]
    det = IncrementalDetokenizer(tok, [])
    pieces = [det.push(ids[i:i + 3]) for i in range(0, len(ids), 3)] + [det.flush()]
    assert "".join(pieces) == tok.decode(ids)
    assert all("\ufffd" not in p for p in pieces)


def test_streamed_text_equals_result_text(tiny_engine):
    steps, done = [], None
    for ev in tiny_engine.stream(PROMPTS[1], max_new_tokens=30, k=3):
        if isinstance(ev, StepEvent):
            steps.append(ev)
        elif isinstance(ev, DoneEvent):
            done = ev
    assert "".join(s.text for s in steps) + done.tail == done.text
    assert done.text == tiny_engine.decode_ids(list(done.token_ids))
    assert sum(len(s.token_ids) for s in steps) == done.stats.new_tokens == 30
    assert sum(s.accepted for s in steps) == done.stats.accepted


def test_stop_string_ends_generation(tiny_engine):
    full = tiny_engine.generate(PROMPTS[0], max_new_tokens=30, k=2)
    assert len(full.text) > 4
    stop = full.text[3:5]
    got = tiny_engine.generate(PROMPTS[0], max_new_tokens=30, k=2, stop=(stop,))
    assert got.stop_reason == "stop_string"
    assert got.text == full.text[: full.text.find(stop)]


def test_eos_ends_generation(tiny_engine):
    first = tiny_engine.generate(PROMPTS[0], max_new_tokens=5, k=2).token_ids
    # Make the second generated token count as EOS: generation must stop right after it.
    engine_eos = tiny_engine.target.eos_ids
    tiny_engine.target.eos_ids = frozenset({first[1]}) if first[0] != first[1] else frozenset({first[0]})
    try:
        got = tiny_engine.generate(PROMPTS[0], max_new_tokens=20, k=4)
    finally:
        tiny_engine.target.eos_ids = engine_eos
    assert got.stop_reason == "eos"
    assert got.token_ids[-1] in (first[0], first[1]) and len(got.token_ids) <= 2


def test_cancel_stops_within_one_step(tiny_engine):
    cancel = threading.Event()
    steps = 0
    done = None
    for ev in tiny_engine.stream(PROMPTS[0], max_new_tokens=200, k=4, cancel=cancel):
        if isinstance(ev, StepEvent):
            steps += 1
            if steps == 3:
                cancel.set()
        elif isinstance(ev, DoneEvent):
            done = ev
    assert steps == 3
    assert done.stop_reason == "cancelled"
    assert done.stats.target_forwards == 3


def test_cancel_from_another_thread(tiny_engine):
    cancel, started = threading.Event(), threading.Event()
    canceller = threading.Thread(target=lambda: (started.wait(30), cancel.set()))
    canceller.start()
    steps_after_cancel = []

    def on_event(ev):
        if isinstance(ev, StepEvent):
            started.set()
            if cancel.is_set():
                steps_after_cancel.append(ev.index)

    result = tiny_engine.generate(PROMPTS[0], max_new_tokens=1000, k=2, cancel=cancel, on_event=on_event)
    canceller.join()
    assert result.stop_reason == "cancelled"
    assert result.stats.new_tokens < 1000
    assert len(steps_after_cancel) <= 1  # a step already running finishes; no further step starts


def test_rollback_keeps_caches_consistent(tiny_engine):
    """After a generation with many rejections, the target cache holds exactly the committed tokens."""
    r = tiny_engine.generate(PROMPTS[3], max_new_tokens=25, k=8)
    assert r.stats.accepted < r.stats.drafted  # there were rejections to roll back
    runner = tiny_engine._runner
    prompt_len = len(tiny_engine.encode(PROMPTS[3]))
    # every committed token but the last is cached
    assert runner.cache_len == prompt_len + len(r.token_ids) - 1


@pytest.mark.parametrize("bad", [dict(max_new_tokens=0), dict(k=-1), dict(k=999), dict(temperature=-1),
                                 dict(top_p=0), dict(top_p=1.5), dict(top_k=-3), dict(seed=-5),
                                 dict(stop=("",))])
def test_bad_settings_are_refused(tiny_engine, bad):
    with pytest.raises(BadSetting):
        tiny_engine.generate("x", **bad)


def test_token_id_prompts_and_out_of_vocab(tiny_engine):
    ids = tiny_engine.encode(PROMPTS[0])
    assert tiny_engine.generate(ids, max_new_tokens=5).token_ids == tiny_engine.generate(PROMPTS[0], max_new_tokens=5).token_ids
    with pytest.raises(BadSetting, match="outside the vocabulary"):
        tiny_engine.generate([1, 2, 999_999], max_new_tokens=5)
