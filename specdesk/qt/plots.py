"""The live plots: tokens/s, acceptance rate, accepted tokens per step, memory.

Events only append to ring buffers (series.py) and mark what changed; a timer redraws only that. Redrawing
is not free: pyqtgraph paints in Python on the GUI thread, and on a 2-core CPU a 10 Hz redraw of all four
plots during decoding halved the engine's tokens/s (measured: 119 tok/s headless, about 50 in the window).
So while the engine decodes, the plots redraw at 4 Hz (1 Hz on a CPU of 4 cores or fewer), one plot per tick, and a
plot whose data did not change is not touched.
"""

from __future__ import annotations

import os

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt, QTimer
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QVBoxLayout, QWidget

from specdesk.qt import theme
from specdesk.qt.series import MemorySeries, StepSeries

REFRESH_MS = 100  # 10 Hz when idle (loading a past log, resizing)
# While the engine decodes: each plot 4 Hz, still live. On 4 cores or fewer every redraw takes a core from decoding's
# threads mid-operation; 1 Hz there (SmolLM2 q4 on 2 Intel cores, plain decoding in the window, 3 runs alternated:
# 49 -> 59 tokens/s; 85 without the window).
BUSY_REFRESH_MS = 250 if (os.cpu_count() or 1) > 4 else 1000
GIB = 1024**3

PLOT_NAMES = ("tokens_per_second", "acceptance", "accepted_histogram", "memory")
PARTS = ("tps", "acc", "hist", "memory")  # one plot each, redrawn on its own (in this order, one per tick when busy)
ALIASES = {"steps": ("tps", "acc", "hist"), "baseline": ("tps",)}  # what a change of each series redraws


def _legend(title: str, *items: tuple[str, str, str]) -> str:
    keys = " &nbsp;".join(f"<span style='color:{c}'>{mark}&nbsp;{label}</span>" for mark, c, label in items)
    return f"<b style='color:{theme.TEXT}'>{title}</b>&nbsp;&nbsp; <span style='font-size:8pt'>{keys}</span>"


def _set_text(label: QLabel, text: str) -> None:
    if label.text() != text:  # an unchanged title must not cost a relayout
        label.setText(text)


class PlotCard(QFrame):
    """A plot under a wrapping title line (a QLabel shrinks with the pane; a pyqtgraph title would not)."""

    def __init__(self, plot: pg.PlotWidget, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("panel")
        self.plot = plot
        self.title = QLabel()
        self.title.setWordWrap(True)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 6, 4, 4)
        lay.setSpacing(2)
        lay.addWidget(self.title)
        lay.addWidget(plot, 1)


def _plot(parent: QWidget, left: str, bottom: str) -> pg.PlotWidget:
    w = pg.PlotWidget(parent=parent)
    w.setMinimumSize(160, 120)
    item = w.getPlotItem()
    item.showGrid(x=True, y=True, alpha=0.15)
    item.setLabel("left", left)
    item.setLabel("bottom", bottom)
    item.setMenuEnabled(False)
    item.hideButtons()
    for axis in ("left", "bottom", "right"):
        item.getAxis(axis).setTextPen(theme.MUTED)
        item.getAxis(axis).setPen(theme.BORDER)
        item.getAxis(axis).enableAutoSIPrefix(False)
    w.setMouseEnabled(x=False, y=False)
    return w


def _pen(colour: str, width: float = 2.0, dashed: bool = False):
    return pg.mkPen(colour, width=width, style=Qt.PenStyle.DashLine if dashed else Qt.PenStyle.SolidLine)


class PlotsPanel(QWidget):
    """Four plots in a grid, drawn from ``steps`` (this generation), ``baseline`` and ``memory``."""

    def __init__(self, parent=None, live: bool = True) -> None:
        super().__init__(parent)
        self.steps = StepSeries()
        self.baseline: StepSeries | None = None  # the plain-decoding run of "Compare"
        self.memory = MemorySeries()
        self._dirty: set[str] = set(PARTS)
        self._busy = False
        self._next_part = 0
        self._hist_shape: tuple[int, int] | None = None
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setSpacing(8)

        self.tps_plot = _plot(self, "tokens/s", "seconds")
        self.tps_rolling = self.tps_plot.plot(pen=_pen(theme.TPS))
        self.tps_cumulative = self.tps_plot.plot(pen=_pen(theme.ACC_CUMULATIVE, 1.5, dashed=True))
        self.tps_plain = self.tps_plot.plot(pen=_pen(theme.PLAIN, 1.5, dashed=True))

        self.acc_plot = _plot(self, "accepted / drafted", "seconds")
        self.acc_plot.getPlotItem().getAxis("left").setTicks([[(v, f"{v:.0%}") for v in (0, .25, .5, .75, 1)]])
        self.acc_plot.setYRange(-0.06, 1.06, padding=0)
        self.acc_rolling = self.acc_plot.plot(pen=_pen(theme.ACC_ROLLING))
        self.acc_cumulative = self.acc_plot.plot(pen=_pen(theme.ACC_CUMULATIVE, 1.5, dashed=True))

        self.hist_plot = _plot(self, "steps", "accepted in the step (0..k)")
        self.hist_bars = pg.BarGraphItem(x=[0], height=[0], width=0.75, brush=theme.HIST, pen=pg.mkPen(None))
        self.hist_plot.addItem(self.hist_bars)

        self.mem_plot = _plot(self, "GiB", "seconds")
        self.mem_used = self.mem_plot.plot(pen=_pen(theme.MEM_PROCESS), fillLevel=0,
                                           brush=pg.mkBrush(theme.MEM_PROCESS + "40"))
        # free memory is often 100x this process's use: its own axis on the right keeps both readable
        item = self.mem_plot.getPlotItem()
        self._free_vb = pg.ViewBox()
        item.showAxis("right")
        item.scene().addItem(self._free_vb)
        item.getAxis("right").linkToView(self._free_vb)
        item.getAxis("right").setLabel("free GiB", color=theme.MEM_FREE)
        item.getAxis("right").setTextPen(theme.MEM_FREE)
        self._free_vb.setXLink(item)
        self.mem_free = pg.PlotDataItem(pen=_pen(theme.MEM_FREE, 1.5))
        self._free_vb.addItem(self.mem_free)
        item.vb.sigResized.connect(self._sync_free_view)

        self.cards = {name: PlotCard(w) for name, w in self.plot_widgets().items()}
        for i, card in enumerate(self.cards.values()):
            grid.addWidget(card, i // 2, i % 2)
        self._set_titles()

        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self._tick)
        if live:
            self._timer.start()

    # ---------------------------------------------------------------- feeding

    def set_busy(self, busy: bool) -> None:
        """The engine is decoding (redraw each plot at most every BUSY_REFRESH_MS, one plot per tick) or not.

        One plot per tick: redrawing all four at once held the GUI thread for 35 ms alone and ~100 ms while the
        engine shared the CPU (axis text dominates); a quarter of that at a time keeps the window responsive.
        """
        self._busy = busy
        self._timer.setInterval(BUSY_REFRESH_MS // len(PARTS) if busy else REFRESH_MS)

    def new_generation(self) -> None:
        self.steps.clear()
        self.baseline = None
        self._dirty |= {"tps", "acc", "hist"}

    def add_step(self, step) -> None:
        self.steps.add_step(step)
        self._dirty |= {"tps", "acc", "hist"}

    def set_baseline(self, series: StepSeries | None) -> None:
        self.baseline = series
        self._dirty.add("tps")

    def add_memory(self, t: float, used: int | None, free: int | None, used_label: str, free_label: str) -> None:
        self.memory.used_label, self.memory.free_label = used_label, free_label
        self.memory.add(t, used, free)
        self._dirty.add("memory")

    # ---------------------------------------------------------------- drawing

    def _tick(self) -> None:
        if not self._dirty:
            return
        if self._busy:  # the next dirty plot after the last one drawn, round robin
            n = len(PARTS)
            start = self._next_part
            part = next(PARTS[(start + i) % n] for i in range(n) if PARTS[(start + i) % n] in self._dirty)
            self._next_part = (PARTS.index(part) + 1) % n
            self.refresh([part])
        else:
            self.refresh(self._dirty)

    def refresh(self, parts=None) -> None:
        """Push the buffers into the plot items: all of them, or only ``parts`` (PARTS, or "steps", "baseline")."""
        wanted = set(PARTS) if parts is None else {q for p in parts for q in ALIASES.get(p, (p,))}
        self._dirty -= wanted
        s = self.steps
        t = s.t.values() if wanted & {"tps", "acc"} else None
        if "acc" in wanted:
            self.acc_rolling.setData(t, s.acc_rolling.values(), connect="finite")
            self.acc_cumulative.setData(t, s.acc_cumulative.values(), connect="finite")
        if "hist" in wanted:
            self._draw_histogram()
        if "tps" in wanted:
            self.tps_rolling.setData(t, s.tps_rolling.values(), connect="finite")
            self.tps_cumulative.setData(t, s.tps_cumulative.values(), connect="finite")
            if self.baseline is not None and len(self.baseline.t):
                self.tps_plain.setData(self.baseline.t.values(), self.baseline.tps_cumulative.values(),
                                       connect="finite")
            else:
                self.tps_plain.setData([], [])
        if "memory" in wanted:
            m = self.memory
            mt = m.t.values()
            self.mem_used.setData(mt, m.used.values() / GIB, connect="finite")
            self.mem_free.setData(mt, m.free.values() / GIB, connect="finite")
            self._free_vb.enableAutoRange(axis=pg.ViewBox.YAxis)
        self._set_titles()

    def _draw_histogram(self) -> None:
        counts = self.histogram_counts()
        self.hist_bars.setOpts(x=np.arange(len(counts)), height=np.asarray(counts, dtype=float))
        top = max(max(counts, default=0), 1)
        if (len(counts), top) != self._hist_shape:  # new ticks and ranges repaint the axes: only on change
            self._hist_shape = (len(counts), top)
            self.hist_plot.setXRange(-0.6, max(len(counts) - 1, 1) + 0.6, padding=0)
            step = max(1, len(counts) // 12)  # whole numbers only: k = 32 still readable
            self.hist_plot.getPlotItem().getAxis("bottom").setTicks(
                [[(i, str(i)) for i in range(0, len(counts), step)]])
            self.hist_plot.setYRange(0, top * 1.08, padding=0)
            ystep = max(1, -(-top // 5))  # counts of steps: whole numbers (pyqtgraph drew 0.5, 1.5 under 3)
            self.hist_plot.getPlotItem().getAxis("left").setTicks(
                [[(v, str(v)) for v in range(0, top + 1, ystep)], []])

    def histogram_counts(self) -> list[int]:
        """Steps per number of accepted draft tokens, over 0..k."""
        n = max(len(self.steps.hist), self.steps.max_k + 1, 1)
        return self.steps.hist + [0] * (n - len(self.steps.hist))

    def _set_titles(self) -> None:
        plain = [("┅", theme.PLAIN, "plain decoding")] if self.baseline is not None else []
        c = self.cards
        _set_text(c["tokens_per_second"].title, _legend("Tokens / s", ("━", theme.TPS, "rolling"),
                                                        ("┅", theme.ACC_CUMULATIVE, "average"), *plain))
        _set_text(c["acceptance"].title, _legend("Acceptance rate", ("━", theme.ACC_ROLLING, "rolling"),
                                                 ("┅", theme.ACC_CUMULATIVE, "cumulative")))
        _set_text(c["accepted_histogram"].title, _legend("Accepted draft tokens per step",
                                                         ("█", theme.HIST, f"{self.steps.steps} steps")))
        _set_text(c["memory"].title, _legend("Memory", ("█", theme.MEM_PROCESS, self.memory.used_label),
                                             ("━", theme.MEM_FREE, self.memory.free_label + " (right axis)")))

    def _sync_free_view(self) -> None:
        item = self.mem_plot.getPlotItem()
        self._free_vb.setGeometry(item.vb.sceneBoundingRect())
        self._free_vb.linkedViewChanged(item.vb, self._free_vb.XAxis)

    # ---------------------------------------------------------------- images

    def plot_widgets(self) -> dict[str, pg.PlotWidget]:
        return dict(zip(PLOT_NAMES, (self.tps_plot, self.acc_plot, self.hist_plot, self.mem_plot)))

    def png(self, widget: QWidget | None = None) -> bytes:
        """The panel (or one of its plots) as PNG bytes, for reports."""
        self.refresh()
        self._sync_free_view()
        pix = (widget or self).grab()
        data = QByteArray()
        buf = QBuffer(data)
        buf.open(QIODevice.OpenModeFlag.WriteOnly)
        pix.save(buf, "PNG")
        buf.close()
        return bytes(data.data())
