"""A past session log, re-opened: its models, a summary table and the plots of each generation."""

from __future__ import annotations

from PySide6.QtWidgets import (QAbstractItemView, QDialog, QDialogButtonBox, QHeaderView, QLabel, QTableWidget,
                               QTableWidgetItem, QVBoxLayout)

from specdesk.core.sessionlog import SessionLog
from specdesk.qt.export import fill_panel, generation_summary, speedups
from specdesk.qt.plots import PlotsPanel

COLUMNS = (("#", "generation", ""), ("drafter", "drafter", ""), ("k", "k", ""), ("new tokens", "new_tokens", ""),
           ("tok/s", "tokens_per_second", "f"), ("acceptance", "acceptance_rate", "pct"),
           ("tokens/step", "mean_accepted_length", "f"), ("vs plain", "speedup", "x"), ("stop", "stop_reason", ""))


def _cell(v, kind: str) -> str:
    if v is None:
        return "–"
    if kind == "pct":
        return f"{v:.0%}"
    if kind == "f":
        return f"{v:.2f}"
    if kind == "x":
        return f"{v:.2f}×"
    return str(v)


class LogViewerDialog(QDialog):
    def __init__(self, log: SessionLog, parent=None) -> None:
        super().__init__(parent)
        self.log = log
        self.setWindowTitle(f"Session log: {log.path.name}")
        self.resize(1100, 780)
        h = log.header
        t, d = h.get("target") or {}, h.get("draft") or {}
        pair = f"{t.get('name', '?')} ({t.get('quant', 'none')})"
        pair += f" + {d.get('name')} ({d.get('quant', 'none')})" if d else f" + {h.get('drafter')}"
        head = QLabel(f"<b>{pair}</b> on {h.get('device', '?')} · created {h.get('created', '?')}"
                      + (" · <i>last line cut</i>" if log.truncated else ""))
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels([c[0] for c in COLUMNS])
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(24)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.setMaximumHeight(220)
        self.plots = PlotsPanel(self)
        ups = speedups(log)
        rows = [{**generation_summary(g), "generation": pos, "speedup": ups[pos][0] if pos in ups else None}
                for pos, g in enumerate(log.generations)]
        self.table.setRowCount(len(rows))
        for r, s in enumerate(rows):
            for c, (_, key, kind) in enumerate(COLUMNS):
                self.table.setItem(r, c, QTableWidgetItem(_cell(s.get(key), kind)))
        self._ups = ups
        self.table.itemSelectionChanged.connect(self._show_selected)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(head)
        lay.addWidget(self.table)
        lay.addWidget(self.plots, 1)
        lay.addWidget(buttons)
        if rows:
            self.table.selectRow(0)

    def _show_selected(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return
        pos = rows[0].row()
        up = self._ups.get(pos)
        fill_panel(self.plots, self.log.generations[pos], self.log.generations[up[1]] if up else None)
