"""Check the engine on a CUDA machine: greedy parity with transformers, and speed against plain decoding.

    python devscripts/cuda_check_engine.py                       # demo pair, bf16, on cuda
    python devscripts/cuda_check_engine.py --target-quant nf4    # bitsandbytes 4-bit target
    python devscripts/cuda_check_engine.py --device cpu          # the same checks on the CPU

Exits 1 if any greedy output differs from transformers' ``generate(do_sample=False)`` on the same target.
Prints one JSON object (parity per drafter and k, tokens/s of plain and speculative decoding).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROMPTS = [
    "def binary_search(items, target):\n    ",
    "class LRUCache:\n    def __init__(self, capacity):\n",
    "import os\nimport sys\n\n\ndef main(argv):\n",
]


def divergence(model, prompt_ids: list[int], ref: list[int], got: list[int]) -> dict | None:
    """Where ``got`` first leaves ``ref`` and how close the reference model's top two logits were there.

    In bf16 a verify pass over several positions and a one-position step round differently, so a near-tie can
    flip; a gap far above bf16's rounding (about 1e-2 of the logits' scale) points at a bug instead."""
    import torch

    i = next((j for j, (a, b) in enumerate(zip(ref, got)) if a != b), None)
    if i is None:
        return None
    with torch.inference_mode():
        x = torch.tensor([prompt_ids + ref[:i]], device=model.device)
        logits = model(x).logits[0, -1].float()
    top = torch.topk(logits, 2)
    return {"at": i, "ref": ref[i], "got": got[i], "top2_gap": round(float(top.values[0] - top.values[1]), 4),
            "gap_got": round(float(logits[ref[i]] - logits[got[i]]), 4)}


T0 = time.perf_counter()


def note(row: dict) -> dict:
    """Each result to stderr as it comes, with the seconds since start: a run stopped at its time limit keeps them."""
    print(json.dumps({"t": round(time.perf_counter() - T0, 1), **row}), file=sys.stderr, flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="demo-target")
    ap.add_argument("--draft", default="demo-draft")
    ap.add_argument("--target-quant", default="none")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import torch

    import specdesk

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: nothing to check (use --device cpu for the CPU)", file=sys.stderr)
        return 0
    engine = specdesk.load(args.target, args.draft, drafter="model", target_quant=args.target_quant, dtype=args.dtype,
                           device=args.device)
    note({"loaded": engine.describe()})
    model = engine.target.model
    report: dict = {"device": engine.device, "target": engine.target.describe(), "draft": engine.draft.describe(),
                    "lean_draft": engine.describe()["lean_draft"], "lean_target": engine.describe()["lean_target"],
                    "parity": [], "speed": {}}
    if engine.device.startswith("cuda"):
        report["gpu"] = torch.cuda.get_device_name()
    ok = True
    for prompt in PROMPTS:
        ids = engine.encode(prompt)
        with torch.inference_mode():
            note({"reference": prompt[:24]})
            ref = model.generate(torch.tensor([ids], device=model.device), max_new_tokens=args.max_new_tokens,
                                 do_sample=False)[0, len(ids):].tolist()
        for drafter in ("model", "ngram", "none"):
            for k in (1, 2, 4, 8):
                got = engine.generate(prompt, drafter=drafter, k=k, max_new_tokens=args.max_new_tokens)
                same = got.token_ids == ref[: len(got.token_ids)]
                ok &= same
                report["parity"].append({"prompt": prompt[:24], "drafter": drafter, "k": k, "identical": same,
                                         "acceptance": got.stats.acceptance_rate})
                if not same:
                    report["parity"][-1]["divergence"] = divergence(model, ids, ref, got.token_ids)
                note(report["parity"][-1])
        for k, tree in ((2, (4, 2)), (4, (4, 2)), ("auto", (4, 2)), (4, (6, 3, 2))):  # sibling trees (core/tree.py)
            got = engine.generate(prompt, k=k, tree=tree, max_new_tokens=args.max_new_tokens)
            same = got.token_ids == ref[: len(got.token_ids)]
            ok &= same
            report["parity"].append({"prompt": prompt[:24], "drafter": "model", "k": k, "tree": list(tree),
                                     "identical": same, "tokens_per_pass": got.stats.new_tokens
                                     / max(got.stats.target_forwards, 1)})
            if not same:
                report["parity"][-1]["divergence"] = divergence(model, ids, ref, got.token_ids)
            note(report["parity"][-1])
    for label, kw in (("plain", dict(drafter="none")), ("draft k=2", dict(k=2)), ("draft k=4", dict(k=4)),
                      ("draft k=auto", dict(k="auto")), ("lookup k=4", dict(drafter="ngram", k=4)),
                      ("tree 4,2 k=4", dict(k=4, tree=(4, 2))), ("tree 4,2 k=auto", dict(k="auto", tree=(4, 2)))):
        speeds = []
        for _ in range(args.repeats):
            for prompt in PROMPTS:
                r = engine.generate(prompt, max_new_tokens=args.max_new_tokens, **kw)
                speeds.append(r.stats.tokens_per_second)
        report["speed"][label] = statistics.median(speeds)
        note({"speed": label, "tokens_per_s": report["speed"][label]})
    plain = report["speed"]["plain"]
    report["speedup"] = {k: v / plain for k, v in report["speed"].items()}
    report["all_identical"] = ok
    print(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    rc = main()
    print(f"done in {time.perf_counter() - T0:.0f} s", file=sys.stderr)
    sys.exit(rc)
