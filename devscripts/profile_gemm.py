"""Time the small matrix products of decoding (the demo target's shapes) under MKL's code paths.

    python devscripts/profile_gemm.py            # MKL's own choice of code path
    MKL_CBWR=AVX2 python devscripts/profile_gemm.py

Measured on this 2-core AMD EPYC (torch 2.13.0, MKL 2024.2), microseconds for a 4096x256 lm_head:
1 position 250, 5 positions 1240 (default path); 203 and 568 with MKL_CBWR=AVX2. specdesk sets
MKL_CBWR=AVX2 on import (see specdesk/__init__.py) unless the user set it.
"""

import time

import torch


def bench(f, n: int = 2000) -> float:
    for _ in range(50):
        f()
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    torch.set_num_threads(2)
    F = torch.nn.functional
    with torch.inference_mode():
        for o, i in [(256, 256), (768, 256), (256, 768), (4096, 256)]:
            w = torch.randn(o, i)
            cells = []
            for m in (1, 2, 5, 9):
                x = torch.randn(1, m, i)
                cells.append(f"m={m} {bench(lambda: F.linear(x, w)):7.1f}us")
            print(f"{o}x{i}: " + "  ".join(cells))


if __name__ == "__main__":
    main()
