"""Build the one-folder desktop app with PyInstaller, check that it starts, and say what it weighs.

    python -m pip install pyinstaller        # once, into the environment that runs specdesk
    python packaging/build.py                # -> dist/specdesk/specdesk (a folder you can copy or archive)
    python packaging/build.py --check-only   # re-check an existing build
    python packaging/build.py --archive      # also dist/specdesk-<version>-<platform>.tar.gz

The check runs the built executable, not the source: `specdesk --version`, then `specdesk screenshot` offscreen
(the demo pair loads from inside the bundle, generates, and the window is rendered to a PNG), with settings and
session logs in a temporary folder. The build uses whatever torch is installed: the CPU build gives a much
smaller folder than a CUDA build, which carries the CUDA libraries.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "dist"
APP = DIST / "specdesk"


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def build() -> None:
    cmd = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--clean", "--log-level", "WARN",
           "--distpath", str(DIST), "--workpath", str(ROOT / "build" / "pyinstaller"),
           str(ROOT / "packaging" / "specdesk.spec")]
    print("+", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    subprocess.run(cmd, cwd=ROOT, check=True)
    print(f"built {APP} in {time.monotonic() - t0:.0f} s", flush=True)


def check() -> Path:
    """Run the built app: --version, then a real generation rendered offscreen to a PNG."""
    exe = APP / ("specdesk.exe" if os.name == "nt" else "specdesk")
    if not exe.exists():
        raise SystemExit(f"no build at {exe}: run without --check-only first")
    with tempfile.TemporaryDirectory(prefix="specdesk-build-check-") as tmp:
        env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "SPECDESK_CONFIG_DIR": f"{tmp}/config",
               "SPECDESK_DATA_DIR": f"{tmp}/data", "HF_HUB_OFFLINE": "1"}
        env.pop("PYTHONPATH", None)  # the bundle must stand on its own
        r = subprocess.run([str(exe), "--version"], env=env, capture_output=True, text=True, timeout=300, cwd=tmp)
        if r.returncode != 0 or not r.stdout.startswith("specdesk "):
            raise SystemExit(f"`specdesk --version` failed ({r.returncode}):\n{r.stdout}{r.stderr[-3000:]}")
        print(r.stdout.strip(), flush=True)
        shot = ROOT / "build" / "packaged-screenshot.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        r = subprocess.run([str(exe), "screenshot", str(shot), "--max-new-tokens", "48", "--no-compare"], env=env,
                           capture_output=True, text=True, timeout=900, cwd=tmp)
        if r.returncode != 0 or not shot.exists() or shot.stat().st_size < 20_000:
            raise SystemExit(f"`specdesk screenshot` failed ({r.returncode}):\n{r.stdout}{r.stderr[-3000:]}")
        print(f"the built app started, generated and rendered {shot} in {time.monotonic() - t0:.0f} s", flush=True)
    return shot


def archive() -> Path:
    from specdesk import __version__

    out = DIST / f"specdesk-{__version__}-{platform.system().lower()}-{platform.machine()}.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(APP, arcname="specdesk")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check-only", action="store_true", help="check an existing build")
    ap.add_argument("--archive", action="store_true", help="also write a .tar.gz of the folder")
    args = ap.parse_args()
    if not args.check_only:
        import importlib.util

        if importlib.util.find_spec("PyInstaller") is None:
            print("build.py: error: PyInstaller is not installed here: python -m pip install pyinstaller",
                  file=sys.stderr)
            return 2
        build()
    check()
    size = folder_bytes(APP)
    print(f"dist/specdesk weighs {mib(size)} ({sum(1 for _ in APP.rglob('*'))} files)")
    biggest = sorted(((folder_bytes(p) if p.is_dir() else p.stat().st_size, p) for p in (APP / "_internal").iterdir()),
                     reverse=True)[:6]
    for n, p in biggest:
        print(f"  {mib(n):>10}  {p.relative_to(APP)}")
    if args.archive:
        out = archive()
        print(f"{out.relative_to(ROOT)}: {mib(out.stat().st_size)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
