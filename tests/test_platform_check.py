"""Before Qt starts, missing X11 libraries are named with the packages that provide them (exit 2)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specdesk.qt import platform_check as pc

DATA = Path(__file__).resolve().parent / "data"
X11 = {"DISPLAY": ":0"}


def test_ldd_output_of_a_system_without_two_xcb_libraries():
    """Recorded on a Debian-based machine lacking libxcb-icccm4 and libxcb-keysyms1 (each listed twice by ldd)."""
    missing = pc.parse_ldd((DATA / "ldd-libqxcb-missing.txt").read_text())
    assert missing == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
    hint = pc.install_hint(missing)
    assert hint == ("Debian/Ubuntu: sudo apt install libxcb-icccm4 libxcb-keysyms1; "
                    "Fedora: sudo dnf install xcb-util-wm xcb-util-keysyms")


def test_hints_for_qt_own_and_unknown_libraries():
    assert "reinstall" in pc.install_hint(["libQt6XcbQpa.so.6"]) and "apt" not in pc.install_hint(["libQt6Gui.so.6"])
    hint = pc.install_hint(["libxcb-cursor.so.0", "libweird.so.3"])
    assert "libxcb-cursor0" in hint and "xcb-util-cursor" in hint and "apt-file search" in hint


def test_only_an_x11_start_is_checked():
    assert pc.wants_xcb({"DISPLAY": ":0"}, "linux")
    assert pc.wants_xcb({"DISPLAY": ":0", "QT_QPA_PLATFORM": "xcb"}, "linux")
    assert not pc.wants_xcb({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, "linux")
    assert not pc.wants_xcb({"QT_QPA_PLATFORM": "wayland", "DISPLAY": ":0"}, "linux")
    assert not pc.wants_xcb({"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"}, "linux")  # Qt tries Wayland first
    assert not pc.wants_xcb({}, "linux")  # no display: the app's own "needs a display" message
    assert not pc.wants_xcb({"DISPLAY": ":0"}, "darwin")


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("ldd") is None, reason="needs Linux ldd")
def test_a_real_plugin_whose_library_is_missing(tmp_path):
    """PySide6's real xcb plugin, beside a copy of Qt's XcbQpa library that needs libxcb-icccm.so.9 (no such
    library anywhere): the real dynamic linker reports it, and the check names the packages."""
    plugin = pc.xcb_plugin()
    if plugin is None:
        pytest.skip("PySide6 without its xcb plugin")
    qt_lib = plugin.parent.parent.parent / "lib"
    (tmp_path / "plugins" / "platforms").mkdir(parents=True)
    lib = tmp_path / "lib"
    lib.mkdir()
    for f in qt_lib.iterdir():
        if f.name != "libQt6XcbQpa.so.6":
            (lib / f.name).symlink_to(f)
    data = (qt_lib / "libQt6XcbQpa.so.6").read_bytes()
    assert b"libxcb-icccm.so.4\0" in data
    (lib / "libQt6XcbQpa.so.6").write_bytes(data.replace(b"libxcb-icccm.so.4\0", b"libxcb-icccm.so.9\0"))
    copy = tmp_path / "plugins" / "platforms" / "libqxcb.so"
    shutil.copy(plugin, copy)

    assert "libxcb-icccm.so.9" in pc.missing_libraries(copy)
    line = pc.check(X11, copy)
    assert line is not None and "\n" not in line
    assert "libxcb-icccm.so.9" in line and "sudo apt install" in line and "libxcb-icccm4" in line
    assert "sudo dnf install" in line and "xcb-util-wm" in line
    assert pc.check({**X11, "QT_QPA_PLATFORM": "offscreen"}, copy) is None


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("ldd") is None, reason="needs Linux ldd")
def test_the_command_exits_2_with_one_line_when_libraries_are_missing():
    """`specdesk` itself, on X11: if this machine lacks some of the plugin's libraries it must say which, in
    one line, exit 2, and never reach Qt's abort; if it has them all the check stays silent."""
    plugin = pc.xcb_plugin()
    if plugin is None:
        pytest.skip("PySide6 without its xcb plugin")
    missing = pc.missing_libraries(plugin)
    if not missing:
        assert pc.check(X11, plugin) is None
        return
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env["DISPLAY"] = ":0"
    r = subprocess.run([sys.executable, "-m", "specdesk"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specdesk: error: the desktop app cannot start")
    assert all(name in lines[0] for name in missing) and "Could not load the Qt platform plugin" not in r.stderr
