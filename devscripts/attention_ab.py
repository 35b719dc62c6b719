"""The attention kernel of two builds side by side (the eighteenth sitting's figures in docs/draft-notebook.md):

    python devscripts/attention_ab.py REV      # attention.c at git revision REV against the working tree's

Both are built as specdesk builds its kernels (-march=native -O3 ...), loaded into one process and called in turn
(12 alternations of 200 calls, medians) at SmolLM2's shapes (9 query heads, 3 KV heads, head size 64, bfloat16
cache), 1/2/4 positions over 150/500/1,500 keys, 2 threads; says whether their outputs are the same bits.
"""

from __future__ import annotations

import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

KERNELS = Path(__file__).resolve().parent.parent / "specdesk/core/kernels"
FLAGS = ["-march=native", "-O3", "-mprefer-vector-width=512", "-fopenmp", "-shared", "-fPIC", "-fno-math-errno"]


def build(source: str, tmp: Path, name: str) -> ctypes.CDLL:
    (tmp / f"{name}.c").write_text(source)
    (tmp / "scalars.h").write_text((KERNELS / "scalars.h").read_text())
    subprocess.run(["cc", *FLAGS, str(tmp / f"{name}.c"), "-o", str(tmp / f"{name}.so")], check=True)
    lib = ctypes.CDLL(str(tmp / f"{name}.so"))
    lib.sd_attend.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 5 + [ctypes.c_void_p] * 3 + [
        ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
    return lib


def main() -> None:
    rev = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
    old = subprocess.run(["git", "show", f"{rev}:specdesk/core/kernels/attention.c"], capture_output=True,
                         text=True, check=True, cwd=KERNELS).stdout
    tmp = Path(tempfile.mkdtemp())
    libs = {rev: build(old, tmp, "before"), "working tree": build((KERNELS / "attention.c").read_text(), tmp, "now")}
    torch.manual_seed(0)
    hq, hk, hd, cap = 9, 3, 64, 2100
    k, v = (torch.randn(hk, cap, hd).bfloat16() for _ in range(2))
    for L in (150, 500, 1500):
        for n in (1, 2, 4):
            q = torch.randn(n, hq, hd).bfloat16()
            prefix = torch.tensor([L + t for t in range(n)])
            offsets, extras = torch.zeros(n + 1, dtype=torch.long), torch.zeros(1, dtype=torch.long)
            out = torch.empty(n, hq * hd, dtype=torch.bfloat16)
            args = (q.data_ptr(), k.data_ptr(), v.data_ptr(), cap * hd, n, hq, hk, hd, prefix.data_ptr(),
                    offsets.data_ptr(), extras.data_ptr(), hd ** -0.5, out.data_ptr(), 2)
            times: dict[str, list[float]] = {name: [] for name in libs}
            outs = {}
            for _ in range(12):
                for name, lib in libs.items():
                    t0 = time.perf_counter()
                    for _ in range(200):
                        lib.sd_attend(*args)
                    times[name].append((time.perf_counter() - t0) / 200)
                    outs[name] = out.clone()
            a, b = (statistics.median(times[name]) for name in libs)
            same = torch.equal(*outs.values())
            print(f"{n} position(s), {L} keys: {rev} {a * 1e6:6.1f} us, working tree {b * 1e6:6.1f} us "
                  f"({b / a:.3f}x), same bits: {same}")


if __name__ == "__main__":
    main()
