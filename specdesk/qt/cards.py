"""The headline figures above the plots: tokens/s, acceptance, tokens per step, speed-up vs plain."""

from __future__ import annotations

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget


class MetricCard(QFrame):
    def __init__(self, title: str, tip: str, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        self.setToolTip(tip)
        self.title = QLabel(title)
        self.title.setObjectName("cardTitle")
        self.value = QLabel("–")
        self.value.setObjectName("cardValue")
        self.detail = QLabel("")
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
