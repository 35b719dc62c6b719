"""The model picker: every local model, a target, a draft (or n-gram / none), quantizations.

Discovery and the draft compatibility check run off the GUI thread (they read tokenizers); drafts that
cannot serve the chosen target stay listed, greyed, with the reason (first mismatching token, a
different end-of-sequence token, not smaller than the target, ...).
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QDialog, QDialogButtonBox, QFileDialog, QGridLayout,
                               QHBoxLayout, QHeaderView, QLabel, QListWidget, QListWidgetItem, QPushButton,
                               QTableWidget, QTableWidgetItem, QVBoxLayout)

from specdesk.core.discovery import display_name
from specdesk.core.units import disk_size, param_count
from specdesk.qt import theme
from specdesk.qt.tasks import run_task
from specdesk.qt.worker import LoadRequest

NGRAM, NONE, PHRASES = "__ngram__", "__none__", "__phrases__"
QUANT_LABELS = {"auto": "auto (q4 or q8 on a CPU)", "none": "none (full precision)",
                "int8": "int8 (bitsandbytes)", "nf4": "nf4 (4-bit)", "nf4+dq": "nf4 + double quant",
                "fp4": "fp4 (4-bit)", "q4": "q4 (4-bit, CPU)", "q8": "q8 (8-bit, CPU: fast, near-lossless)"}


def quant_label(method: str, double_quant: bool) -> str:
    return f"{method}+dq" if double_quant and method in ("nf4", "fp4") else method


def human_bytes(n: int | None) -> str:
    return disk_size(n)


def human_count(n: int | None) -> str:
    return param_count(n, digits=1)


def _quant_box() -> QComboBox:
    box = QComboBox()
    for q, text in QUANT_LABELS.items():
        box.addItem(text, q)
    box.setToolTip("auto: on a CPU, q4 for a GGUF file of 4 bits a weight or fewer, q8 for one of 5 to 8 bits and "
                   "for a float llama, mistral or qwen2 model of 100 MB and more; else as stored. int8, nf4, fp4: "
                   "bitsandbytes quantization. q4: 4-bit groups of 32 through specdesk's CPU kernels, bfloat16 "
                   "activations (CPU only; a Q4_1 GGUF keeps its own 4-bit codes). q8: 8-bit groups of 32 (GGUF "
                   "Q8_0's layout) through the same kernels: near a float model's precision, several times faster "
                   "than float32 on a CPU (a Q8_0 GGUF keeps its own codes)")
    return box


def _status(e) -> str:
    if not e.usable:
        return f"unusable: {e.reason}"
    if getattr(e, "format", None) == "gguf":
        return f"ready (GGUF {e.dtype}; converted on first load)"
    return "ready" + (f" ({e.quantized})" if e.quantized else "")


class ModelPickerDialog(QDialog):
    plan_requested = Signal(object)  # LoadRequest: open the VRAM planner for this choice
    COLUMNS = ("Name", "Source", "Arch", "Params", "Size", "Chat", "Status")

    def __init__(self, parent=None, current: LoadRequest | None = None, entries=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Choose models")
        self.resize(900, 640)
        self.entries: list = []
        self.candidates: list = []  # DraftCandidate list for the current target
        self.own_table = None  # phrases.OwnTable: the table `specdesk distill --phrases-only` made for the target
        self._current = current or LoadRequest()
        self._drafts_tag = 0
        self._draft_autos: dict = {}  # draft name -> (what auto means for it, whether it follows the target)
        self._target_auto: str | None = None  # what auto means for the target (loading.resolve_quant)
        self.busy = False

        self.table = QTableWidget(0, len(self.COLUMNS))
        self.table.setHorizontalHeaderLabels(self.COLUMNS)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(24)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setShowGrid(False)
        hdr = self.table.horizontalHeader()
        hdr.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for c in range(1, len(self.COLUMNS) - 1):
            hdr.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        hdr.setSectionResizeMode(len(self.COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
        self.table.itemSelectionChanged.connect(self._row_selected)

        self.target_box = QComboBox()
        self.target_box.currentIndexChanged.connect(self._target_changed)
        self.target_quant = _quant_box()
        self.draft_list = QListWidget()
        self.draft_list.currentItemChanged.connect(self._draft_changed)
        self.target_quant.currentIndexChanged.connect(lambda _i: self._say_draft_auto())
        self.draft_quant = _quant_box()
        self.why = QLabel("")
        self.why.setWordWrap(True)
        self.why.setObjectName("muted")
        self.status = QLabel("Looking for models…")
        self.status.setObjectName("muted")

        add = QPushButton("Add folder…")
        add.clicked.connect(self._add_folder)
        refresh = QPushButton("Refresh")
        refresh.clicked.connect(self.refresh)
        plan = QPushButton("VRAM planner…")
        plan.clicked.connect(lambda: self.plan_requested.emit(self.choice()))

        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.load_button = self.buttons.addButton("Load", QDialogButtonBox.ButtonRole.AcceptRole)
        self.load_button.setObjectName("primary")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)

        top = QHBoxLayout()
        title = QLabel("Models on this machine")
        title.setObjectName("title")
        top.addWidget(title)
        top.addStretch(1)
        top.addWidget(refresh)
        top.addWidget(add)

        form = QGridLayout()
        form.setHorizontalSpacing(10)
        form.addWidget(QLabel("Target"), 0, 0)
        form.addWidget(self.target_box, 0, 1)
        form.addWidget(QLabel("Quantization"), 0, 2)
        form.addWidget(self.target_quant, 0, 3)
        form.addWidget(QLabel("Draft"), 1, 0, Qt.AlignmentFlag.AlignTop)
        form.addWidget(self.draft_list, 1, 1)
        dq = QVBoxLayout()
        dq.addWidget(self.draft_quant)
        dq.addStretch(1)
        form.addWidget(QLabel("Quantization"), 1, 2, Qt.AlignmentFlag.AlignTop)
        form.addLayout(dq, 1, 3)
        form.addWidget(self.why, 2, 1, 1, 3)
        form.setColumnStretch(1, 1)

        bottom = QHBoxLayout()
        bottom.addWidget(plan)
        bottom.addWidget(self.status, 1)
        bottom.addWidget(self.buttons)

        lay = QVBoxLayout(self)
        lay.addLayout(top)
        lay.addWidget(self.table, 3)
        lay.addLayout(form, 2)
        lay.addLayout(bottom)

        self._select_quant(self.target_quant, quant_label(self._current.target_quant, self._current.double_quant))
        self._select_quant(self.draft_quant, quant_label(self._current.draft_quant, self._current.double_quant))
        if entries is not None:
            self._set_entries(entries)
        else:
            self.refresh()

    # ---------------------------------------------------------------- discovery

    def refresh(self) -> None:
        from specdesk.core.discovery import discover

        self.busy = True
        self.status.setText("Looking for models…")
        run_task(discover, self._set_entries, self._failed, owner=self)

    def _failed(self, msg: str) -> None:
        self.busy = False
        self.status.setText(f"⚠ {msg}")

    def _set_entries(self, entries) -> None:
        self.entries = list(entries)
        self.table.setRowCount(len(self.entries))
        for r, e in enumerate(self.entries):
            cells = (display_name(e.name), e.source, e.architecture or "-", human_count(e.params), human_bytes(e.bytes_on_disk),
                     "-" if e.chat_template is None else ("yes" if e.chat_template else "no"),
                     _status(e))
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(e.path if c == 0 else text)
                if not e.usable:
                    item.setForeground(QColor(theme.MUTED if c < len(cells) - 1 else theme.ERROR))
                self.table.setItem(r, c, item)
        usable = [e for e in self.entries if e.usable]
        self.target_box.blockSignals(True)
        self.target_box.clear()
        for e in usable:
            self.target_box.addItem(f"{display_name(e.name)}  ·  {human_count(e.params)} params", e.name)
        self.target_box.blockSignals(False)
        i = self.target_box.findData(self._current.target)
        self.target_box.setCurrentIndex(max(i, 0))
        self._target_changed()
        n_bad = len(self.entries) - len(usable)
        self.status.setText(f"{len(usable)} usable model(s)" + (f", {n_bad} unusable (see Status)" if n_bad else ""))

    def _row_selected(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if rows:
            e = self.entries[rows[0].row()]
            i = self.target_box.findData(e.name)
            if i >= 0:
                self.target_box.setCurrentIndex(i)

    def _add_folder(self) -> None:
        from specdesk.core import userdirs

        folder = QFileDialog.getExistingDirectory(self, "Add a model folder")
        if folder:
            userdirs.add_folder(folder)
            self.refresh()

    # ---------------------------------------------------------------- drafts

    def target(self) -> str | None:
        return self.target_box.currentData()

    def _target_changed(self) -> None:
        target = self.target()
        self.draft_list.clear()
        self._add_draft_item("n-gram lookup (no draft model; drafts from the prompt)", NGRAM)
        self._add_draft_item("none (plain decoding)", NONE)
        self.candidates = []
        self.own_table = None
        self._draft_autos, self._target_auto = {}, None
        if target is None:
            return
        from specdesk.core import phrases
        from specdesk.core.discovery import drafts_for
        from specdesk.core.loading import resolve_draft_quant, resolve_quant

        self._drafts_tag += 1
        tag = self._drafts_tag
        entries = list(self.entries)
        device = self._current.device
        self.busy = True
        self.status.setText(f"Checking which models can draft for {display_name(target)}…")

        def find():
            candidates = drafts_for(target, entries)
            auto = resolve_quant(target, "auto", device)
            drafts = {c.entry.name: resolve_draft_quant(c.entry.name, "auto", auto, device)
                      for c in candidates if c.compatible}
            return candidates, phrases.own_table(target), auto, drafts

        run_task(find, lambda found: self._set_drafts(tag, *found), self._failed, owner=self)

    def _add_draft_item(self, text: str, key: str, enabled: bool = True, tip: str = "",
                        row: int | None = None) -> QListWidgetItem:
        item = QListWidgetItem(text)
        item.setData(Qt.ItemDataRole.UserRole, key)
        if not enabled:
            item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEnabled & ~Qt.ItemFlag.ItemIsSelectable)
            item.setForeground(QColor(theme.MUTED))
        item.setToolTip(tip or text)
        if row is None:
            self.draft_list.addItem(item)
        else:
            self.draft_list.insertItem(row, item)
        return item

    def _set_drafts(self, tag: int, candidates, own=None, auto: str | None = None,
                    draft_autos: dict | None = None) -> None:
        """``own``: the table `specdesk distill --phrases-only` made for the target (phrases.OwnTable), offered first
        and chosen where no model can draft for it. ``auto``: what quantization auto means for the target here
        (loading.auto_quant), which the target's box then says; ``draft_autos``: the same for each usable draft, as
        (quantization, follows its target) from loading.resolve_draft_quant, which the draft's box says."""
        if tag != self._drafts_tag:  # the user picked another target meanwhile
            return
        self.busy = False
        self._draft_autos, self._target_auto = dict(draft_autos or {}), auto
        if auto is not None:
            i = self.target_quant.findData("auto")
            self.target_quant.setItemText(i, f"auto: {auto} for this model" if auto != "none" else
                                          "auto: as stored for this model")
        self.candidates = list(candidates)
        self.own_table = own
        first_good = None
        if own is not None:
            self._add_draft_item(f"the model's own phrases  ·  {own.contexts:,} contexts, {own.replies:,} replies",
                                 PHRASES, tip=f"Made by Train a draft → Phrases only: {own.path}", row=0)
        for c in self.candidates:
            if c.compatible:
                note = f"  ·  {c.reason}" if c.reason else ""  # "distilled for this model" (listed first)
                item = self._add_draft_item(f"{display_name(c.entry.name)}  ·  {human_count(c.entry.params)} params  ·  "
                                            f"{human_bytes(c.entry.bytes_on_disk)}{note}", c.entry.name)
                first_good = first_good or item
        for c in self.candidates:
            if not c.compatible:
                self._add_draft_item(f"✗ {display_name(c.entry.name)}: {c.reason}", c.entry.name, enabled=False,
                                     tip=c.reason)
        want = self._current.draft if self._current.target == self.target() else None
        if self._current.target == self.target() and self._current.drafter in ("ngram", "none", "phrases") \
                and not (self._current.drafter == "phrases" and self._current.draft):
            want = {"ngram": NGRAM, "none": NONE, "phrases": PHRASES}[self._current.drafter]
        chosen = None
        for i in range(self.draft_list.count()):
            it = self.draft_list.item(i)
            if want is not None and it.data(Qt.ItemDataRole.UserRole) == want and it.flags() & Qt.ItemFlag.ItemIsEnabled:
                chosen = it
        if chosen is None and first_good is None and own is not None:
            chosen = self.draft_list.item(0)  # the table, ahead of prompt lookup alone
        chosen = chosen or first_good or self.draft_list.item(0)
        self.draft_list.setCurrentItem(chosen)
        good = sum(c.compatible for c in self.candidates)
        table = " and a table of its own phrases" if own is not None else ""
        self.status.setText(f"{good} compatible draft(s){table} for {display_name(self.target() or '')}; "
                            f"{len(self.candidates) - good} other model(s) cannot draft for it")

    def _draft_changed(self, item, _prev=None) -> None:
        key = item.data(Qt.ItemDataRole.UserRole) if item is not None else NONE
        self.draft_quant.setEnabled(key not in (NGRAM, NONE, PHRASES))
        self._say_draft_auto(key)
        self.why.setText({PHRASES: "A table of the phrases this model kept writing in its own replies proposes "
                                   "their continuation, with prompt lookup beside it: no draft model, a few MB of "
                                   "memory, output identical to the target alone.",
                          NGRAM: "Prompt lookup drafts tokens by matching the last few tokens earlier in the "
                                 "context: no extra memory, best on repetitive text and code.",
                          NONE: "Plain decoding: one target forward pass per token (the baseline)."}.get(
            key, "Same tokenizer as the target: its accepted guesses make the target emit several tokens per "
                 "forward pass, with output identical to the target alone."))

    def _say_draft_auto(self, key: str | None = None) -> None:
        """The draft quantization box's auto item says what auto means for the chosen draft: its own auto, or for a
        distilled draft (which follows its target whatever the box says) what the target's quantization makes it."""
        if key is None:
            item = self.draft_list.currentItem()
            key = item.data(Qt.ItemDataRole.UserRole) if item is not None else NONE
        auto, follows = self._draft_autos.get(key, (None, False))
        text = QUANT_LABELS["auto"]  # not known yet, or no draft model
        if follows:
            from specdesk.core.loading import follower_quant

            tq = self.target_quant.currentData() or "auto"
            q = follower_quant(self._target_auto if tq == "auto" else tq.split("+")[0])
            text = f"auto: {q} (follows the target)" if q != "none" else "auto: as the target (follows it)"
        elif auto is not None:
            text = f"auto: {auto} for this draft" if auto != "none" else "auto: as stored for this draft"
        self.draft_quant.setItemText(self.draft_quant.findData("auto"), text)

    # ---------------------------------------------------------------- result

    def draft_key(self) -> str:
        item = self.draft_list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item is not None else NONE

    def select_draft(self, key: str) -> bool:
        for i in range(self.draft_list.count()):
            it = self.draft_list.item(i)
            if it.data(Qt.ItemDataRole.UserRole) == key and it.flags() & Qt.ItemFlag.ItemIsEnabled:
                self.draft_list.setCurrentItem(it)
                return True
        return False

    def choice(self) -> LoadRequest:
        key = self.draft_key()
        drafter = {NGRAM: "ngram", NONE: "none", PHRASES: "phrases"}.get(key, "model")
        tq = self.target_quant.currentData()
        dq = self.draft_quant.currentData() if drafter == "model" else "none"
        return LoadRequest(target=self.target() or self._current.target,
                           draft=None if drafter != "model" else key, drafter=drafter,
                           target_quant=tq.split("+")[0], draft_quant=dq.split("+")[0],
                           double_quant=tq.endswith("+dq") or dq.endswith("+dq"), device=self._current.device)

    def apply(self, req: LoadRequest) -> None:
        """Set the picker to a choice (the planner's "Use this")."""
        self._current = req
        self._select_quant(self.target_quant, quant_label(req.target_quant, req.double_quant))
        self._select_quant(self.draft_quant, quant_label(req.draft_quant, req.double_quant))
        i = self.target_box.findData(req.target)
        if i >= 0 and i != self.target_box.currentIndex():
            self.target_box.setCurrentIndex(i)  # re-lists drafts, then selects req's drafter
        else:
            key = {"ngram": NGRAM, "none": NONE}.get(req.drafter or "model", req.draft or NONE)
            if req.drafter == "phrases" and not req.draft:
                key = PHRASES
            self.select_draft(key)

    @staticmethod
    def _select_quant(box: QComboBox, quant: str) -> None:
        i = box.findData(quant)
        if i >= 0:
            box.setCurrentIndex(i)
