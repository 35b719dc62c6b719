"""The server panel: what a server's /metrics says, live (tokens/s, acceptance, accepted length, per position).

A poller reads ``GET /metrics`` once a second on a background thread (never on the GUI thread: a slow
server must not freeze the window) and hands the parsed counters over by a queued signal; core's
``figures`` turns two scrapes into rates. The plots share the main plots' look (plots.py).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QVBoxLayout

from specdesk.core.remote import figures as F
from specdesk.qt import theme
from specdesk.qt.plots import PlotCard, _legend, _pen, _plot
from specdesk.qt.series import Ring

POLL_MS = 1000


class MetricsPoller(QObject):
    scraped = Signal(object)  # figures.Counters
    failed = Signal(str)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.endpoint = None
        self._busy = False
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self.poll)

    def watch(self, url: str, api_key: str | None = None) -> None:
        from specdesk.core.remote.client import Endpoint

        self.endpoint = Endpoint(url, api_key)
        self._timer.start()
        self.poll()

    def stop(self) -> None:
        self._timer.stop()
        self.endpoint = None

    def poll(self) -> None:
        ep = self.endpoint
        if ep is None or self._busy:
            return
        self._busy = True

        def fetch() -> None:
            from specdesk.core.remote.promtext import parse

            try:
                text = ep.metrics_text(timeout=3.0)
                self.scraped.emit(F.read_counters(parse(text), time.monotonic()))
            except Exception as e:  # noqa: BLE001 - a server without /metrics is not an error worth a dialog
                self.failed.emit(str(e))
            finally:
                self._busy = False

        threading.Thread(target=fetch, daemon=True, name="specdesk-metrics-poll").start()


class ServerPanel(QFrame):
    """Four small plots and one line of gauges; fed by the poller."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("pane")
        self.poller = MetricsPoller(self)
        self.poller.scraped.connect(self.add_counters)
        self.poller.failed.connect(self._on_failed)
        self.t0 = time.monotonic()
        self.t, self.tps, self.acc, self.mal = Ring(600), Ring(600), Ring(600), Ring(600)
        self.per_position: tuple[float, ...] = ()
        self.last: F.Counters | None = None
        self.first: F.Counters | None = None
        self.latest: F.ServerFigures | None = None
        self.url = ""

        self.title = QLabel("Server")
        self.title.setWordWrap(True)
        self.gauges = QLabel("")
        self.gauges.setObjectName("muted")
        self.gauges.setWordWrap(True)
        self.tps_plot = _plot(self, "tokens/s", "seconds")
        self.tps_line = self.tps_plot.plot(pen=_pen(theme.TPS))
        self.acc_plot = _plot(self, "accepted / drafted", "seconds")
        self.acc_plot.setYRange(-0.06, 1.06, padding=0)
        self.acc_line = self.acc_plot.plot(pen=_pen(theme.ACC_ROLLING))
        self.mal_plot = _plot(self, "tokens / step", "seconds")
        self.mal_line = self.mal_plot.plot(pen=_pen(theme.DRAFT))
        self.pos_plot = _plot(self, "acceptance", "draft position")
        self.pos_plot.setYRange(0, 1.05, padding=0)
        self.pos_bars = pg.BarGraphItem(x=[0], height=[0], width=0.7, brush=theme.HIST, pen=pg.mkPen(None))
        self.pos_plot.addItem(self.pos_bars)
        for w in (self.tps_plot, self.acc_plot, self.mal_plot, self.pos_plot):
            w.setMinimumSize(120, 90)
        self.cards = {
            "tps": PlotCard(self.tps_plot), "acc": PlotCard(self.acc_plot), "mal": PlotCard(self.mal_plot),
            "pos": PlotCard(self.pos_plot)}
        self.cards["tps"].title.setText(_legend("Server tokens / s", ("━", theme.TPS, "generation tokens")))
        self.cards["acc"].title.setText(_legend("Server acceptance", ("━", theme.ACC_ROLLING, "per second")))
        self.cards["mal"].title.setText(_legend("Mean accepted length", ("━", theme.DRAFT, "incl. bonus token")))
        self.cards["pos"].title.setText(_legend("Acceptance by position", ("█", theme.HIST, "since connected")))
        grid = QGridLayout()
        grid.setSpacing(6)
        for i, card in enumerate(self.cards.values()):
            grid.addWidget(card, 0, i)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 4, 0, 0)
        lay.setSpacing(4)
        lay.addWidget(self.title)
        lay.addLayout(grid)
        lay.addWidget(self.gauges)
        self.setMaximumHeight(250)

    # ---------------------------------------------------------------- control

    def watch(self, url: str, api_key: str | None = None) -> None:
        self.clear()
        self.url = url
        self.title.setText(f"<b style='color:{theme.TEXT}'>Server</b> &nbsp;<span style='color:{theme.MUTED}'>"
                           f"{url} · /metrics every {POLL_MS // 1000} s</span>")
        self.show()
        self.poller.watch(url, api_key)

    def stop(self) -> None:
        self.poller.stop()
        self.hide()

    def clear(self) -> None:
        for r in (self.t, self.tps, self.acc, self.mal):
            r.clear()
        self.last = self.first = self.latest = None
        self.per_position = ()
        self.t0 = time.monotonic()

    # ---------------------------------------------------------------- data

    def add_counters(self, c: F.Counters) -> None:
        if self.first is None:
            self.first = c
        if self.last is not None:
            fig = F.figures(self.last, c)
            self.latest = fig
            self.t.append(c.time - self.t0)
            self.tps.append(fig.tokens_per_second)
            self.acc.append(fig.acceptance_rate)
            self.mal.append(fig.mean_accepted_length)
            whole = F.figures(self.first, c)
            self.per_position = whole.per_position
            self._gauges(fig, c)
        self.last = c
        self.refresh()

    def _gauges(self, fig: F.ServerFigures, c: F.Counters) -> None:
        parts = [f"names {c.prefix or 'none (no spec-decode counters)'}"]
        if fig.running is not None:
            parts.append(f"running {fig.running:.0f}")
        if fig.waiting is not None:
            parts.append(f"waiting {fig.waiting:.0f}")
        if fig.kv_usage is not None:
            parts.append(f"KV cache {fig.kv_usage:.0%}")
        if fig.memory_bytes is not None:
            parts.append(f"memory {fig.memory_bytes / 2**30:.2f} GiB")
        whole = F.figures(self.first, c) if self.first is not None else None
        if whole is not None and whole.acceptance_rate is not None:
            parts.append(f"acceptance since connected {whole.acceptance_rate:.0%}, "
                         f"{whole.mean_accepted_length:.2f} tokens/step")
        self.gauges.setText(" · ".join(parts))

    def _on_failed(self, msg: str) -> None:
        self.gauges.setText(f"/metrics not readable: {msg}")

    def refresh(self) -> None:
        t = self.t.values()
        self.tps_line.setData(t, self.tps.values(), connect="finite")
        self.acc_line.setData(t, self.acc.values(), connect="finite")
        self.mal_line.setData(t, self.mal.values(), connect="finite")
        pos = self.per_position or (0.0,)
        self.pos_bars.setOpts(x=np.arange(1, len(pos) + 1), height=np.asarray(pos, dtype=float))
        self.pos_plot.setXRange(0.4, len(pos) + 0.6, padding=0)
