"""The Qt binding keeps Python's reference counts: PySide6 6.12.0 dropped references to None, True and False
on every Python paint() override and emitted signal, so the app (whose plots paint many times a second)
aborted with "Fatal Python error: none_dealloc" after a while, or at exit; the suite aborted with it too
(exit code 134). pyproject caps PySide6 below 6.12: this test is what a new release must pass."""

from __future__ import annotations

import gc
import sys

from PySide6 import QtCore, QtGui, QtWidgets


def counts() -> tuple[int, int, int]:
    gc.collect()
    return sys.getrefcount(None), sys.getrefcount(True), sys.getrefcount(False)


class Box(QtWidgets.QGraphicsRectItem):
    def paint(self, painter, option, widget=None):  # a Python override of a C++ virtual, as pyqtgraph's items
        painter.drawRect(self.rect())


class Flag(QtCore.QObject):
    changed = QtCore.Signal(bool)


def test_paint_overrides_and_signals_keep_none_true_and_false_alive(qapp):
    scene = QtWidgets.QGraphicsScene()
    scene.addItem(Box(0, 0, 10, 10))
    image = QtGui.QImage(32, 32, QtGui.QImage.Format.Format_ARGB32)
    flag, seen, timer = Flag(), [0, 0], QtCore.QTimer()
    flag.changed.connect(lambda on: seen.__setitem__(on, seen[on] + 1))  # counts, holds no bool
    before = counts()
    for i in range(500):
        painter = QtGui.QPainter(image)
        scene.render(painter)
        painter.end()
        flag.changed.emit(i % 2 == 0)
        timer.timeout.emit()
    after = counts()
    assert seen == [250, 250]
    # a correct binding leaves them where they were, give or take what the collector had not yet freed;
    # 6.12.0 lost about 3 references to None per paint and more per emit (thousands here)
    assert all(abs(a - b) < 100 for a, b in zip(after, before)), (before, after)
