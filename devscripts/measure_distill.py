"""Measure a distilled draft against its target on held-out chat prompts: speed-ups, acceptance, exactness.

    python devscripts/measure_distill.py --target SmolLM2-135M-Instruct.Q4_1.gguf \
        --draft resources/models/smollm2-135m-instruct-draft [--prompts 12] [--max-new 96] [--json out.json]

The prompts are the distiller's held-out prompts (``core.distill.prompts``, subjects no training prompt used),
through the target's chat template. Per prompt, every method runs in turn (order rotated per prompt): plain
decoding, the draft at fixed k, the draft at k=auto, prompt lookup (k=4, and k=auto), and at temperature 0.7 plain
decoding and the draft (k=2 and the greedy best). Greedy outputs are checked token for token against plain
decoding. Reported: tokens/s of the decode, speed-up as the ratio of summed decode times, acceptance, tokens per
target pass, acceptance per draft position. The CPU and thread count are printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def per_position(steps, k: int) -> list[float]:
    from specdesk.core.bench.runner import position_counts

    reached, accepted = position_counts(steps)
    reached, accepted = (reached + [0] * k)[:k], (accepted + [0] * k)[:k]
    return [round(a / r, 3) if r else 0.0 for a, r in zip(accepted, reached)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--max-new", type=int, default=96)
    ap.add_argument("--ks", default="1,2,3,4,5")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import torch

    import specdesk
    from specdesk.core.distill.prompts import chat_prompts

    ks = [int(x) for x in args.ks.split(",")]
    spec = specdesk.load(args.target, args.draft, drafter="model", device="cpu")
    prompts = chat_prompts(args.prompts, held_out=True, seed=0)
    methods = [("plain", "none", 0, 0.0)] + [(f"draft k={k}", "model", k, 0.0) for k in ks] + \
        [("draft k=auto", "model", "auto", 0.0), ("lookup k=4", "ngram", 4, 0.0), ("lookup k=auto", "ngram", "auto", 0.0),
         ("plain t=0.7", "none", 0, 0.7), ("draft k=2 t=0.7", "model", 2, 0.7), ("draft k=3 t=0.7", "model", 3, 0.7)]
    stats = defaultdict(lambda: defaultdict(float))
    steps_by = defaultdict(list)
    mismatches = []
    spec.generate(spec.prompt_ids(prompts[0])[0], max_new_tokens=8, drafter="model", k=4)  # warm-up
    t_start = time.time()
    for i, text in enumerate(prompts):
        ids, _ = spec.prompt_ids(text)
        order = methods[i % len(methods):] + methods[:i % len(methods)]
        want = None
        results = {}
        for name, drafter, k, temp in order:
            kw = dict(max_new_tokens=args.max_new, drafter=drafter, k=k)
            if temp:
                kw.update(temperature=temp, seed=1000 + i)
            r = spec.generate(ids, **kw)
            results[name] = r
            st = stats[name]
            st["tokens"] += r.stats.new_tokens
            st["seconds"] += r.stats.decode_seconds
            st["forwards"] += r.stats.target_forwards
            st["drafted"] += r.stats.drafted
            st["accepted"] += r.stats.accepted
            steps_by[name] += r.steps
        want = results["plain"].token_ids
        for name, r in results.items():
            if name.endswith("t=0.7"):
                continue
            if r.token_ids != want:
                mismatches.append((i, name))
        print(f"prompt {i + 1}/{len(prompts)} done ({time.time() - t_start:.0f} s)", file=sys.stderr, flush=True)
    base = stats["plain"]["seconds"] / max(stats["plain"]["tokens"], 1)
    base_t = stats["plain t=0.7"]["seconds"] / max(stats["plain t=0.7"]["tokens"], 1)
    rows = []
    for name, *_ in methods:
        st = stats[name]
        per_tok = st["seconds"] / max(st["tokens"], 1)
        ref = base_t if name.endswith("t=0.7") else base
        k = next(m[2] for m in methods if m[0] == name)
        rows.append({"method": name, "tokens_per_s": round(1 / per_tok, 1), "speedup": round(ref / per_tok, 3),
                     "acceptance": round(st["accepted"] / st["drafted"], 3) if st["drafted"] else None,
                     "tokens_per_pass": round(st["tokens"] / max(st["forwards"], 1), 3),
                     "per_position": per_position(steps_by[name], k) if isinstance(k, int) and k > 0 else None})
    out = {"cpu": cpu_name(), "torch_threads": torch.get_num_threads(), "prompts": len(prompts),
           "max_new_tokens": args.max_new, "greedy_mismatches": mismatches, "rows": rows,
           "draft": spec.describe()["draft"], "target_params": spec.target.params,
           "draft_params": spec.draft.params, "draft_weight_bytes": spec.draft.weight_bytes,
           "target_weight_bytes": spec.target.weight_bytes, "wall_s": round(time.time() - t_start, 1)}
    print(f"{out['cpu']}, {out['torch_threads']} threads; {len(prompts)} held-out chat prompts, {args.max_new} new tokens")
    print(f"{'method':18s} {'tok/s':>7s} {'speed-up':>8s} {'accept':>7s} {'tok/pass':>8s}  per position")
    for r in rows:
        print(f"{r['method']:18s} {r['tokens_per_s']:7.1f} {r['speedup']:7.2f}x {r['acceptance'] or 0:7.3f} "
              f"{r['tokens_per_pass']:8.2f}  {r['per_position'] or ''}")
    print(f"greedy outputs identical to plain decoding: {not mismatches} {mismatches or ''}")
    print(f"draft: {out['draft_params']:,} own parameters, {out['draft_weight_bytes'] / 2**20:.1f} MiB "
          f"({out['draft_weight_bytes'] / out['target_weight_bytes']:.1%} of the target's "
          f"{out['target_weight_bytes'] / 2**20:.0f} MiB)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
