"""Measure a GGUF model in specdesk: load times (first = conversion, second = cached) and chat decoding speed.

    python devscripts/measure_gguf.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf --folder smollm2-hf [--json out.json]

Loads: each in a fresh process (imports done before the clock starts), rounds interleaved: the GGUF with
an empty cache (the conversion, then the load), the GGUF again (the cached conversion), the same model as a
safetensors folder (``--folder``: the reference the second load should match), and transformers' own
``from_pretrained(folder, gguf_file=...)`` (what a GGUF costs on every load without the cache).
Speed: a few chat prompts through the model's chat template, greedy, plain decoding vs prompt lookup
(k=4) vs prompt lookup with k=auto, interleaved per prompt and repeat (order rotated); tokens/s of the
decode, acceptance, and the speed-up as the median of paired ratios, also by the process's CPU time (less
disturbed by other jobs on a shared machine; clearest with --threads 1). Every method's tokens are checked
against plain decoding's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHATS = [
    "Rewrite this function to use a list comprehension:\n\ndef squares(xs):\n    out = []\n    for x in xs:\n"
    "        out.append(x * x)\n    return out",
    "Fix the bug in this code and explain the fix in one sentence:\n\ndef mean(xs):\n    total = 0\n"
    "    for x in xs:\n        total += x\n    return total / len(x)",
    "Summarise in two sentences: The Industrial Revolution began in Britain in the late 18th century. "
    "Steam power, mechanised textile production and new iron-making processes changed how goods were made, "
    "and people moved from farms to growing cities to work in factories.",
    "List three tips for writing clear emails.",
]
METHODS = (("plain", "none", 4), ("lookup k=4", "ngram", 4), ("lookup k=auto", "ngram", "auto"))

_LOAD = """
import json, sys, time
import specdesk, torch, transformers
kind, ref = sys.argv[1], sys.argv[2]
t = time.perf_counter()
if kind == "transformers-gguf":
    from pathlib import Path
    from transformers import AutoModelForCausalLM, AutoTokenizer
    p = Path(ref)
    AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
    AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32)
else:
    specdesk.load(ref, drafter="ngram", device="cpu")
print(json.dumps({"seconds": time.perf_counter() - t}))
"""


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def timed_load(kind: str, ref: str, cache: str) -> float:
    env = {**os.environ, "SPECDESK_CACHE_DIR": cache}
    r = subprocess.run([sys.executable, "-c", _LOAD, kind, ref], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"{kind} load failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])["seconds"]


def measure_loads(gguf: str, folder: str | None, rounds: int) -> dict:
    out: dict[str, list[float]] = {"gguf first (conversion)": [], "gguf second (cached)": [],
                                   "transformers from_pretrained(gguf_file)": []}
    if folder:
        out["safetensors folder"] = []
    for i in range(rounds):
        with tempfile.TemporaryDirectory() as cache:
            out["gguf first (conversion)"].append(timed_load("specdesk", gguf, cache))
            out["gguf second (cached)"].append(timed_load("specdesk", gguf, cache))
            if folder:
                out["safetensors folder"].append(timed_load("specdesk", folder, cache))
            out["transformers from_pretrained(gguf_file)"].append(timed_load("transformers-gguf", gguf, cache))
        print(f"load round {i + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in out.items()), flush=True)
    return {k: {"median_s": statistics.median(v), "all_s": v} for k, v in out.items()}


def measure_speed(gguf: str, new_tokens: int, repeats: int) -> dict:
    import specdesk

    engine = specdesk.load(gguf, drafter="ngram", device="cpu")
    rows: dict[str, list] = {name: [] for name, _, _ in METHODS}
    mismatches = 0
    for rep in range(repeats):
        for pi, text in enumerate(CHATS):
            ids, templated = engine.prompt_ids(text)
            assert templated
            order = METHODS[(rep + pi) % len(METHODS):] + METHODS[:(rep + pi) % len(METHODS)]
            plain_tokens = None
            results = {}
            cpu = {}
            for name, drafter, k in order:
                c0 = time.process_time()
                r = engine.generate(ids, max_new_tokens=new_tokens, drafter=drafter, k=k)
                cpu[name] = time.process_time() - c0
                results[name] = r
            plain_tokens = results["plain"].token_ids
            for name, r in results.items():
                mismatches += r.token_ids != plain_tokens
                s = r.stats
                rows[name].append({"prompt": pi, "tokens": s.new_tokens, "tps": s.tokens_per_second,
                                   "drafted": s.drafted, "accepted": s.accepted, "cpu_s": cpu[name],
                                   "ratio": s.tokens_per_second / results["plain"].stats.tokens_per_second,
                                   "cpu_ratio": cpu["plain"] / cpu[name]})
            print(f"repeat {rep + 1} prompt {pi + 1}: " + ", ".join(
                f"{n} {results[n].stats.tokens_per_second:.1f} tok/s" for n, _, _ in METHODS), flush=True)
    summary = {}
    for name, rs in rows.items():
        drafted = sum(r["drafted"] for r in rs)
        summary[name] = {"median_tps": statistics.median(r["tps"] for r in rs),
                         "acceptance": (sum(r["accepted"] for r in rs) / drafted) if drafted else None,
                         "speedup_median": statistics.median(r["ratio"] for r in rs),
                         "cpu_speedup_median": statistics.median(r["cpu_ratio"] for r in rs),
                         "mean_new_tokens": statistics.mean(r["tokens"] for r in rs), "runs": rs}
    return {"methods": summary, "outputs_differing_from_plain": mismatches}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--folder", help="the same model as a safetensors folder (load-time reference)")
    ap.add_argument("--rounds", type=int, default=3, help="load rounds (default 3)")
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip-loads", action="store_true")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    result = {"cpu": cpu_name(), "cores": os.cpu_count()}
    if not args.skip_loads:
        result["loads"] = measure_loads(args.gguf, args.folder, args.rounds)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["SPECDESK_CACHE_DIR"] = cache
        result["speed"] = measure_speed(args.gguf, args.new_tokens, args.repeats)
    print(json.dumps({k: v for k, v in result.items() if k != "speed"}, indent=2))
    for name, m in result["speed"]["methods"].items():
        acc = f"{m['acceptance']:.2f}" if m["acceptance"] is not None else "-"
        print(f"{name:14s} {m['median_tps']:6.1f} tok/s  acceptance {acc}  speed-up {m['speedup_median']:.2f}x  "
              f"(by CPU time {m['cpu_speedup_median']:.2f}x)  ({m['mean_new_tokens']:.0f} tokens on average)")
    print(f"outputs differing from plain decoding: {result['speed']['outputs_differing_from_plain']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
