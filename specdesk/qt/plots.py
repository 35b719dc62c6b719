"""The live plots: tokens/s, acceptance rate, accepted tokens per step, memory.

Events only append to ring buffers (series.py) and mark the panel dirty; a 10 Hz timer redraws.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt, QTimer
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QVBoxLayout, QWidget

from specdesk.qt import theme
from specdesk.qt.series import MemorySeries, StepSeries

REFRESH_MS = 100  # 10 Hz: smooth enough to watch, cheap enough to never compete with decoding
GIB = 1024**3

PLOT_NAMES = ("tokens_per_second", "acceptance", "accepted_histogram", "memory")


def _legend(title: str, *items: tuple[str, str, str]) -> str:
    keys = " &nbsp;".join(f"<span style='color:{c}'>{mark}&nbsp;{label}</span>" for mark, c, label in items)
    return f"<b style='color:{theme.TEXT}'>{title}</b>&nbsp;&nbsp; <span style='font-size:8pt'>{keys}</span>"


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
        self._dirty = True
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

    def new_generation(self) -> None:
        self.steps.clear()
        self.baseline = None
        self._dirty = True

    def add_step(self, step) -> None:
        self.steps.add_step(step)
        self._dirty = True

    def set_baseline(self, series: StepSeries | None) -> None:
        self.baseline = series
        self._dirty = True

    def add_memory(self, t: float, used: int | None, free: int | None, used_label: str, free_label: str) -> None:
        self.memory.used_label, self.memory.free_label = used_label, free_label
        self.memory.add(t, used, free)
        self._dirty = True

    # ---------------------------------------------------------------- drawing

    def _tick(self) -> None:
        if self._dirty:
            self.refresh()

    def refresh(self) -> None:
        """Push the buffers into the plot items (the timer calls this at most 10 times a second)."""
        self._dirty = False
        s = self.steps
        t = s.t.values()
        self.tps_rolling.setData(t, s.tps_rolling.values(), connect="finite")
        self.tps_cumulative.setData(t, s.tps_cumulative.values(), connect="finite")
        if self.baseline is not None and len(self.baseline.t):
            self.tps_plain.setData(self.baseline.t.values(), self.baseline.tps_cumulative.values(), connect="finite")
        else:
            self.tps_plain.setData([], [])
        self.acc_rolling.setData(t, s.acc_rolling.values(), connect="finite")
        self.acc_cumulative.setData(t, s.acc_cumulative.values(), connect="finite")
        counts = self.histogram_counts()
        self.hist_bars.setOpts(x=np.arange(len(counts)), height=np.asarray(counts, dtype=float))
        self.hist_plot.setXRange(-0.6, max(len(counts) - 1, 1) + 0.6, padding=0)
        step = max(1, len(counts) // 12)  # whole numbers only: k = 32 still readable
        self.hist_plot.getPlotItem().getAxis("bottom").setTicks([[(i, str(i)) for i in range(0, len(counts), step)]])
        self.hist_plot.setYRange(0, max(max(counts, default=0), 1) * 1.08, padding=0)
        m = self.memory
        mt = m.t.values()
        self.mem_used.setData(mt, m.used.values() / GIB, connect="finite")
        self.mem_free.setData(mt, m.free.values() / GIB, connect="finite")
        self._free_vb.enableAutoRange(axis=pg.ViewBox.YAxis)
        self._set_titles()

    def histogram_counts(self) -> list[int]:
        """Steps per number of accepted draft tokens, over 0..k."""
        n = max(len(self.steps.hist), self.steps.max_k + 1, 1)
        return self.steps.hist + [0] * (n - len(self.steps.hist))

    def _set_titles(self) -> None:
        plain = [("┅", theme.PLAIN, "plain decoding")] if self.baseline is not None else []
        c = self.cards
        c["tokens_per_second"].title.setText(_legend("Tokens / s", ("━", theme.TPS, "rolling"),
                                                     ("┅", theme.ACC_CUMULATIVE, "average"), *plain))
        c["acceptance"].title.setText(_legend("Acceptance rate", ("━", theme.ACC_ROLLING, "rolling"),
                                              ("┅", theme.ACC_CUMULATIVE, "cumulative")))
        c["accepted_histogram"].title.setText(_legend("Accepted draft tokens per step",
                                                      ("█", theme.HIST, f"{self.steps.steps} steps")))
        c["memory"].title.setText(_legend("Memory", ("█", theme.MEM_PROCESS, self.memory.used_label),
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
