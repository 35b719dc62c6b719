"""The VRAM fit planner dialog: will this pair fit, what takes the memory, and what would fit better.

A view over ``specdesk.core.plan.plan`` (pure arithmetic over the models' headers): every change of a
quantization, the context, k, the device or the budget re-plans at once, off the GUI thread, and the
newest answer wins. The budget is read from the device (NVML free memory, or available RAM) and can
be typed in, so it works on a machine with no GPU for a GPU that is not here.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QPainter, QPen
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QDialog, QDoubleSpinBox, QGridLayout, QHBoxLayout,
                               QHeaderView, QLabel, QPushButton, QSizePolicy, QSpinBox, QTableWidget,
                               QTableWidgetItem, QVBoxLayout, QWidget)

from specdesk.qt import theme
from specdesk.qt.model_picker import QUANT_LABELS, human_count, quant_label
from specdesk.qt.tasks import run_task
from specdesk.qt.worker import LoadRequest

GIB = 2**30
NGRAM, NONE = "__ngram__", "__none__"
SEGMENT_COLOURS = {"target weights": "#5b9cff", "target KV cache": "#8fb8ff", "draft weights": "#46d39a",
                   "draft KV cache": "#97e6c4", "transient peak": "#f2b84b", "overheads": "#8d96a5"}


def _gib(n: int | float | None) -> str:
    return "–" if n is None else f"{n / GIB:.2f} GiB"


def _mib_or_gib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if abs(n) < GIB else f"{n / GIB:.2f} GiB"


def segments(p) -> list[tuple[str, int]]:
    """The plan's total split into the parts the bar shows (they add up to ``p.total_bytes``)."""
    out = [("target weights", p.target.weight_bytes), ("target KV cache", p.target.kv_bytes)]
    if p.draft is not None:
        out += [("draft weights", p.draft.weight_bytes), ("draft KV cache", p.draft.kv_bytes)]
    out += [("transient peak", p.transient_bytes), ("overheads", sum(r.bytes for r in p.overhead_rows))]
    return out


class StackedBar(QWidget):
    """Horizontal bar: the parts of the estimate, stacked, against a line at the budget."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.parts: list[tuple[str, int]] = []
        self.budget = 0
        self.fits = True
        self.setMinimumHeight(118)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        return QSize(700, 118)

    def set_plan(self, parts: list[tuple[str, int]], budget: int, fits: bool) -> None:
        self.parts, self.budget, self.fits = parts, budget, fits
        self.update()

    def paintEvent(self, _event) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        w = self.width() - 24
        total = sum(b for _, b in self.parts)
        scale = max(total, self.budget, 1) * 1.06
        x0, y0, h = 12.0, 26.0, 30.0
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor(theme.PANEL_2))
        p.drawRoundedRect(QRectF(x0, y0, w, h), 5, 5)
        x = x0
        for label, b in self.parts:
            seg = w * b / scale
            p.setBrush(QColor(SEGMENT_COLOURS.get(label, theme.MUTED)))
            p.drawRect(QRectF(x, y0, max(seg, 0.0), h))
            x += seg
        if self.budget:
            bx = x0 + w * self.budget / scale
            p.setPen(QPen(QColor(theme.ERROR if not self.fits else theme.TEXT), 2))
            p.drawLine(int(bx), int(y0 - 8), int(bx), int(y0 + h + 4))
            font = QFont(self.font())
            font.setPointSizeF(8.5)
            p.setFont(font)
            text = f"budget {_gib(self.budget)}"
            tw = p.fontMetrics().horizontalAdvance(text)
            p.drawText(int(min(max(bx - tw / 2, x0), x0 + w - tw)), int(y0 - 11), text)
        # legend
        font = QFont(self.font())
        font.setPointSizeF(8.5)
        p.setFont(font)
        lx, ly = x0, y0 + h + 14
        for label, b in self.parts:
            text = f"{label} {_mib_or_gib(b)}"
            tw = p.fontMetrics().horizontalAdvance(text) + 26
            if lx + tw > x0 + w:
                lx, ly = x0, ly + 20
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(QColor(SEGMENT_COLOURS.get(label, theme.MUTED)))
            p.drawRoundedRect(QRectF(lx, ly, 11, 11), 2, 2)
            p.setPen(QColor(theme.TEXT))
            p.drawText(int(lx + 16), int(ly + 10), text)
            lx += tw
        p.end()


def _table(headers: tuple[str, ...]) -> QTableWidget:
    t = QTableWidget(0, len(headers))
    t.setHorizontalHeaderLabels(headers)
    t.verticalHeader().hide()
    t.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    t.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    t.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    t.setShowGrid(False)
    t.setWordWrap(False)
    t.verticalHeader().setDefaultSectionSize(24)
    return t


class PlannerDialog(QDialog):
    use_requested = Signal(object)  # LoadRequest from a recommendation
    planned = Signal(object)  # each new Plan (tests wait on it)

    def __init__(self, parent=None, choice: LoadRequest | None = None, picker=None, device: str | None = None,
                 k: int | str = 4, budget_bytes: int | None = None, tree: tuple[int, ...] = ()) -> None:
        super().__init__(parent)
        self._tree = tree  # the chat's draft-tree setting: its leaves are planned (core/tree.py)
        self.setWindowTitle("VRAM fit planner")
        self.resize(1080, 800)
        self.picker = picker
        choice = choice or LoadRequest()
        self.result = None  # the latest Plan
        self.error: str | None = None
        self._tag = 0
        self._candidates: list[str] = []
        self._target = choice.target

        # ------------------------------------------------------------ inputs
        self.target_box = QComboBox()
        self.target_box.addItem(choice.target, choice.target)
        self.target_quant = self._quant_box(quant_label(choice.target_quant, choice.double_quant))
        self.draft_box = QComboBox()
        self._fill_drafts(choice)
        self.draft_quant = self._quant_box(quant_label(choice.draft_quant, choice.double_quant))
        self.context = QSpinBox()
        self.context.setRange(0, 1 << 20)
        self.context.setSpecialValueText("model max / 4096")
        self.context.setSingleStep(256)
        self.context.setValue(0)
        self.k_box = QSpinBox()
        self.k_box.setRange(-1, 32)
        self.k_box.setSpecialValueText("auto")
        self.k_box.setValue(-1 if k == "auto" else int(k))
        self.device_box = QComboBox()
        self.device_box.addItem("GPU (cuda)", "cuda")
        self.device_box.addItem("CPU (system RAM)", "cpu")
        dev = device or (choice.device if choice.device != "auto" else None) or "cpu"
        self.device_box.setCurrentIndex(1 if dev == "cpu" else 0)
        self.budget = QDoubleSpinBox()
        self.budget.setRange(0.01, 4096)
        self.budget.setDecimals(2)
        self.budget.setSuffix(" GiB")
        self.budget.setSingleStep(1.0)
        self.budget_source = QLabel("")
        self.budget_source.setObjectName("muted")
        self.budget_source.setWordWrap(True)
        detect = QPushButton("Read from device")
        detect.setToolTip("Free GPU memory from NVML (or available RAM), plus what specdesk already holds")
        detect.clicked.connect(self.detect_budget)

        grid = QGridLayout()
        grid.setHorizontalSpacing(10)
        grid.setVerticalSpacing(6)
        row = 0
        for col, (name, w) in enumerate((("Target", self.target_box), ("Quantization", self.target_quant),
                                         ("Context (tokens)", self.context))):
            grid.addWidget(self._label(name), row, col * 2)
            grid.addWidget(w, row, col * 2 + 1)
        row += 1
        for col, (name, w) in enumerate((("Drafter", self.draft_box), ("Draft quantization", self.draft_quant),
                                         ("k", self.k_box))):
            grid.addWidget(self._label(name), row, col * 2)
            grid.addWidget(w, row, col * 2 + 1)
        row += 1
        grid.addWidget(self._label("Device"), row, 0)
        grid.addWidget(self.device_box, row, 1)
        grid.addWidget(self._label("Budget"), row, 2)
        bl = QHBoxLayout()
        bl.addWidget(self.budget, 1)
        bl.addWidget(detect)
        grid.addLayout(bl, row, 3)
        grid.addWidget(self.budget_source, row, 4, 1, 2)
        grid.setColumnStretch(1, 3)
        grid.setColumnStretch(3, 2)
        grid.setColumnStretch(5, 1)

        # ------------------------------------------------------------ results
        self.verdict = QLabel("Planning…")
        self.verdict.setObjectName("title")
        self.verdict.setWordWrap(True)
        self.bar = StackedBar()
        self.max_context = QLabel("")
        self.max_context.setWordWrap(True)
        self.notes = QLabel("")
        self.notes.setObjectName("muted")
        self.notes.setWordWrap(True)
        self.breakdown = _table(("Part", "Item", "Bytes"))
        bh = self.breakdown.horizontalHeader()
        bh.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        bh.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        bh.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        self.recs = _table(("#", "Target", "Drafter", "Context", "Total", "Spare", "Why"))
        rh = self.recs.horizontalHeader()
        for c in range(6):
            rh.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        rh.setSectionResizeMode(6, QHeaderView.ResizeMode.Stretch)
        self.recs.itemSelectionChanged.connect(self._rec_selected)
        self.rec_reason = QLabel("")
        self.rec_reason.setWordWrap(True)
        self.rec_reason.setObjectName("muted")
        self.use_button = QPushButton("Use this")
        self.use_button.setObjectName("primary")
        self.use_button.setEnabled(False)
        self.use_button.setToolTip("Apply the selected recommendation to the model picker")
        self.use_button.clicked.connect(self.use_selected)
        close = QPushButton("Close")
        close.clicked.connect(self.reject)

        tables = QHBoxLayout()
        left = QVBoxLayout()
        left.addWidget(self._label("Breakdown (estimate)"))
        left.addWidget(self.breakdown)
        right = QVBoxLayout()
        right.addWidget(self._label("Recommendations (best first)"))
        right.addWidget(self.recs, 1)
        right.addWidget(self.rec_reason)
        tables.addLayout(left, 5)
        tables.addLayout(right, 6)
        buttons = QHBoxLayout()
        buttons.addWidget(self.notes, 1)
        buttons.addWidget(self.use_button)
        buttons.addWidget(close)

        lay = QVBoxLayout(self)
        lay.addLayout(grid)
        lay.addSpacing(6)
        lay.addWidget(self.verdict)
        lay.addWidget(self.bar)
        lay.addWidget(self.max_context)
        lay.addLayout(tables, 1)
        lay.addLayout(buttons)

        self._budget_from = "given"  # what the budget is: a device reading, or typed in
        if budget_bytes is not None:
            self.budget.setValue(budget_bytes / GIB)
            self.budget_source.setText("budget given")
        else:
            self.detect_budget(replan=False)
        for sig in (self.target_quant.currentIndexChanged, self.draft_quant.currentIndexChanged,
                    self.draft_box.currentIndexChanged, self.device_box.currentIndexChanged,
                    self.context.valueChanged, self.k_box.valueChanged, self.budget.valueChanged):
            sig.connect(self.replan)
        self.device_box.currentIndexChanged.connect(lambda: self.detect_budget(replan=False))
        self.budget.valueChanged.connect(self._budget_typed)
        self.target_box.currentIndexChanged.connect(self._target_changed)
        self._load_models()
        self._load_candidates()
        self.replan()

    # ---------------------------------------------------------------- helpers

    @staticmethod
    def _label(text: str) -> QLabel:
        lab = QLabel(text)
        lab.setObjectName("muted")
        return lab

    @staticmethod
    def _quant_box(current: str) -> QComboBox:
        box = QComboBox()
        for q, text in QUANT_LABELS.items():
            box.addItem(text, q)
        box.setCurrentIndex(max(box.findData(current), 0))
        return box

    def _fill_drafts(self, choice: LoadRequest) -> None:
        self.draft_box.blockSignals(True)
        self.draft_box.clear()
        if choice.draft:
            self.draft_box.addItem(f"draft model: {choice.draft}", choice.draft)
        self.draft_box.addItem("n-gram lookup (no draft model)", NGRAM)
        self.draft_box.addItem("none (plain decoding)", NONE)
        if choice.drafter in ("ngram", "none"):
            self.draft_box.setCurrentIndex(self.draft_box.findData(NGRAM if choice.drafter == "ngram" else NONE))
        elif choice.draft is None and choice.target == "demo-target":
            self.draft_box.insertItem(0, "draft model: demo-draft", "demo-draft")
            self.draft_box.setCurrentIndex(0)
        self.draft_box.blockSignals(False)

    def _budget_typed(self) -> None:
        self._budget_from = "typed in"
        self.budget_source.setText("budget typed in (Read from device to measure it)")

    def device(self) -> str:
        return self.device_box.currentData()

    def detect_budget(self, replan: bool = True) -> None:
        from specdesk.hw.memory import memory_budget

        b = memory_budget(self.device())
        if b.bytes:
            self.budget.blockSignals(True)
            self.budget.setValue(b.bytes / GIB)
            self.budget.blockSignals(False)
            self.budget_source.setText(b.source)
            self._budget_from = b.source
        else:
            if self.budget.value() < 0.1:  # nothing typed yet: a common GPU size to start from
                self.budget.blockSignals(True)
                self.budget.setValue(24.0)
                self.budget.blockSignals(False)
                self._budget_from = "typed in (24 GiB to start with: no device reading)"
            self.budget_source.setText(f"{b.source}: type the budget of the GPU you plan for")
        if replan:
            self.replan()

    def _load_models(self) -> None:
        from specdesk.core.discovery import discover

        def fill(entries) -> None:
            current = self.target_box.currentData()
            self.target_box.blockSignals(True)
            for e in entries:
                if e.usable and self.target_box.findData(e.name) < 0:
                    self.target_box.addItem(e.name, e.name)
            self.target_box.setCurrentIndex(max(self.target_box.findData(current), 0))
            self.target_box.blockSignals(False)

        run_task(discover, fill, owner=self)

    def _load_candidates(self) -> None:
        """Compatible local drafts for the target: offered in the drafter box and to the recommendations."""
        from specdesk.core.discovery import drafts_for

        target = self._target

        def got(cands) -> None:
            if target != self._target:
                return
            self._candidates = [c.entry.name for c in cands if c.compatible]
            by_name = {c.entry.name: c for c in cands if c.compatible}
            for name in self._candidates:
                if self.draft_box.findData(name) < 0:
                    self.draft_box.blockSignals(True)
                    self.draft_box.insertItem(self.draft_box.count() - 2,
                                              f"draft model: {name} ({human_count(by_name[name].entry.params)})",
                                              name)
                    self.draft_box.blockSignals(False)
            self.replan()

        run_task(lambda: drafts_for(target), got, lambda msg: None, owner=self)

    def _target_changed(self) -> None:
        self._target = self.target_box.currentData()
        self._candidates = []
        self._fill_drafts(LoadRequest(target=self._target, draft=None, drafter="ngram"))
        self._load_candidates()
        self.replan()

    # ---------------------------------------------------------------- planning

    def inputs(self) -> dict:
        key = self.draft_box.currentData()
        drafter = {NGRAM: "ngram", NONE: "none"}.get(key, "model")
        k = self.k_box.value()
        return dict(target=self._target, draft=key if drafter == "model" else None, drafter=drafter,
                    target_quant=self.target_quant.currentData(),
                    draft_quant=self.draft_quant.currentData() if drafter == "model" else "none",
                    device=self.device(), context=self.context.value() or None, k="auto" if k < 0 else k,
                    budget_bytes=int(self.budget.value() * GIB), budget_source=self._budget_from,
                    candidate_drafts=list(self._candidates), tree=self._tree)

    def replan(self) -> None:
        from specdesk.core.plan import plan

        self.draft_quant.setEnabled(self.draft_box.currentData() not in (NGRAM, NONE))
        self._tag += 1
        tag = self._tag
        args = self.inputs()
        run_task(lambda: plan(**args), lambda p: self._show(tag, p), lambda msg: self._failed(tag, msg), owner=self)

    def _failed(self, tag: int, msg: str) -> None:
        if tag != self._tag:
            return
        self.error = msg
        self.result = None
        self.verdict.setText(f"⚠ {msg}")
        self.verdict.setStyleSheet(f"color: {theme.ERROR}")
        self.use_button.setEnabled(False)

    def _show(self, tag: int, p) -> None:
        if tag != self._tag:  # an older answer, overtaken by a newer change
            return
        self.result, self.error = p, None
        self.verdict.setText(("✓ " if p.fits else "✗ ") + p.verdict[0].upper() + p.verdict[1:]
                             + f"  ·  {p.target.name} + " + (p.draft.name if p.draft else p.drafter)
                             + f" on {p.device}, context {p.context}, k {p.k}")
        self.verdict.setStyleSheet(f"color: {theme.DRAFT if p.fits else theme.ERROR}")
        self.bar.set_plan(segments(p), p.budget_bytes, p.fits)
        self.max_context.setText(f"Largest context that fits: <b>{p.max_context:,} tokens</b> ({p.max_context_reason})"
                                 + (f" · measured before: {_gib(p.measured_bytes)}" if p.measured_bytes else ""))
        if self.context.value() == 0:
            self.context.blockSignals(True)
            self.context.setSpecialValueText(f"{p.context} (default)")
            self.context.blockSignals(False)
        self._fill_breakdown(p)
        self._fill_recs(p)
        notes = list(p.notes) + [n for m in (p.target, p.draft) if m is not None for n in m.notes]
        self.notes.setText(" · ".join(notes))
        self.planned.emit(p)

    def _fill_breakdown(self, p) -> None:
        rows = []
        for m in (p.target, p.draft):
            if m is None:
                continue
            for r in m.rows:
                counted = not r.label.startswith(("verify logits", "draft distributions", "prefill activation"))
                rows.append((f"{m.role} ({m.quant})", r.label + ("" if counted else "  (peak: see transient)"),
                             r.bytes, counted))
        rows.append(("transient", p.transient_label, p.transient_bytes, True))
        rows += [("overhead", r.label, r.bytes, True) for r in p.overhead_rows]
        rows.append(("total", "estimate" + (" (includes estimated parts)" if p.target.estimated else ""),
                     p.total_bytes, True))
        rows.append(("budget", p.budget_source, p.budget_bytes, True))
        self.breakdown.setRowCount(len(rows))
        for i, (part, label, b, counted) in enumerate(rows):
            for c, text in enumerate((part, label, _mib_or_gib(b))):
                item = QTableWidgetItem(text)
                item.setToolTip(f"{label}: {b:,} bytes")
                if not counted:
                    item.setForeground(QColor(theme.MUTED))
                if part in ("total", "budget"):
                    f = item.font()
                    f.setBold(True)
                    item.setFont(f)
                if c == 2:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.breakdown.setItem(i, c, item)

    def _fill_recs(self, p) -> None:
        self.recs.setRowCount(len(p.recommendations))
        for i, r in enumerate(p.recommendations):
            drafter = {"model": f"{r.draft}" + (f" ({r.draft_quant})" if r.draft_quant != "none" else ""),
                       "ngram": "n-gram lookup", "none": "none"}[r.drafter]
            cells = (str(r.rank), r.target_quant, drafter, f"{r.context:,}" + ("" if r.full_context else " (cut)"),
                     _gib(r.total_bytes), _gib(r.headroom_bytes), short_reason(r.reason))
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(r.reason)
                self.recs.setItem(i, c, item)
        self.rec_reason.setText(f"#1: {p.recommendations[0].reason}" if p.recommendations else "")
        if not p.recommendations:
            self.recs.setRowCount(1)
            self.recs.setItem(0, 6, QTableWidgetItem("nothing fits this budget: a larger GPU, or a smaller target"))
        self.use_button.setEnabled(bool(self.recs.selectionModel().selectedRows()) and bool(p.recommendations))

    def _rec_selected(self) -> None:
        rec = self.selected_recommendation()
        self.use_button.setEnabled(rec is not None)
        if rec is not None:
            self.rec_reason.setText(f"#{rec.rank}: {rec.reason}")

    def selected_recommendation(self):
        rows = self.recs.selectionModel().selectedRows()
        if not rows or self.result is None or rows[0].row() >= len(self.result.recommendations):
            return None
        return self.result.recommendations[rows[0].row()]

    def request_for(self, rec) -> LoadRequest:
        s = rec.settings
        return LoadRequest(target=self._target, draft=s["draft"], drafter=s["drafter"], target_quant=s["target_quant"],
                           draft_quant=s["draft_quant"], double_quant=bool(s["double_quant"]),
                           device=self.device() if self.device() != "cuda" else "auto")

    def use_selected(self) -> LoadRequest | None:
        """Apply the selected recommendation: to the picker (when opened from it) and to this dialog."""
        rec = self.selected_recommendation()
        if rec is None:
            return None
        req = self.request_for(rec)
        if self.picker is not None:
            self.picker.apply(req)
        self.use_requested.emit(req)
        # show the chosen configuration here too
        self.target_quant.blockSignals(True)
        self.target_quant.setCurrentIndex(max(self.target_quant.findData(rec.target_quant), 0))
        self.target_quant.blockSignals(False)
        key = {"ngram": NGRAM, "none": NONE}.get(rec.drafter, rec.draft)
        self.draft_box.blockSignals(True)
        if self.draft_box.findData(key) >= 0:
            self.draft_box.setCurrentIndex(self.draft_box.findData(key))
        self.draft_box.blockSignals(False)
        if rec.drafter == "model":
            self.draft_quant.blockSignals(True)
            self.draft_quant.setCurrentIndex(max(self.draft_quant.findData(rec.draft_quant), 0))
            self.draft_quant.blockSignals(False)
        self.context.setValue(rec.context)  # re-plans
        return req


def short_reason(reason: str) -> str:
    """A recommendation's reason in a table cell: what ranks it so ("best that fits", or what it gives up against
    the row above); the whole line is the row's tooltip and the label below the table (every row read "below the
    one above fo…")."""
    head = reason.split(": ", 1)[0]
    return head.removeprefix("below the one above for ")
