"""The model picker and the planner dialog on real model folders (no model is loaded)."""

from __future__ import annotations

import math

import pytest
from PySide6.QtCore import Qt

from conftest import swapped_token_copy
from test_gguf_smollm2 import smollm2_gguf  # noqa: F401 - the cached-download fixture


@pytest.fixture()
def odd_draft(tmp_path, tiny_draft, monkeypatch):
    """A small draft whose tokenizer swaps ids 500 and 501: listed, refused, with the first mismatch."""
    monkeypatch.setenv("SPECDESK_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setenv("SPECDESK_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    odd = swapped_token_copy(tiny_draft, tmp_path / "odd-draft")
    from specdesk.core import userdirs

    userdirs.add_folder(odd)
    return odd.resolve()


def _items(dlg):
    out = []
    for i in range(dlg.draft_list.count()):
        it = dlg.draft_list.item(i)
        out.append((it.text(), it.data(Qt.ItemDataRole.UserRole), bool(it.flags() & Qt.ItemFlag.ItemIsEnabled)))
    return out


def test_picker_lists_models_and_says_why_a_draft_cannot_serve(qtbot, odd_draft):
    from specdesk.qt.model_picker import NGRAM, ModelPickerDialog
    from specdesk.qt.worker import LoadRequest

    dlg = ModelPickerDialog(current=LoadRequest("demo-target", "demo-draft", "model"))
    qtbot.addWidget(dlg)
    qtbot.waitUntil(lambda: not dlg.busy and bool(dlg.candidates), timeout=120_000)
    names = [dlg.table.item(r, 0).text() for r in range(dlg.table.rowCount())]
    assert {"demo-target", "demo-draft", odd_draft.name} <= set(names)  # a folder shows its name, not its path
    assert {"demo-target", "demo-draft", str(odd_draft)} <= {e.name for e in dlg.entries}
    items = _items(dlg)
    demo = next(i for i in items if i[1] == "demo-draft")
    assert demo[2]  # compatible: selectable
    odd = next(i for i in items if i[1] == str(odd_draft))
    assert not odd[2] and "token id 500" in odd[0]  # greyed, with the first mismatching token
    assert dlg.choice() == LoadRequest("demo-target", "demo-draft", "model")
    # what auto means for the chosen target on this machine (the demo pair: as stored; tests/test_gguf.py: the rule)
    assert dlg.target_quant.itemText(dlg.target_quant.findData("auto")) == "auto: as stored for this model"
    # and for the chosen draft (a distilled draft's "follows the target": tests/test_distill.py's resolve_draft_quant)
    assert dlg.draft_quant.itemText(dlg.draft_quant.findData("auto")) == "auto: as stored for this draft"
    assert not dlg.select_draft(str(odd_draft))  # an incompatible draft cannot be chosen
    assert dlg.select_draft(NGRAM) and dlg.choice().drafter == "ngram" and dlg.choice().draft is None
    assert dlg.draft_quant.itemText(dlg.draft_quant.findData("auto")) == "auto (q4 or q8 on a CPU)"  # no draft model
    dlg.target_quant.setCurrentIndex(dlg.target_quant.findData("nf4+dq"))
    c = dlg.choice()
    assert (c.target_quant, c.double_quant) == ("nf4", True)


def test_planner_use_this_applies_a_recommendation_to_the_picker(qtbot, odd_draft):
    from specdesk.qt.model_picker import ModelPickerDialog
    from specdesk.qt.planner_dialog import PlannerDialog
    from specdesk.qt.worker import LoadRequest

    picker = ModelPickerDialog(current=LoadRequest("demo-target", "demo-draft", "model"))
    qtbot.addWidget(picker)
    qtbot.waitUntil(lambda: not picker.busy and bool(picker.candidates), timeout=120_000)
    dlg = PlannerDialog(choice=picker.choice(), picker=picker, device="cpu", budget_bytes=64 * 2**30)
    qtbot.addWidget(dlg)
    qtbot.waitUntil(lambda: dlg.result is not None and "demo-draft" in dlg._candidates, timeout=120_000)
    assert dlg.result.fits and dlg.verdict.text().startswith("✓ Fits")
    # a budget just under the unquantized pair: it no longer fits; the recommendations do
    need = dlg.result.total_bytes / 2**30
    with qtbot.waitSignal(dlg.planned, timeout=60_000):
        dlg.budget.setValue(math.floor((need - 0.001) * 100) / 100)
    p = dlg.result
    assert not p.fits and dlg.verdict.text().startswith("✗ Does not fit")
    assert p.recommendations and all(r.total_bytes <= p.budget_bytes for r in p.recommendations)
    assert any(r.target_quant != "none" and r.drafter == "model" for r in p.recommendations)
    assert dlg.recs.rowCount() == len(p.recommendations) > 0
    # the Why column: what ranks each row so, short; the whole reason on hover
    assert dlg.recs.item(0, 6).text() == "best that fits" and dlg.recs.item(0, 6).toolTip() == p.recommendations[0].reason
    assert all(not dlg.recs.item(i, 6).text().startswith("below the one above") for i in range(dlg.recs.rowCount()))
    assert f"{p.max_context:,} tokens" in dlg.max_context.text() and p.max_context < p.context
    # pick a recommendation with a quantized target and apply it
    row = next(i for i, r in enumerate(p.recommendations) if r.target_quant != "none")
    rec = p.recommendations[row]
    dlg.recs.selectRow(row)
    assert dlg.use_button.isEnabled()
    with qtbot.waitSignal(dlg.use_requested) as b:
        dlg.use_selected()
    req = b.args[0]
    assert req.target_quant == rec.target_quant.split("+")[0] and req.drafter == rec.drafter
    chosen = picker.choice()
    assert (chosen.target_quant, chosen.drafter, chosen.draft) == (req.target_quant, req.drafter, req.draft)
    assert chosen.double_quant == rec.target_quant.endswith("+dq")


def test_the_draft_quantization_box_says_a_distilled_draft_follows_its_target(qtbot, tmp_path, monkeypatch,
                                                                              smollm2_gguf):  # noqa: F811
    """The bundled draft distilled for SmolLM2 follows its target's quantization whatever its own box says (the
    engine: q4 beside a q4 or q8 target, else the target's dtype): the box's auto item says so, and follows the
    target's box."""
    from specdesk.core import userdirs
    from specdesk.core.loading import bundled_models_dir
    from specdesk.qt.model_picker import ModelPickerDialog
    from specdesk.qt.worker import LoadRequest

    monkeypatch.setenv("SPECDESK_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setenv("SPECDESK_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    userdirs.add_folder(smollm2_gguf.parent)
    draft = bundled_models_dir() / "smollm2-135m-instruct-draft"
    dlg = ModelPickerDialog(current=LoadRequest(str(smollm2_gguf), str(draft), "model"))
    qtbot.addWidget(dlg)
    qtbot.waitUntil(lambda: not dlg.busy and bool(dlg.candidates), timeout=120_000)

    def says(box):
        return box.itemText(box.findData("auto"))

    assert dlg.choice().draft is not None and "smollm2-135m-instruct-draft" in dlg.choice().draft
    assert says(dlg.target_quant) == "auto: q4 for this model"
    assert says(dlg.draft_quant) == "auto: q4 (follows the target)"
    dlg.target_quant.setCurrentIndex(dlg.target_quant.findData("none"))
    assert says(dlg.draft_quant) == "auto: as the target (follows it)"
    dlg.target_quant.setCurrentIndex(dlg.target_quant.findData("q8"))
    assert says(dlg.draft_quant) == "auto: q4 (follows the target)"
