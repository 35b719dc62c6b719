"""Speculative decoding's failure modes, shown above the chat as banners with their fix one click away.

- Drafting that slows a reply down: acceptance under the break-even for this pair's measured costs
  (:mod:`specdesk.core.payoff`) -> use k = auto, switch to prompt lookup, or decode plainly.
- Memory: a prompt + reply the planner says will not fit (:mod:`specdesk.core.plan.check`, run by the
  worker before it starts) -> send anyway, a shorter reply that fits, or the planner; and an out-of-memory
  during a reply (the worker ended it and freed its memory) -> the planner, or a new chat.
- Acceptance drifting down over a conversation (:mod:`specdesk.core.drift`) -> a new chat, k = auto, or
  prompt lookup.

The judging is core's; this module keeps the monitors fed with the window's events, draws the banners,
and turns a click into a signal the window acts on.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from specdesk.core.drift import AcceptanceDrift
from specdesk.core.pairing import MODEL_DRAFTERS
from specdesk.core.payoff import PayoffMonitor
from specdesk.qt import theme

JUDGE_EVERY = 8  # steps between verdicts while a reply streams (a verdict is ~50 us; a repaint is not)
_COLOURS = {"warn": (theme.WARN, "#3a3020"), "error": (theme.ERROR, "#3a2224"), "info": (theme.ACCENT, "#1d2b44")}


class Banner(QFrame):
    """A coloured strip: a title, one or two lines of text, action buttons and a close button."""

    def __init__(self, kind: str = "warn", parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        self.title = QLabel()
        self.title.setObjectName("bannerTitle")
        self.text = QLabel()
        self.text.setWordWrap(True)
        self.text.setTextFormat(Qt.TextFormat.RichText)
        self.close_button = QPushButton("✕")
        self.close_button.setObjectName("bannerClose")
        self.close_button.setToolTip("Dismiss")
        self.close_button.setFixedWidth(28)
        self.close_button.clicked.connect(self.hide)
        self._actions = QHBoxLayout()
        self._actions.setSpacing(6)
        head = QHBoxLayout()
        head.addWidget(self.title, 1)
        head.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignTop)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 8, 8, 8)
        lay.setSpacing(4)
        lay.addLayout(head)
        lay.addWidget(self.text)
        lay.addLayout(self._actions)
        self.buttons: dict[str, QPushButton] = {}
        self.kind = ""
        self.set_kind(kind)
        self.hide()

    def set_kind(self, kind: str) -> None:
        if kind == self.kind:
            return
        self.kind = kind
        edge, bg = _COLOURS[kind]
        self.setStyleSheet(f"QFrame#banner {{ background: {bg}; border: 1px solid {edge}; border-left: 4px solid "
                           f"{edge}; border-radius: 6px; }} QLabel {{ background: transparent; }} "
                           f"QLabel#bannerTitle {{ color: {edge}; font-weight: 600; }} "
                           f"QPushButton {{ padding: 3px 10px; }} "
                           f"QPushButton#bannerClose {{ border: none; background: transparent; padding: 0; }}")

    def show_message(self, title: str, text: str, actions: list[tuple[str, Callable[[], None]]] = (),
                     kind: str | None = None) -> None:
        if kind:
            self.set_kind(kind)
        self.title.setText(title)
        self.text.setText(text)
        while self._actions.count():
            item = self._actions.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        self.buttons = {}
        for label, slot in actions:
            b = QPushButton(label)
            b.clicked.connect(slot)
            self._actions.addWidget(b)
            self.buttons[label] = b
        self._actions.addStretch(1)
        self.show()


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class HealthBanners(QWidget):
    """The banners above the chat, and the monitors behind them (one loaded pair's worth)."""

    use_k_auto = Signal()
    use_drafter = Signal(str)
    new_chat = Signal()
    open_planner = Signal()
    send_anyway = Signal()
    shorter_reply = Signal(int)  # max new tokens that fit

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.slow = Banner("warn")
        self.memory = Banner("warn")
        self.oom = Banner("error")
        self.drift_banner = Banner("warn")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(6)
        for b in (self.oom, self.memory, self.slow, self.drift_banner):
            lay.addWidget(b)
        self.payoff = PayoffMonitor()
        self.drift = AcceptanceDrift()
        self.drafters: tuple[str, ...] = ()
        self.k: int | str = "auto"
        self.replying = False
        self._steps = 0

    # ---------------------------------------------------------------- what the window tells

    def pair_loaded(self, drafters: tuple[str, ...]) -> None:
        """New models: their costs are learnt afresh."""
        self.payoff = PayoffMonitor()
        self.drafters = tuple(drafters)
        self.conversation_reset()
        for b in (self.slow, self.memory, self.oom):
            b.hide()

    def conversation_reset(self) -> None:
        self.drift.reset()
        self.drift_banner.hide()

    def reply_started(self, drafter: str, k: int | str) -> None:
        self.payoff.begin(drafter)
        self.k = k
        self.replying = True
        self._steps = 0
        for b in (self.slow, self.memory, self.oom):
            b.hide()

    def plain_started(self) -> None:
        """Compare with plain decoding: its steps teach the cost of plain decoding."""
        self.payoff.begin("none")

    def step(self, drafted: int, accepted: int, draft_s: float, verify_s: float, context_len: int,
             setup_s: float = 0.0, lookup: bool = False) -> None:
        self.payoff.observe(drafted, accepted, draft_s, verify_s, context_len, setup_s, lookup)
        self._steps += 1
        if self._steps % JUDGE_EVERY == 0:
            self.judge()

    def reply_finished(self, drafter: str, k: int | str, greedy: bool, drafted: int, accepted: int) -> None:
        self.replying = False
        self.judge()
        if drafter in MODEL_DRAFTERS:
            d = self.drift.add_reply((drafter, k, greedy), drafted, accepted)
            if d is not None and d.alarm:
                self._show_drift(d)
            elif d is not None and not d.alarm:
                self.drift_banner.hide()

    # ---------------------------------------------------------------- drafting that does not pay

    def judge(self):
        """Re-read the current reply's payoff; show or hide the banner. Returns the verdict (or None)."""
        v = self.payoff.verdict()
        if v is None or self.payoff.drafter in (None, "none"):
            return v
        if v.slowing:
            self._show_slow(v)
        elif self.slow.isVisible() and self.slow.kind == "warn":
            self.slow.hide()
        return v

    def compared(self, ratio: float | None) -> None:
        """A comparison measured the reply against plain decoding side by side. Where the banner still warns from
        the reply's own costs (read while it ran: the first reply after a load runs cold) and the measurement says
        drafting paid, the measurement is what the user is told (the app's offscreen check showed "about 0.98x" in
        the banner above a measured 1.14x)."""
        if ratio is None or ratio < 1.0 or not (self.slow.isVisible() and self.slow.kind == "warn"):
            return
        self.slow.show_message("Drafting paid on this reply after all",
                               f"Measured side by side with plain decoding it ran at <b>{ratio:.2f}×</b> its speed; "
                               f"the warning was an estimate from the costs the reply met as it ran.", kind="info")

    def _lighter(self) -> tuple[str, str, str] | None:
        """(button, drafter, words) of the drafter that runs no model, where the pair has one: the model's own phrases
        (a distilled draft's table, with prompt lookup; 1.10x of plain on chat where lookup alone ran 1.00x), else
        prompt lookup."""
        if "phrases" in self.drafters:
            return "Switch to the model's phrases", "phrases", "the model's phrases with prompt lookup"
        if "ngram" in self.drafters:
            return "Switch to prompt lookup", "ngram", "prompt lookup"
        return None

    def _fixes(self, current: str) -> list[tuple[str, Callable[[], None]]]:
        out = []
        if self.k != "auto":
            out.append(("Use k=auto", lambda: self._applied("k = auto", self.use_k_auto.emit)))
        lighter = self._lighter()
        if current in MODEL_DRAFTERS and lighter is not None:
            label, name, what = lighter
            out.append((label, lambda: self._applied(what, lambda: self.use_drafter.emit(name))))
        if current != "none":
            out.append(("Decode plainly", lambda: self._applied("plain decoding", lambda: self.use_drafter.emit("none"))))
        return out

    def _show_slow(self, v) -> None:
        measured = "" if v.plain_measured else (" (plain decoding not measured yet: taken as no cheaper than "
                                                "the smallest verify pass)")
        where = "is under" if v.acceptance < v.break_even else "is only just over"  # the alarm falls 3 points over
        text = (f"Acceptance {v.acceptance:.0%} {where} the break-even {v.break_even:.0%} for this pair's "
                f"measured costs: {v.draft_ms:.2f} ms per drafted token, {v.verify_ms:.1f} ms to verify "
                f"{v.k + 1} positions, {v.plain_ms:.1f} ms per plain step{measured}. This reply runs at about "
                f"<b>{v.reply_speedup:.2f}×</b> the speed of plain decoding.")
        # inside the alarm's margin (it falls 3 points over the break-even) the reply may run level or a little
        # faster: say so, not "slowing" beside 1.02x
        title = "Drafting is slowing this reply" if v.reply_speedup < 1.0 else "Drafting barely pays in this reply"
        self.slow.show_message(title, text, self._fixes(v.drafter), kind="warn")

    def _applied(self, what: str, emit: Callable[[], None]) -> None:
        emit()
        still = " (this one goes on as it started)" if self.replying else ""
        self.slow.show_message("Applied", f"{_esc(what)} from the next reply{still}.", kind="info")

    # ---------------------------------------------------------------- acceptance drift

    def _show_drift(self, d) -> None:
        text = (f"Acceptance fell to <b>{d.recent:.0%}</b> over the latest replies, from {d.first:.0%} over the "
                f"first ones in this conversation; deployments of tuned pairs alert under {d.floor:.0%}. The "
                f"conversation has moved away from what the draft predicts well.")
        actions: list[tuple[str, Callable[[], None]]] = [("New chat", self.new_chat.emit)]
        if self.k != "auto":
            actions.append(("Use k=auto", self.use_k_auto.emit))
        lighter = self._lighter()
        if lighter is not None:
            actions.append((lighter[0], lambda: self.use_drafter.emit(lighter[1])))
        self.drift_banner.show_message("Acceptance is drifting down", text, actions)

    # ---------------------------------------------------------------- memory

    def memory_warning(self, fit) -> None:
        """The worker did not start a reply the planner says will not fit."""
        advice = "".join(f"<li>{_esc(a)}</li>" for a in fit.advice)
        detail = fit.detail()
        text = _esc(detail[:1].upper() + detail[1:]) + (f"<ul style='margin: 2px 0 0 -20px'>{advice}</ul>"
                                                         if advice else "")
        actions: list[tuple[str, Callable[[], None]]] = [("Send anyway", self._send_anyway)]
        if fit.max_new_that_fit >= 1:
            n = fit.max_new_that_fit
            actions.append((f"Shorter reply ({n} tokens)", lambda: (self.memory.hide(), self.shorter_reply.emit(n))))
        actions.append(("Planner…", self.open_planner.emit))
        self.memory.show_message(f"Not sent: this reply may not fit in {fit.where}", text, actions, kind="warn")

    def _send_anyway(self) -> None:
        self.memory.hide()
        self.send_anyway.emit()

    def out_of_memory(self, message: str) -> None:
        self.replying = False
        text = (f"{_esc(message[:1].upper() + message[1:])}. The reply was stopped there and its memory freed; "
                f"the app is ready. A shorter reply, a New chat (a shorter context) or a smaller or quantized "
                f"model needs less (the planner shows what fits).")
        self.oom.show_message("Out of memory", text, [("Planner…", self.open_planner.emit),
                                                       ("New chat", self.new_chat.emit)], kind="error")
