"""The headline figures above the plots: tokens/s, acceptance, tokens per step, speed-up vs plain."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

VALUE_PT = 17  # theme.py's cardValue size: the most a figure takes
MIN_VALUE_PT = 9


class FitLabel(QLabel):
    """A label that never clips its text in a narrow card (a small window, a wide plot pane): the figure shrinks
    (``shrink``), anything else ends in … with the whole text as its tooltip. ``text()`` is always the whole text."""

    def __init__(self, text: str = "", shrink: bool = False, tip: bool = True) -> None:
        super().__init__(text)
        self._full = text
        self._shrink = shrink
        self._tip = tip  # False: the caller keeps a tooltip of its own
        self._pt = VALUE_PT

    def text(self) -> str:  # noqa: D102 - the whole text, whatever is shown
        return self._full

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        self._full = text
        self._fit()

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._fit()

    def sizeHint(self) -> QSize:  # noqa: N802 - the whole text's width: eliding must not shrink the hint in turn
        hint = super().sizeHint()
        if self._shrink:
            return hint
        m = self.contentsMargins()
        return QSize(self.fontMetrics().horizontalAdvance(self._full) + m.left() + m.right() + 2, hint.height())

    def _fit(self) -> None:
        width = self.contentsRect().width()
        if width <= 0 or not self._full:
            QLabel.setText(self, self._full)
            return
        if self._shrink:
            font = QFont(self.font())
            pt = VALUE_PT
            while pt > MIN_VALUE_PT:
                font.setPointSize(pt)
                if QFontMetrics(font).horizontalAdvance(self._full) <= width:
                    break
                pt -= 1
            if pt != self._pt:  # a style of its own (the theme's style sheet sets the size, not setFont)
                self._pt = pt
                self.setStyleSheet("" if pt == VALUE_PT else f"font-size: {pt}pt;")
            QLabel.setText(self, self._full)
            return
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, width)
        QLabel.setText(self, shown)
        if self._tip:
            self.setToolTip(self._full if shown != self._full else "")


class MetricCard(QFrame):
    def __init__(self, title: str, tip: str, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        self.setToolTip(tip)
        self.title = FitLabel(title)
        self.title.setObjectName("cardTitle")
        self.value = FitLabel("–", shrink=True)
        self.value.setObjectName("cardValue")
        self.detail = FitLabel("")
        self.detail.setObjectName("muted")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 8, 12, 8)
        lay.setSpacing(0)
        lay.addWidget(self.title)
        lay.addWidget(self.value)
        lay.addWidget(self.detail)
        for label in (self.title, self.value, self.detail):
            # the figures change while decoding: their text must never widen (and so re-layout) the window
            label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            label.setMinimumWidth(40)

    def set(self, value: str, detail: str = "") -> None:
        self.value.setText(value)
        self.detail.setText(detail)


class MetricCards(QWidget):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.tps = MetricCard("Tokens / s", "New tokens per second of decoding (prefill excluded)")
        self.acceptance = MetricCard("Acceptance", "Draft tokens the target accepted / draft tokens proposed")
        self.per_step = MetricCard("Tokens / step", "Tokens emitted per target forward pass (1.00 = plain decoding)")
        self.speedup = MetricCard("vs plain", "Speed-up against plain decoding of the same prompt "
                                              "(press “Compare with plain decoding”)")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(8)
        for c in (self.tps, self.acceptance, self.per_step, self.speedup):
            lay.addWidget(c, 1)

    def show_figures(self, tokens: int, tps: float | None, acceptance: float | None, per_step: float | None,
                     steps: int) -> None:
        self.tps.set(f"{tps:.1f}" if tps else "–", f"{tokens} tokens")
        self.acceptance.set(f"{acceptance:.0%}" if acceptance is not None else "–",
                            "no drafts" if acceptance is None else "accepted / drafted")
        self.per_step.set(f"{per_step:.2f}" if per_step else "–", f"{steps} target passes")

    def show_speedup(self, ratio: float | None, plain_tps: float | None = None, note: str = "") -> None:
        if ratio is None:
            self.speedup.set("–", note or "not measured")
        else:
            self.speedup.set(f"{ratio:.2f}×", note or f"plain {plain_tps:.1f} tok/s")
