"""A GGUF's q4 load with specdesk at a git revision against the working tree's (the twentieth sitting's notebook
figures: the q4 form stored as codes against the float32 conversion quantized at every load):

    python devscripts/q4load_ab.py REV [GGUF] [--rounds 2]

Per round and version (a `git worktree` of REV, then the working tree): an empty cache (SPECDESK_CACHE_DIR), a
first load (conversion included) in a fresh process, then a second load in another; prints each load's seconds
(imports not counted), the process's peak resident memory, and the cache's size on disk after the first.
GGUF: SmolLM2-135M-Instruct Q4_1 from the tests' cache by default.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from convert_ab import rev_gguf_args

ROOT = Path(__file__).resolve().parent.parent
RUN = """
import json, resource, sys, time
import torch, transformers  # imported before the clock
from specdesk.core.loading import load_model
t = time.perf_counter()
m = load_model(sys.argv[1], "q4", device="cpu")
s = time.perf_counter() - t
print(json.dumps({"s": s, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    args, tmp = rev_gguf_args()
    old = tmp / "old"
    subprocess.run(["git", "worktree", "add", "--detach", str(old), args.rev], cwd=ROOT, check=True,
                   capture_output=True)
    try:
        for r in range(args.rounds):
            for name, tree in ((args.rev, old), ("working tree", ROOT)):
                cache = tmp / f"cache-{r}-{name.replace(' ', '-')}"
                env = {**os.environ, "SPECDESK_CACHE_DIR": str(cache), "PYTHONPATH": str(tree)}
                runs = [json.loads(subprocess.run([sys.executable, "-c", RUN, args.gguf], env=env, cwd=tree,
                                                  capture_output=True, text=True, check=True).stdout.split("\n")[-2])
                        for _ in range(2)]
                print(f"round {r + 1}: {name}: first load {runs[0]['s']:.2f} s (peak {runs[0]['peak_mb']:.0f} MB), "
                      f"second {runs[1]['s']:.2f} s (peak {runs[1]['peak_mb']:.0f} MB), "
                      f"cache {_size(cache) / 2**20:.0f} MB", flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)


if __name__ == "__main__":
    main()
