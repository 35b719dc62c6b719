"""One dark theme for the whole app: a palette, a style sheet and pyqtgraph defaults.

Colours live here only, so the chat, the plots and the exported report agree on what green means.
"""

from __future__ import annotations

BG = "#15171c"
PANEL = "#1c1f26"
PANEL_2 = "#242832"
BORDER = "#333a47"
TEXT = "#e4e7ec"
MUTED = "#8d96a5"
ACCENT = "#5b9cff"
DRAFT = "#46d39a"  # tokens the draft proposed and the target accepted
DRAFT_BG = "#173a2d"
TARGET = TEXT  # tokens the target produced itself
USER_BG = "#222a3a"
ERROR = "#ff7b72"
WARN = "#f2b84b"
PLAIN = "#9aa3b2"  # plain-decoding baseline in plots

# plot series
TPS = ACCENT
ACC_ROLLING = WARN
ACC_CUMULATIVE = "#d0d5de"
HIST = "#7aa7ff"
MEM_PROCESS = "#c792ea"
MEM_FREE = "#56b6c2"

MONO_FAMILIES = ("JetBrains Mono", "Cascadia Code", "Menlo", "Consolas", "DejaVu Sans Mono", "monospace")


def mono_font(point_size: int = 10):
    from PySide6.QtGui import QFont, QFontDatabase

    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    families = set(QFontDatabase.families())
    for fam in MONO_FAMILIES:
        if fam in families:
            font = QFont(fam)
            break
    font.setStyleHint(QFont.StyleHint.Monospace)
    font.setPointSize(point_size)
    return font


STYLE = f"""
QWidget {{ background: {BG}; color: {TEXT}; font-size: 10pt; }}
QMainWindow::separator {{ background: {BORDER}; width: 1px; }}
QSplitter::handle {{ background: {BORDER}; }}
QFrame#panel {{ background: {PANEL}; border: 1px solid {BORDER}; border-radius: 8px; }}
QFrame#card {{ background: {PANEL_2}; border: 1px solid {BORDER}; border-radius: 8px; }}
QLabel {{ background: transparent; }}
QLabel#cardValue {{ font-size: 17pt; font-weight: 600; }}
QLabel#cardTitle, QLabel#muted {{ color: {MUTED}; font-size: 9pt; }}
QLabel#title {{ font-size: 11pt; font-weight: 600; }}
QLabel#pair {{ font-size: 11pt; font-weight: 600; }}
QTextEdit, QPlainTextEdit, QTextBrowser {{
    background: {PANEL}; border: 1px solid {BORDER}; border-radius: 8px; padding: 6px;
    selection-background-color: {ACCENT}; }}
QLineEdit, QSpinBox, QDoubleSpinBox, QComboBox {{
    background: {PANEL_2}; border: 1px solid {BORDER}; border-radius: 5px; padding: 3px 6px; min-height: 20px; }}
QComboBox QAbstractItemView {{ background: {PANEL_2}; selection-background-color: {ACCENT}; }}
QComboBox:disabled, QSpinBox:disabled, QDoubleSpinBox:disabled {{ color: {MUTED}; }}
QPushButton {{ background: {PANEL_2}; border: 1px solid {BORDER}; border-radius: 6px; padding: 5px 14px; }}
QPushButton:hover {{ border-color: {ACCENT}; }}
QPushButton:disabled {{ color: #5d6572; border-color: #2a2f39; }}
QPushButton#primary {{ background: {ACCENT}; color: #0b1220; border: none; font-weight: 600; }}
QPushButton#primary:disabled {{ background: #2c3f60; color: #7d8aa0; }}
QPushButton#danger {{ border-color: #6b3030; }}
QPushButton#danger:enabled {{ color: {ERROR}; }}
QCheckBox {{ background: transparent; }}
QMenuBar {{ background: {PANEL}; border-bottom: 1px solid {BORDER}; }}
QMenuBar::item:selected, QMenu::item:selected {{ background: {ACCENT}; color: #0b1220; }}
QMenu {{ background: {PANEL_2}; border: 1px solid {BORDER}; }}
QStatusBar {{ background: {PANEL}; border-top: 1px solid {BORDER}; color: {MUTED}; }}
QStatusBar QLabel {{ color: {MUTED}; padding: 0 8px; }}
QHeaderView::section {{ background: {PANEL_2}; color: {MUTED}; border: none; border-bottom: 1px solid {BORDER};
    padding: 4px 6px; }}
QTableWidget, QTableView, QListWidget, QTreeWidget {{ background: {PANEL}; border: 1px solid {BORDER};
    border-radius: 6px; gridline-color: {BORDER}; selection-background-color: #2d4a7a; }}
QGroupBox {{ border: 1px solid {BORDER}; border-radius: 8px; margin-top: 14px; padding-top: 8px; }}
QGroupBox::title {{ subcontrol-origin: margin; left: 10px; padding: 0 4px; color: {MUTED}; }}
QProgressBar {{ background: {PANEL_2}; border: 1px solid {BORDER}; border-radius: 5px; text-align: center; }}
QProgressBar::chunk {{ background: {ACCENT}; border-radius: 4px; }}
QToolTip {{ background: {PANEL_2}; color: {TEXT}; border: 1px solid {BORDER}; }}
QScrollBar:vertical {{ background: {PANEL}; width: 10px; }}
QScrollBar::handle:vertical {{ background: {BORDER}; border-radius: 4px; min-height: 24px; }}
QScrollBar::add-line, QScrollBar::sub-line {{ height: 0; }}
"""


def configure_pyqtgraph() -> None:
    import pyqtgraph as pg

    pg.setConfigOptions(background=PANEL, foreground=MUTED, antialias=True)


def apply(app) -> None:
    """Style the application (call once, after the QApplication exists)."""
    from PySide6.QtGui import QColor, QPalette

    app.setStyle("Fusion")
    pal = QPalette()
    for role, colour in ((QPalette.ColorRole.Window, BG), (QPalette.ColorRole.Base, PANEL),
                         (QPalette.ColorRole.AlternateBase, PANEL_2), (QPalette.ColorRole.Text, TEXT),
                         (QPalette.ColorRole.WindowText, TEXT), (QPalette.ColorRole.Button, PANEL_2),
                         (QPalette.ColorRole.ButtonText, TEXT), (QPalette.ColorRole.Highlight, ACCENT),
                         (QPalette.ColorRole.ToolTipBase, PANEL_2), (QPalette.ColorRole.ToolTipText, TEXT),
                         (QPalette.ColorRole.PlaceholderText, MUTED)):
        pal.setColor(role, QColor(colour))
    app.setPalette(pal)
    app.setStyleSheet(STYLE)
    configure_pyqtgraph()
