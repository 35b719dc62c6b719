"""The app with a GGUF file: listed by the model picker from LM Studio's folder, converted on first load with
the progress in the loading dialog, then chatting through the file's own chat template."""

from __future__ import annotations

from ggufwrite import CHAT_TEMPLATE, lmstudio_layout, write_gguf


def test_app_lists_loads_and_chats_with_a_gguf(qtbot, tmp_path, monkeypatch, tiny_target):
    from specdesk.core.sessionlog import read_log
    from specdesk.qt.main_window import MainWindow
    from specdesk.qt.model_picker import ModelPickerDialog
    from specdesk.qt.worker import LoadRequest

    home = tmp_path / "home"
    for var, value in (("HOME", home), ("SPECDESK_CONFIG_DIR", tmp_path / "cfg"),
                       ("SPECDESK_DATA_DIR", tmp_path / "data"), ("HF_HUB_CACHE", tmp_path / "empty-hub"),
                       ("OLLAMA_MODELS", tmp_path / "no-ollama"), ("LLAMA_CACHE", tmp_path / "no-llamacpp")):
        monkeypatch.setenv(var, str(value))
    gguf = lmstudio_layout(home, write_gguf(tiny_target, tmp_path / "tiny-chat-Q8_0.gguf", "Q8_0",
                                            chat_template=CHAT_TEMPLATE))

    picker = ModelPickerDialog(current=LoadRequest(str(gguf), None, "ngram"))
    qtbot.addWidget(picker)
    qtbot.waitUntil(lambda: not picker.busy, timeout=120_000)
    rows = {picker.table.item(r, 0).toolTip(): r for r in range(picker.table.rowCount())}
    r = rows[str(gguf)]
    assert picker.table.item(r, 0).text() == "tiny-chat-Q8_0.gguf"  # the file's name; its path in the tooltip
    assert picker.table.item(r, 1).text() == "lmstudio"
    assert picker.table.item(r, picker.COLUMNS.index("Status")).text().startswith("ready (GGUF Q8_0")
    assert picker.table.item(r, picker.COLUMNS.index("Chat")).text() == "yes"
    assert picker.choice().target == str(gguf)

    win = MainWindow()
    qtbot.addWidget(win)
    said: list[str] = []
    win.worker.progress.connect(said.append)
    with qtbot.waitSignal(win.engine_ready, timeout=240_000) as b:
        win.load_pair(LoadRequest(str(gguf), None, "ngram", device="cpu"))
    assert b.args[0].chat_template and "chat mode" in win.mode_label.text()
    assert any(m.startswith("Converting tiny-chat-Q8_0.gguf") and "100%" in m for m in said), said
    win.controls.max_new.setValue(5)
    win.input.setPlainText("hello")
    with qtbot.waitSignal(win.reply_done, timeout=240_000):
        win.send()
    log = read_log(win.log_path)
    assert log.header["target"]["gguf"]["file_type"] == "Q8_0"
    assert log.generations[0].info["chat_template"] is True
    win.close()
