"""MKL's code paths side by side: small matrix products and plain decoding under each MKL_CBWR setting.

    python devscripts/profile_mkl.py [--repeats 3]

MKL reads MKL_CBWR at its first call, so each setting runs in its own process; settings are interleaved and
repeated so machine drift cancels. Prints the CPU, then per setting: microseconds for the demo target's
4096x256 output layer at 1 and 5 positions, and the demo target's plain decoding rate (tokens/s, 64 tokens).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SETTINGS = ["(unset)", "AVX2", "AVX512", "COMPATIBLE"]

CHILD = r"""
import json, time, torch
import specdesk
F = torch.nn.functional
def bench(f, n):
    for _ in range(30): f()
    t = time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter() - t) / n * 1e6
out = {}
with torch.inference_mode():
    w = torch.randn(4096, 256)
    for m in (1, 5):
        x = torch.randn(1, m, 256)
        out[f"lm_head_m{m}_us"] = bench(lambda: F.linear(x, w), 1500)
engine = specdesk.load("demo-target", drafter="none", device="cpu")
prompt = open(specdesk.__file__.replace("__init__.py", "core/decode.py")).read()[:1200]
engine.generate(prompt, max_new_tokens=8, k=0)
r = engine.generate(prompt, max_new_tokens=64, k=0)
out["plain_tok_s"] = r.stats.tokens_per_second
print(json.dumps(out))
"""


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def run(setting: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    if setting == "(unset)":
        env["MKL_CBWR"] = ""  # specdesk's setdefault keeps an empty value: MKL's own choice
    else:
        env["MKL_CBWR"] = setting
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"{setting}: {r.stderr.strip().splitlines()[-1]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    results: dict[str, list[dict]] = {s: [] for s in SETTINGS}
    for rep in range(args.repeats):
        order = SETTINGS[rep % len(SETTINGS):] + SETTINGS[: rep % len(SETTINGS)]
        for s in order:
            results[s].append(run(s))
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; {args.repeats} repeats, medians")
    print(f"{'MKL_CBWR':<12} {'lm_head 1 pos':>14} {'lm_head 5 pos':>14} {'plain tok/s':>12}")
    for s in SETTINGS:
        med = {k: statistics.median(r[k] for r in results[s]) for k in results[s][0]}
        print(f"{s:<12} {med['lm_head_m1_us']:>11.0f} us {med['lm_head_m5_us']:>11.0f} us {med['plain_tok_s']:>12.1f}")


if __name__ == "__main__":
    start = time.time()
    main()
    print(f"({time.time() - start:.0f} s)")
