"""specdesk.core and specdesk.hw never import Qt, pyqtgraph or the GUI layer."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_linter_contract_holds():
    r = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    kept = re.search(r"(\d+) kept, 0 broken", r.stdout)  # core/hw and the server's contracts (and any later)
    assert kept and int(kept.group(1)) >= 2, r.stdout


def test_importing_every_core_and_hw_module_loads_no_qt():
    code = (
        "import importlib, pkgutil, sys, specdesk.core, specdesk.hw, specdesk.core.remote, specdesk.serve\n"
        "for pkg in (specdesk.core, specdesk.hw, specdesk.core.remote, specdesk.serve):\n"
        "    for m in pkgutil.iter_modules(pkg.__path__):\n"
        "        importlib.import_module(pkg.__name__ + '.' + m.name)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'shiboken6') or m.startswith('specdesk.qt')]\n"
        "print(len(bad), bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
