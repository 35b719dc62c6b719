"""Chat mode: a target with a chat template gets the conversation through it, turn after turn."""

from __future__ import annotations

import json
import shutil

TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def test_chat_template_models_chat_in_turns(qtbot, tmp_path, monkeypatch, tiny_target, tiny_draft):
    from specdesk.core.sessionlog import read_log
    from specdesk.qt.main_window import MainWindow
    from specdesk.qt.worker import LoadRequest

    monkeypatch.setenv("SPECDESK_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setenv("SPECDESK_DATA_DIR", str(tmp_path / "data"))
    chatty = tmp_path / "chatty"
    shutil.copytree(tiny_target, chatty)
    cfg = json.loads((chatty / "tokenizer_config.json").read_text())
    cfg["chat_template"] = TEMPLATE
    (chatty / "tokenizer_config.json").write_text(json.dumps(cfg))

    win = MainWindow()
    qtbot.addWidget(win)
    with qtbot.waitSignal(win.engine_ready, timeout=240_000) as b:
        win.load_pair(LoadRequest(str(chatty), str(tiny_draft), "model", device="cpu"))
    assert b.args[0].chat_template and "chat mode" in win.mode_label.text()
    win.controls.max_new.setValue(6)
    win.input.setPlainText("")  # chat mode needs a message: an empty one is not sent
    win.send()
    assert win.state == "idle" and not [t for t in win.chat.turns if t.role in ("user", "assistant")]
    assert win.input.placeholderText().startswith("Message chatty")  # the hint matches the mode
    replies, kept = [], []
    for text in ("hello", "and again"):
        win.input.setPlainText(text)
        with qtbot.waitSignal(win.reply_done, timeout=240_000) as b:
            win.send()
        replies.append(b.args[0].text)
        kept.append(b.args[0].stats.cached_prompt_tokens)
    # the second turn reads only what follows the first turn's prompt and reply: the reply's footer says so
    assert kept[0] == 0 and kept[1] > 0
    assert f"{kept[1]} kept, read in" in win.chat.turns[win.chat.last_reply_index()].footer.text()
    assert win._history == [("user", "hello"), ("assistant", replies[0]), ("user", "and again"),
                            ("assistant", replies[1])]
    assert [t.role for t in win.chat.turns if t.role in ("user", "assistant")] == ["user", "assistant"] * 2
    log = read_log(win.log_path)
    g = log.generations
    assert len(g) == 2 and isinstance(g[1].info["prompt"], list)  # the templated token ids
    from specdesk.qt.export import generation_summary, report_html

    assert [generation_summary(x)["kept_prompt_tokens"] for x in g] == kept  # the log and its report say so too
    assert f"({kept[1]} kept)" in report_html(log, plots=False)
    assert g[1].info["prompt_tokens"] == len(g[1].info["prompt"]) > g[0].info["prompt_tokens"]
    win.close()
