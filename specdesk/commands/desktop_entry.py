"""``specdesk desktop-entry``: put specdesk in the desktop's application menu (freedesktop.org, Linux and BSD).

``--install`` writes the launcher to ``$XDG_DATA_HOME/applications`` (default ``~/.local/share``) and the icon
to the hicolor theme beside it, with ``Exec`` set to the command that started this specdesk (the pip-installed
script, or the packaged app's executable), so the menu entry works whether or not that folder is on the
desktop session's PATH. ``--uninstall`` removes both. With neither, it prints the entry it would write.
The same entry, with ``Exec=specdesk``, is ``packaging/org.specdesk.Specdesk.desktop`` (a test keeps them equal).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from specdesk.core.errors import SpecdeskError
from specdesk.core.userdirs import APP_ID, icons_dir


ENTRY = """[Desktop Entry]
Type=Application
Name=specdesk
GenericName=Local LLM chat
Comment=Run local LLMs faster with exact speculative decoding, and see why
Exec={exec}
Icon={icon}
Terminal=false
Categories=Science;ArtificialIntelligence;
Keywords=LLM;AI;language model;speculative decoding;chat;GPU;
StartupNotify=true
StartupWMClass=specdesk
"""


def add_parser(sub) -> None:
    p = sub.add_parser("desktop-entry", help="add specdesk to the desktop's application menu (Linux)",
                       description="Print, install or remove the freedesktop.org menu entry and icon for this "
                                   "specdesk (in $XDG_DATA_HOME, default ~/.local/share).")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--install", action="store_true", help="write the menu entry and the icon")
    g.add_argument("--uninstall", action="store_true", help="remove what --install wrote")
    p.add_argument("--exec", dest="exec_command", default=None,
                   help="the command the entry runs (default: the one that started this specdesk)")
    p.set_defaults(func=run)


def launcher_command() -> str:
    """The command line that starts this specdesk, as an absolute path where there is one."""
    if getattr(sys, "frozen", False):  # a packaged (PyInstaller) app: its own executable
        return _quote(str(Path(sys.executable).resolve()))
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name == "specdesk" and argv0.exists():
        return _quote(str(argv0.resolve()))
    found = shutil.which("specdesk")
    if found:
        return _quote(str(Path(found).resolve()))
    return f"{_quote(sys.executable)} -m specdesk"


def _quote(arg: str) -> str:
    """An Exec argument (the Desktop Entry spec quotes with double quotes and escapes \\ " ` $)."""
    if arg and all(c.isalnum() or c in "/._-+" for c in arg):
        return arg
    escaped = "".join("\\" + c if c in '\\"`$' else c for c in arg)
    return f'"{escaped}"'


def render(command: str, icon: str = APP_ID) -> str:
    return ENTRY.format(exec=command, icon=icon)


def data_home() -> Path:
    env = os.environ.get("XDG_DATA_HOME")
    return Path(env) if env and os.path.isabs(env) else Path.home() / ".local" / "share"


def targets(base: Path) -> dict[str, Path]:
    return {"entry": base / "applications" / f"{APP_ID}.desktop",
            "svg": base / "icons" / "hicolor" / "scalable" / "apps" / f"{APP_ID}.svg",
            "png": base / "icons" / "hicolor" / "256x256" / "apps" / f"{APP_ID}.png"}


def install(command: str, base: Path) -> dict[str, Path]:
    paths = targets(base)
    src = icons_dir()
    try:
        for key in ("svg", "png"):
            paths[key].parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / f"{APP_ID}.{key}", paths[key])
        paths["entry"].parent.mkdir(parents=True, exist_ok=True)
        paths["entry"].write_text(render(command), encoding="utf-8")
    except OSError as e:
        raise SpecdeskError(f"cannot write the menu entry: {e.strerror or e} ({e.filename or base})") from None
    # nothing to refresh: desktops watch these folders (a user-level icon-theme.cache written here would
    # hide icons other apps install later without updating it)
    return paths


def uninstall(base: Path) -> list[Path]:
    removed = []
    for p in targets(base).values():
        if p.exists():
            try:
                p.unlink()
            except OSError as e:
                raise SpecdeskError(f"cannot remove {p}: {e.strerror or e}") from None
            removed.append(p)
    return removed


def run(args: argparse.Namespace) -> int:
    command = args.exec_command or launcher_command()
    base = data_home()
    if args.install:
        paths = install(command, base)
        print(f"installed {paths['entry']} (Exec={command}) and the icon in {base / 'icons' / 'hicolor'}")
        return 0
    if args.uninstall:
        removed = uninstall(base)
        print("removed " + ", ".join(map(str, removed)) if removed else f"nothing to remove in {base}")
        return 0
    sys.stdout.write(render(command))
    return 0

