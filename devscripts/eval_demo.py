"""Measure the demo pair on the held-out modules: the figures in its model cards and the README.

    python devscripts/eval_demo.py                  # acceptance + speed (about 10 minutes on 2 CPU cores)
    python devscripts/eval_demo.py --acceptance-only   # the deterministic part (about 1 minute)
    python devscripts/eval_demo.py --json out.json

Prompts: from each held-out module (specdesk.core.bench.suite.HELD_OUT_MODULES), 256 tokens taken at
its middle (cut at a line start); each continues for 128 new tokens, greedy.
- Acceptance: accepted / drafted draft tokens at each k, summed over the prompts (deterministic).
- Speed: tokens/s of plain decoding and of speculative decoding at k = 1..8 and k = auto, all in one
  process with every method run back to back per prompt and repeat (interleaved, order rotated), and
  the speed-up as the median of paired ratios. Decode time only (the prefill is the same for all).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROMPT_TOKENS = 256
NEW_TOKENS = 128


def held_out_prompts(tokenizer) -> list[tuple[str, list[int]]]:
    from specdesk.core.bench.suite import HELD_OUT_MODULES, stdlib_dir

    out = []
    for mod in HELD_OUT_MODULES:
        text = (stdlib_dir() / mod).read_text(encoding="utf-8")
        middle = text.find("\n", len(text) // 2) + 1
        ids = tokenizer(text[middle:middle + PROMPT_TOKENS * 8], add_special_tokens=False)["input_ids"]
        out.append((mod, ids[:PROMPT_TOKENS]))
    return out


def acceptance(engine, prompts, ks=(1, 2, 3, 4, 5, 6, 7, 8)) -> dict:
    res = {}
    for k in ks:
        drafted = accepted = forwards = tokens = 0
        for _, ids in prompts:
            r = engine.generate(ids, k=k, max_new_tokens=NEW_TOKENS)
            drafted += r.stats.drafted
            accepted += r.stats.accepted
            forwards += r.stats.target_forwards
            tokens += r.stats.new_tokens
        res[k] = {"acceptance_rate": accepted / drafted, "tokens_per_step": tokens / forwards,
                  "drafted": drafted, "accepted": accepted}
    return res


def speed(engine, prompts, repeats: int, ks=(1, 2, 3, 4, 5, 6, 7, 8)) -> dict:
    methods = [("plain", dict(drafter="none"))] + [(f"k={k}", dict(k=k)) for k in ks] + [("k=auto", dict(k="auto"))]
    tps: dict[str, list[float]] = {m: [] for m, _ in methods}
    ratios: dict[str, list[float]] = {m: [] for m, _ in methods}
    for m, kw in methods:  # warm-up
        engine.generate(prompts[0][1][:32], max_new_tokens=8, **kw)
    for rep in range(repeats):
        for pi, (_, ids) in enumerate(prompts):
            shift = (rep + pi) % len(methods)
            got = {}
            for m, kw in methods[shift:] + methods[:shift]:
                got[m] = engine.generate(ids, max_new_tokens=NEW_TOKENS, **kw).stats.tokens_per_second
            for m in got:
                tps[m].append(got[m])
                ratios[m].append(got[m] / got["plain"])
    return {m: {"tokens_per_s": statistics.median(tps[m]), "speedup": statistics.median(ratios[m])} for m in tps}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="demo-target")
    ap.add_argument("--draft", default="demo-draft")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--acceptance-only", action="store_true")
    ap.add_argument("--ks", default="1,2,3,4,5,6,7,8", help="k values for the acceptance table")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    ks = tuple(int(k) for k in args.ks.split(","))

    import torch

    import specdesk

    engine = specdesk.load(args.target, args.draft, drafter="model", device="cpu")
    prompts = held_out_prompts(engine.tokenizer)
    t0 = time.perf_counter()
    out = {"prompts": [m for m, _ in prompts], "prompt_tokens": PROMPT_TOKENS, "new_tokens": NEW_TOKENS,
           "threads": torch.get_num_threads(), "acceptance": acceptance(engine, prompts, ks)}
    if not args.acceptance_only:
        out["speed"] = speed(engine, prompts, args.repeats)
        fixed = {m: v for m, v in out["speed"].items() if m.startswith("k=") and m != "k=auto"}
        best = max(fixed, key=lambda m: fixed[m]["speedup"])
        out["best_fixed_k"] = best
        out["repeats"] = args.repeats
    out["seconds"] = time.perf_counter() - t0
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
