"""The GUI's small parts on the real Qt platform (offscreen): word buffer, ring buffers, chat view, controls."""

from __future__ import annotations

import math

import pytest

from specdesk.core.errors import BadSetting
from specdesk.qt.chat import ChatView, Footer, Span, WordBuffer
from specdesk.qt.series import Ring, StepSeries


def test_word_buffer_flushes_only_whole_words_and_keeps_draft_flags():
    b = WordBuffer()
    assert b.push("de", True) == []  # no whitespace yet: nothing shown
    assert [(s.text, s.drafted) for s in b.push("f fi", True)] == [("def ", True)]
    out = b.push("bonacci(n):\n    ret", False)
    assert [(s.text, s.drafted) for s in out] == [("fi", True), ("bonacci(n):\n    ", False)]
    assert b.pending_text == "ret"
    out = b.push("urn n", True)
    assert "".join(s.text for s in out) == "return "
    assert [(s.text, s.drafted) for s in out] == [("ret", False), ("urn ", True)]
    assert [(s.text, s.drafted) for s in b.flush()] == [("n", True)]
    assert b.flush() == []


def test_word_buffer_never_loses_text():
    pieces = [("a", True), ("b c", False), ("", True), ("\n\n", True), ("xyz", False), (" q", True), ("r", False)]
    b = WordBuffer()
    shown = []
    for text, drafted in pieces:
        for s in b.push(text, drafted):
            assert s.text  # no empty spans
            shown.append(s.text)
        assert not "".join(shown) or "".join(shown)[-1].isspace()
    shown += [s.text for s in b.flush()]
    assert "".join(shown) == "".join(t for t, _ in pieces)


def test_ring_keeps_the_newest_points_in_order():
    r = Ring(4)
    assert len(r) == 0 and r.last is None
    for v in range(6):
        r.append(v)
    assert list(r.values()) == [2, 3, 4, 5] and r.last == 5
    r.append(None)
    assert math.isnan(r.values()[-1]) and len(r) == 4


def test_step_series_rates_and_histogram():
    s = StepSeries()
    s.add(elapsed_s=0.1, step_s=0.1, tokens=5, drafted=4, accepted=4, k=4)
    s.add(elapsed_s=0.2, step_s=0.1, tokens=1, drafted=4, accepted=0, k=4)
    s.add(elapsed_s=0.3, step_s=0.1, tokens=3, drafted=4, accepted=2, k=4)
    assert s.hist == [1, 0, 1, 0, 1] and sum(s.hist) == s.steps == 3
    assert s.acceptance_rate == pytest.approx(6 / 12)
    assert s.mean_accepted_length == pytest.approx(9 / 3)
    assert s.tps_cumulative.last == pytest.approx(9 / 0.3)
    assert list(s.acc_cumulative.values()) == pytest.approx([1.0, 0.5, 0.5])
    plain = StepSeries()
    plain.add(elapsed_s=0.1, step_s=0.1, tokens=1, drafted=0, accepted=0, k=0)
    assert plain.acceptance_rate is None and math.isnan(plain.acc_rolling.values()[0])


def test_chat_view_turns_footer_and_highlight_toggle(qtbot):
    chat = ChatView()
    qtbot.addWidget(chat)
    chat.add_user("x = ", "Prompt")
    chat.begin_reply("demo-target")
    chat.append_spans([Span("1 + ", True), Span("2\n", False)])
    footer = Footer(tokens=7, tokens_per_second=12.5, acceptance_rate=0.75, mean_accepted_length=2.5,
                    stop_reason="max_new_tokens", drafter="draft model, k=4")
    chat.end_reply(footer)
    reply = chat.turns[-1]
    assert reply.text == "1 + 2\n" and reply.drafted_text == "1 + "
    assert "7 tokens · 12.5 tok/s · acceptance 75% · 2.50 tokens/step" in chat.toPlainText()
    chat.set_highlight(False)  # a redraw from the turns: same text
    assert "1 + 2" in chat.toPlainText() and chat.turns[-1].footer == footer
    from dataclasses import replace

    chat.set_footer(chat.last_reply_index(), replace(footer, plain_tokens_per_second=5.0, identical_to_plain=True))
    assert "2.50× vs plain (5.0 tok/s, same output)" in chat.toPlainText()
    assert "prompt" not in footer.text()  # no prefill figures given, none shown
    later = replace(footer, prompt_tokens=596, kept_tokens=578, prefill_seconds=0.029)
    assert "draft model, k=4 · prompt 596 tokens, 578 kept, read in 29 ms" in later.text()
    first = replace(later, prompt_tokens=46, kept_tokens=0, prefill_seconds=0.034)
    assert "prompt 46 tokens, read in 34 ms" in first.text()


def test_controls_make_validated_settings(qtbot):
    from specdesk.qt.controls import ControlsPanel

    c = ControlsPanel()
    qtbot.addWidget(c)
    assert c.k() == "auto"  # the default: adaptive k
    assert c.settings().tree == ()  # and a plain chain, as the CLI
    c.set_values({"k": "auto", "temperature": 0.7, "top_k": 40, "top_p": 0.9, "max_new_tokens": 33, "seed": 5})
    s = c.settings()
    assert (s.k, s.temperature, s.top_k, s.top_p, s.max_new_tokens, s.seed) == ("auto", 0.7, 40, 0.9, 33, 5)
    assert c.values()["k"] == "auto"
    c.set_values({"k": 3, "seed": None, "top_k": "junk"})  # malformed values keep the current one
    assert c.settings().k == 3 and c.settings().seed is None and c.settings().top_k == 40
    c.set_values({"tree": "4,2"})
    assert c.settings().tree == (4, 2) and c.values()["tree"] == "4,2"
    c.set_values({"tree": "7,7"})  # not a choice: kept
    assert c.settings().tree == (4, 2)
    c.set_available_drafters(("ngram", "none"), "model")
    assert c.drafter() == "ngram" and not c.tree_box.isEnabled()
    c.set_available_drafters(("ngram", "none"), "none")
    assert c.drafter() == "none" and not c.k_box.isEnabled()
    with pytest.raises(BadSetting):
        from specdesk.core.settings import GenerationSettings

        GenerationSettings(max_new_tokens=0)
