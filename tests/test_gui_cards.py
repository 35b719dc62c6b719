"""The headline cards never clip: a figure shrinks to fit a narrow card, other text ends in … (tooltip: all of it)."""

from __future__ import annotations


def test_a_narrow_card_shrinks_its_figure_and_elides_its_detail(qtbot):
    from PySide6.QtGui import QFontMetrics
    from PySide6.QtWidgets import QApplication, QLabel

    from specdesk.qt import theme
    from specdesk.qt.cards import VALUE_PT, MetricCard

    theme.apply(QApplication.instance())
    card = MetricCard("Tokens / step", "tip")
    qtbot.addWidget(card)
    card.resize(400, 90)
    card.show()
    card.set("2.33×", "measuring plain decoding…")
    qtbot.wait(10)
    assert card.value.styleSheet() == "" and card.detail.toolTip() == ""  # room enough: as the theme draws it
    card.resize(70, 90)
    qtbot.waitUntil(lambda: card.value.styleSheet() != "", timeout=2000)
    shown = QFontMetrics(card.value.font()).horizontalAdvance("2.33×")
    assert shown <= card.value.contentsRect().width() and f"{VALUE_PT}pt" not in card.value.styleSheet()
    assert card.value.text() == "2.33×" and card.detail.text() == "measuring plain decoding…"  # the whole texts
    assert card.detail.toolTip() == "measuring plain decoding…"  # shown elided, whole on hover
    assert QLabel.text(card.detail).endswith("…")  # what it draws (FitLabel.text() is the whole text)


def test_a_chat_showing_its_end_keeps_showing_it_when_it_gets_shorter(qtbot):
    """A banner appearing above the chat makes it shorter: the newest text stays in view."""
    from specdesk.qt.chat import ChatView

    chat = ChatView()
    qtbot.addWidget(chat)
    chat.resize(500, 400)
    chat.show()
    for i in range(60):
        chat.add_notice(f"line {i}")
    bar = chat.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0 and bar.value() == bar.maximum(), timeout=2000)
    qtbot.wait(50)  # the appends' deferred scrolls done: only the resize may move the view now
    chat.resize(500, 250)
    qtbot.waitUntil(lambda: bar.value() == bar.maximum(), timeout=2000)
    qtbot.wait(50)  # the scroll's own deferred step done
    bar.setValue(0)  # a reader scrolled up: left where they are
    chat.resize(500, 200)
    qtbot.wait(50)
    assert bar.value() == 0
