"""The desktop app: PySide6 + pyqtgraph. Draws and forwards; the engine lives in specdesk.core."""
