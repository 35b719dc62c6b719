"""Starting the desktop app: the QApplication, the theme, the main window, the first pair to load."""

from __future__ import annotations

import os
import sys

from specdesk.qt.worker import LoadRequest


def make_app():
    """The QApplication (created once), styled; offscreen when a Linux box has no display."""
    from specdesk.qt.export import ensure_qapp

    app = ensure_qapp()
    app.setApplicationName("specdesk")
    app.setOrganizationName("specdesk")
    _set_icon(app)
    return app


def _set_icon(app) -> None:
    """The window icon, and the desktop entry's name (Wayland shells match windows to menu entries by it)."""
    from PySide6.QtGui import QIcon

    from specdesk.core.userdirs import APP_ID, icons_dir

    app.setDesktopFileName(APP_ID)
    icon = QIcon()
    for ext in ("svg", "png"):
        path = icons_dir() / f"{APP_ID}.{ext}"
        if path.exists():
            icon.addFile(str(path))
    if not icon.isNull():
        app.setWindowIcon(icon)


def startup_request(target: str | None, draft: str | None, saved: LoadRequest | None) -> LoadRequest:
    """What to load at start: the command line, else the last pair, else the bundled demo pair. A target given without
    a draft takes a draft distilled for it (bundled or made here), if there is one, as `specdesk generate` and `serve` do (SmolLM2's
    GGUF started with n-gram lookup alone here: ~1.0x where its draft gives ~1.3-1.4x)."""
    if target is not None or draft is not None:
        t = target or "demo-target"
        from specdesk.core.pairing import may_take_own_draft

        drafter = "model" if (draft is not None or t == "demo-target") else None  # None: the engine's default
        if draft is None and t == "demo-target":
            draft = "demo-draft"
        elif may_take_own_draft(t, draft, drafter):
            from specdesk.core.discovery import own_draft

            draft = own_draft(t)  # None for most targets (read from the header; a bundled draft's shapes are hashed)
        return LoadRequest(target=t, draft=draft, drafter=drafter)
    return saved or LoadRequest("demo-target", "demo-draft", "model")


def _has_display() -> bool:
    if not sys.platform.startswith("linux") or os.environ.get("QT_QPA_PLATFORM"):
        return True  # macOS and Windows always have one; an explicit platform is the user's choice
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _build_kernels_in_background() -> None:
    """specdesk's own CPU kernels build once per machine (seconds, core/kernels); off the GUI thread, so that neither
    the first model load nor the planner (which counts a q4 head by them) waits for the compiler on screen."""
    import threading

    from specdesk.core import kernels

    threading.Thread(target=kernels.library, daemon=True, name="specdesk-kernels").start()


def run_app(target: str | None = None, draft: str | None = None) -> int:
    from specdesk.core.errors import SpecdeskError

    if not _has_display():
        raise SpecdeskError("the desktop app needs a display (neither DISPLAY nor WAYLAND_DISPLAY is set); "
                            "headless, use `specdesk generate`, `specdesk screenshot` or `specdesk report`")
    from specdesk.qt.platform_check import check

    problem = check()  # before Qt starts: a missing X11 library would make it abort without naming a package
    if problem:
        raise SpecdeskError(problem)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _build_kernels_in_background()
    app = make_app()
    from specdesk.qt.main_window import MainWindow

    win = MainWindow()
    win.show()
    win.load_pair(startup_request(target, draft, win.saved_pair()), startup=True,
                  asked=target is not None or draft is not None)
    return int(app.exec())


if __name__ == "__main__":
    sys.exit(run_app())
