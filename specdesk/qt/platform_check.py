"""Before Qt starts: does this Linux system have the libraries Qt's X11 (xcb) platform plugin needs?

Without them Qt prints "Could not load the Qt platform plugin "xcb" ... no Qt platform plugin could be
initialized" and aborts, naming no package. PySide6's wheels carry Qt itself but not the X11 client
libraries of the system (libxcb-cursor0, libxcb-icccm4 and friends, absent from minimal Debian and
Ubuntu installs). This module asks the dynamic linker (``ldd`` on the plugin, which follows every
dependency the way loading it would) which ones are missing, and says which packages provide them.

It imports no Qt module (finding PySide6's folder does not load it), so it can run before any Qt code.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# soname without its version -> (Debian/Ubuntu package, Fedora package)
PACKAGES: dict[str, tuple[str, str]] = {
    "libxcb-cursor": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-image": ("libxcb-image0", "xcb-util-image"),
    "libxcb-keysyms": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-render-util": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-util": ("libxcb-util1", "xcb-util"),
    "libxcb-randr": ("libxcb-randr0", "libxcb"),
    "libxcb-shm": ("libxcb-shm0", "libxcb"),
    "libxcb-sync": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes": ("libxcb-xfixes0", "libxcb"),
    "libxcb-render": ("libxcb-render0", "libxcb"),
    "libxcb-shape": ("libxcb-shape0", "libxcb"),
    "libxcb-xkb": ("libxcb-xkb1", "libxcb"),
    "libxcb-xinerama": ("libxcb-xinerama0", "libxcb"),
    "libxcb-xinput": ("libxcb-xinput0", "libxcb"),
    "libxcb-glx": ("libxcb-glx0", "libxcb"),
    "libxcb": ("libxcb1", "libxcb"),
    "libxkbcommon-x11": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libxkbcommon": ("libxkbcommon0", "libxkbcommon"),
    "libX11-xcb": ("libx11-xcb1", "libX11-xcb"),
    "libX11": ("libx11-6", "libX11"),
    "libXau": ("libxau6", "libXau"),
    "libXdmcp": ("libxdmcp6", "libXdmcp"),
    "libSM": ("libsm6", "libSM"),
    "libICE": ("libice6", "libICE"),
    "libGL": ("libgl1", "libglvnd-glx"),
    "libGLX": ("libglx0", "libglvnd-glx"),
    "libEGL": ("libegl1", "libglvnd-egl"),
    "libOpenGL": ("libopengl0", "libglvnd-opengl"),
    "libGLdispatch": ("libglvnd0", "libglvnd"),
    "libfontconfig": ("libfontconfig1", "fontconfig"),
    "libfreetype": ("libfreetype6", "freetype"),
    "libglib-2.0": ("libglib2.0-0", "glib2"),
    "libgthread-2.0": ("libglib2.0-0", "glib2"),
    "libdbus-1": ("libdbus-1-3", "dbus-libs"),
    "libz": ("zlib1g", "zlib"),
    "libpng16": ("libpng16-16", "libpng"),
    "libexpat": ("libexpat1", "expat"),
}
_NOT_FOUND = re.compile(r"^\s*(\S+)\s*=>\s*not found", re.M)


def xcb_plugin() -> Path | None:
    """PySide6's xcb platform plugin (``.../PySide6/Qt/plugins/platforms/libqxcb.so``), or None."""
    try:
        spec = importlib.util.find_spec("PySide6")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        plugin = Path(folder) / "Qt" / "plugins" / "platforms" / "libqxcb.so"
        if plugin.exists():
            return plugin
    return None


def parse_ldd(text: str) -> list[str]:
    """The sonames ``ldd`` reports as "not found", each once, in its order."""
    out: list[str] = []
    for name in _NOT_FOUND.findall(text):
        if name not in out:
            out.append(name)
    return out


def missing_libraries(plugin: Path) -> list[str] | None:
    """Libraries the dynamic linker cannot find for ``plugin``; None when that cannot be told (no ldd)."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return None
    try:
        r = subprocess.run([ldd, str(plugin)], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_ldd(r.stdout + r.stderr)


def _base(soname: str) -> str:
    return soname.split(".so", 1)[0]


def install_hint(sonames: list[str]) -> str:
    """'Debian/Ubuntu: sudo apt install ...; Fedora: sudo dnf install ...' for the system libraries among
    ``sonames`` (Qt's own, inside PySide6, are a broken PySide6 install instead)."""
    debian: list[str] = []
    fedora: list[str] = []
    for name in sonames:
        pkgs = PACKAGES.get(_base(name))
        if pkgs is None:
            continue
        if pkgs[0] not in debian:
            debian.append(pkgs[0])
        if pkgs[1] not in fedora:
            fedora.append(pkgs[1])
    parts = []
    if debian:
        parts.append(f"Debian/Ubuntu: sudo apt install {' '.join(debian)}; Fedora: sudo dnf install {' '.join(fedora)}")
    unknown = [n for n in sonames if _base(n) not in PACKAGES]
    qt_own = [n for n in unknown if n.startswith(("libQt6", "libicu", "libpyside6", "libshiboken6"))]
    if qt_own:
        parts.append("PySide6's own libraries are missing: reinstall it (python -m pip install --force-reinstall "
                     "PySide6-Essentials)")
    if len(qt_own) < len(unknown):
        parts.append("find the package of any other with `apt-file search NAME` or `dnf provides '*/NAME'`")
    return "; ".join(parts)


def wants_xcb(env: dict | None = None, platform: str | None = None) -> bool:
    """Will Qt start on X11 here? Linux, a DISPLAY, and no other platform asked for (QT_QPA_PLATFORM
    offscreen, wayland, ...); with WAYLAND_DISPLAY set and no choice made Qt tries Wayland first."""
    env = os.environ if env is None else env
    if not (platform or sys.platform).startswith("linux"):
        return False
    asked = (env.get("QT_QPA_PLATFORM") or "").strip()
    if asked:
        return asked.split(";", 1)[0].split(":", 1)[0] == "xcb"
    return bool(env.get("DISPLAY")) and not env.get("WAYLAND_DISPLAY")


def check(env: dict | None = None, plugin: Path | None = None) -> str | None:
    """None when Qt's X11 platform can load (or is not going to be used); else one line naming the missing
    libraries and the commands that install them."""
    if not wants_xcb(env):
        return None
    plugin = plugin or xcb_plugin()
    if plugin is None:
        return None  # not a PySide6 wheel layout: let Qt speak for itself
    missing = missing_libraries(plugin)
    if not missing:
        return None
    return (f"the desktop app cannot start: Qt's X11 platform plugin needs libraries this system lacks: "
            f"{', '.join(missing)}. {install_hint(missing)}. (Headless, `specdesk screenshot` and the other "
            f"commands work without them.)")
