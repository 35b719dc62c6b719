"""Tools → Train a draft for this model…: the dialog runs a tiny distillation on its worker thread, shows progress,
ETA and the agreement curve, cancels with a checkpoint and resumes from it."""

from __future__ import annotations

from conftest import make_llama

SMALL = dict(train_prompts=16, held_out_prompts=8, max_new_tokens=12, answer_batch=8, layers=1, head_vocab=256,
             batch=2, eval_every=3, minutes=None)


def test_train_cancel_and_resume_from_the_dialog(qtbot, tmp_path):
    from specdesk.qt.distill_dialog import DistillDialog

    target = make_llama(tmp_path / "target", hidden=32, layers=2, heads=2, kv_heads=1, intermediate=64, seed=3)
    dlg = DistillDialog(None, str(target), overrides={**SMALL, "steps": 100_000, "checkpoint_s": 0.0})
    qtbot.addWidget(dlg)
    # a folder where a run was cancelled before it made anything (its settings only): Start, not Resume
    (tmp_path / "draft" / ".distill").mkdir(parents=True)
    (tmp_path / "draft" / ".distill" / "settings.json").write_text('{"kind": "eagle"}')
    dlg.out_edit.setText(str(tmp_path / "draft"))
    assert dlg.start_button.isEnabled() and not dlg.resume_button.isEnabled() and dlg.kind.isEnabled()
    dlg.start_button.click()
    assert dlg.cancel_button.isEnabled()
    qtbot.waitUntil(lambda: dlg.last_event is not None and dlg.last_event.phase == "train"
                    and dlg.last_event.step >= 4, timeout=60_000)
    assert "training" in dlg.progress.format() and "ETA" in dlg.progress.format()
    dlg.cancel_button.click()
    qtbot.waitUntil(lambda: not dlg.running, timeout=30_000)
    assert dlg.error is None and "cancelled" in dlg.last_event.message
    assert dlg.progress.format().startswith("stopped") and 0 < dlg.progress.value() < 1000
    assert not dlg.use_button.isEnabled()  # nothing finished to use
    stopped = dlg.last_event.step
    assert (tmp_path / "draft" / ".distill" / "checkpoint.pt").exists()
    assert dlg.resume_button.isEnabled() and not dlg.start_button.isEnabled()
    xs, ys = dlg.curve.getData()
    assert len(xs) >= 2 and all(0 <= y <= 1 for y in ys)  # the agreement curve, from step 0

    dlg.overrides["steps"] = stopped + 3
    dlg.resume_button.click()
    qtbot.waitUntil(lambda: not dlg.running, timeout=60_000)
    assert dlg.error is None and dlg.last_event.phase == "done" and dlg.last_event.step == stopped + 3
    assert dlg.progress.value() == 1000 and (tmp_path / "draft" / "model.safetensors").exists()
    assert dlg.use_button.isEnabled() and "Use it" in dlg.status.text()
    with qtbot.waitSignal(dlg.use_requested) as used:
        dlg.use_button.click()
    assert used.args == [(str(tmp_path / "draft"), None)]  # the target with the draft it trained


def test_an_eagle_head_from_the_dialog_and_resume_keeps_its_kind(qtbot, tmp_path):
    import json

    from specdesk.qt.distill_dialog import DistillDialog

    target = make_llama(tmp_path / "target", hidden=32, layers=2, heads=2, kv_heads=1, intermediate=64, seed=4)
    dlg = DistillDialog(None, str(target), overrides={**SMALL, "steps": 3})
    qtbot.addWidget(dlg)
    dlg.out_edit.setText(str(tmp_path / "head"))
    dlg.kind.setCurrentIndex(dlg.kind.findData("eagle"))
    seen = []
    dlg.progress.valueChanged.connect(lambda v: seen.append((dlg.last_event.phase, v)))
    dlg.start_button.click()
    qtbot.waitUntil(lambda: not dlg.running, timeout=60_000)
    assert dlg.error is None and dlg.last_event.phase == "done"
    cfg = json.loads((tmp_path / "head" / "config.json").read_text())
    assert cfg["specdesk"]["kind"] == "eagle-head"
    features = [v for phase, v in seen if phase == "features"]
    assert features and max(features) < 400  # the features phase fills its own share of the bar, not all of it
    again = DistillDialog(None, str(target))
    qtbot.addWidget(again)
    again.out_edit.setText(str(tmp_path / "head"))
    assert again.kind.currentData() == "eagle" and not again.kind.isEnabled() and again.resume_button.isEnabled()
    assert again.prompt_set.currentData() == "varied" and not again.prompt_set.isEnabled()  # the run's own set


def test_prompts_the_model_writes_itself_need_a_chat_template_and_the_dialog_says_so(qtbot, tmp_path):
    from specdesk.qt.distill_dialog import DistillDialog

    target = make_llama(tmp_path / "target", hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64, seed=5)
    dlg = DistillDialog(None, str(target), overrides={**SMALL, "steps": 3})
    qtbot.addWidget(dlg)
    dlg.out_edit.setText(str(tmp_path / "draft"))
    assert dlg.prompt_set.currentData() == "varied"  # the default
    dlg.prompt_set.setCurrentIndex(dlg.prompt_set.findData("self"))
    dlg.start_button.click()
    qtbot.waitUntil(lambda: not dlg.running, timeout=60_000)
    assert dlg.error is not None and "needs a target with a chat template" in dlg.error
    assert dlg.start_button.isEnabled() and not dlg.resume_button.isEnabled()  # nothing half-made to resume


def test_phrases_only_from_the_dialog(qtbot, tmp_path):
    """Kind "Phrases only": no training (the time box off), the target's own prompts proposed, the bar filled by
    answering; the table is written and kept for the target, and a resume keeps the kind."""
    from specdesk.core import phrases
    from specdesk.qt.distill_dialog import DistillDialog

    target = make_llama(tmp_path / "target", hidden=32, layers=2, heads=2, kv_heads=1, intermediate=64, seed=6)
    dlg = DistillDialog(None, str(target), overrides={**SMALL, "train_prompts": 48})
    qtbot.addWidget(dlg)
    dlg.out_edit.setText(str(tmp_path / "table"))
    dlg.kind.setCurrentIndex(dlg.kind.findData("phrases"))
    assert not dlg.minutes.isEnabled() and dlg.prompt_set.currentData() == "self"
    assert dlg.plot.isHidden() and "no training" in dlg.status.text()
    dlg.prompt_set.setCurrentIndex(dlg.prompt_set.findData("varied"))  # this tiny target has no chat template
    seen = []
    dlg.progress.valueChanged.connect(lambda v: seen.append((dlg.last_event.phase, v)))
    dlg.start_button.click()
    qtbot.waitUntil(lambda: not dlg.running, timeout=60_000)
    assert dlg.error is None and dlg.last_event.phase == "done" and "phrases" in dlg.last_event.message
    assert max(v for phase, v in seen if phase == "data") > 900  # answering fills the bar: nothing trains after
    assert (tmp_path / "table" / phrases.FILE).exists() and phrases.own_table_path(target).exists()
    assert not (tmp_path / "table" / "model.safetensors").exists()
    with qtbot.waitSignal(dlg.use_requested) as used:
        dlg.use_button.click()
    assert used.args == [(None, "phrases")]  # the target drafting with the table kept for it
    again = DistillDialog(None, str(target))
    qtbot.addWidget(again)
    again.out_edit.setText(str(tmp_path / "table"))
    assert again.kind.currentData() == "phrases" and not again.kind.isEnabled()
