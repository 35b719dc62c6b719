"""What installs the desktop app: the menu entry, the icon, the AppStream metadata, `specdesk desktop-entry`.

The PyInstaller build itself is not run here (minutes, a gigabyte): `python packaging/build.py` builds it and
checks that the built app starts and renders its window.
"""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from specdesk.commands import desktop_entry as de

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
DESKTOP = PACKAGING / f"{de.APP_ID}.desktop"
METAINFO = PACKAGING / f"{de.APP_ID}.metainfo.xml"


def _entry(text: str) -> dict:
    cp = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    cp.optionxform = str  # keys are case-sensitive
    cp.read_string(text)
    return dict(cp["Desktop Entry"])


def test_the_packaging_entry_is_the_commands_entry_and_well_formed():
    text = DESKTOP.read_text()
    assert text == de.render("specdesk")  # one entry: what packagers install is what the command writes
    e = _entry(text)
    assert e["Type"] == "Application" and e["Exec"] == "specdesk" and e["Terminal"] == "false"
    assert e["Icon"] == de.APP_ID and e["Name"] == "specdesk" and e["Comment"]
    for key in ("Categories", "Keywords"):
        assert e[key].endswith(";")  # lists end with a semicolon (Desktop Entry Specification)
    for ext in ("svg", "png"):
        assert (ROOT / "resources" / "icons" / f"{de.APP_ID}.{ext}").stat().st_size > 500
    assert (ROOT / "resources" / "icons" / f"{de.APP_ID}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None, reason="desktop-file-utils not installed")
def test_the_entry_passes_desktop_file_validate():
    r = subprocess.run(["desktop-file-validate", str(DESKTOP)], capture_output=True, text=True)
    assert r.returncode == 0 and "error" not in r.stdout.lower(), r.stdout


def test_the_appstream_metadata_names_the_entry_and_the_licence():
    root = ET.parse(METAINFO).getroot()
    assert root.tag == "component" and root.get("type") == "desktop-application"
    assert root.findtext("id") == de.APP_ID
    assert root.find("launchable").text == f"{de.APP_ID}.desktop" and root.find("launchable").get("type") == "desktop-id"
    licence = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]["text"]
    assert root.findtext("project_license") == licence and root.findtext("metadata_license") == "CC0-1.0"
    assert root.find("provides/binary").text == "specdesk"
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert root.find("releases/release").get("version") == version
    assert len(root.findtext("summary")) < 80 and root.find("description/p") is not None


@pytest.mark.skipif(shutil.which("appstreamcli") is None, reason="appstream not installed")
def test_the_appstream_metadata_passes_appstreamcli():
    r = subprocess.run(["appstreamcli", "validate", "--no-net", str(METAINFO)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_desktop_entry_install_writes_into_xdg_data_home_and_uninstall_removes_it(tmp_path, monkeypatch, capsys):
    from specdesk.cli import main

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    assert main(["desktop-entry", "--install"]) == 0
    entry = tmp_path / "share" / "applications" / f"{de.APP_ID}.desktop"
    svg = tmp_path / "share" / "icons" / "hicolor" / "scalable" / "apps" / f"{de.APP_ID}.svg"
    png = tmp_path / "share" / "icons" / "hicolor" / "256x256" / "apps" / f"{de.APP_ID}.png"
    assert entry.exists() and svg.read_bytes() == (ROOT / "resources" / "icons" / svg.name).read_bytes()
    assert png.exists() and str(entry) in capsys.readouterr().out
    e = _entry(entry.read_text())
    assert e["Icon"] == de.APP_ID
    # Exec runs this specdesk by an absolute path (a menu's PATH may not hold a pip --user or venv bin folder)
    argv = shlex.split(e["Exec"])
    assert Path(argv[0]).is_absolute() and os.access(argv[0], os.X_OK)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(argv + ["--version"], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("specdesk "), r.stderr[-2000:]
    assert main(["desktop-entry", "--uninstall"]) == 0
    assert not entry.exists() and not svg.exists() and not png.exists()
    assert main(["desktop-entry", "--uninstall"]) == 0 and "nothing to remove" in capsys.readouterr().out


def test_exec_quoting_follows_the_desktop_entry_spec():
    assert de._quote("/usr/bin/specdesk") == "/usr/bin/specdesk"
    assert de._quote("/home/a b/bin/specdesk") == '"/home/a b/bin/specdesk"'
    assert de._quote('/x/$HOME"q') == '"/x/\\$HOME\\"q"'
    assert shlex.split(de._quote("/home/a b/bin/specdesk")) == ["/home/a b/bin/specdesk"]


def test_an_unwritable_data_home_is_one_line(tmp_path, monkeypatch, capsys):
    from specdesk.cli import main

    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "file"))  # a file where the folder should be
    assert main(["desktop-entry", "--install"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specdesk: error: cannot write the menu entry") and "\n" not in err


def test_the_build_script_and_spec_point_at_real_files():
    spec = (PACKAGING / "specdesk.spec").read_text()
    for rel in ("resources/models", "resources/icons", "packaging/launcher.py"):
        parts = rel.split("/")
        assert all(f'"{p}"' in spec for p in parts) and (ROOT / rel).exists()
    r = subprocess.run([sys.executable, str(PACKAGING / "build.py"), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--check-only" in r.stdout
