"""Check the memory planner against a real load and prefill on a CUDA GPU.

    python devscripts/cuda_check_plan.py --target demo-target --draft demo-draft --context 2048
    python devscripts/cuda_check_plan.py --target /models/Llama-3.1-8B --draft /models/Llama-3.2-1B \
        --target-quant nf4 --context 8192

Steps: plan the configuration; reset torch's peak statistics; load the pair with ``specdesk.load`` on
the GPU; generate with a prompt that fills the planned context minus the new tokens (so the prefill runs
at the planned context) with sampling on (so the float32 sampling copies exist); then compare

- weights, per model: bytes of the loaded tensors + bitsandbytes state vs the plan (expected exact),
- KV cache: the target cache's bytes at the length reached vs the plan's formula (expected exact),
- total: ``torch.cuda.max_memory_reserved()`` + the plan's CUDA context constant vs the plan's total
  (must agree within --tolerance, default 10%).

Exit status: 0 within tolerance, 1 outside it, 2 for bad arguments; with no CUDA GPU it prints why and
exits 0 without checking anything. ``--device cpu`` runs the same steps on the CPU: weights and KV are
compared exactly; the total against the process's peak RSS is reported but not judged.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a source checkout

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="demo-target")
    p.add_argument("--draft", default=None, help="default demo-draft for demo-target; 'ngram'/'none' for no model")
    p.add_argument("--target-quant", default="none", choices=("none", "int8", "nf4", "fp4"))
    p.add_argument("--draft-quant", default="none", choices=("none", "int8", "nf4", "fp4"))
    p.add_argument("--double-quant", action="store_true")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--context", type=int, default=None, help="default min(4096, the target's maximum)")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (a dry run of the same steps)")
    p.add_argument("--tolerance", type=float, default=0.10)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p.parse_args(argv)


def cuda_missing_reason(device: str) -> str | None:
    if not device.startswith("cuda"):
        return None
    try:
        import torch
    except ImportError as e:
        return f"torch is not importable ({e})"
    if not torch.cuda.is_available():
        return f"no CUDA GPU is available to torch {torch.__version__}"
    return None


def _prompt_ids(engine, n: int, seed: int = 0) -> list[int]:
    """n token ids drawn from the vocabulary, never an end-of-sequence id (the generation must not stop)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, engine.target.vocab, (n,), generator=g).tolist()
    bad = engine.target.eos_ids
    return [i if i not in bad else (i + 1) % engine.target.vocab for i in ids]


def _error(predicted: int, measured: int) -> float:
    return (predicted - measured) / measured if measured else float("inf")


def run_check(args: argparse.Namespace) -> dict:
    """Plan, load, generate, measure. Returns the report (``ok`` says whether it passed)."""
    import torch

    import specdesk
    from specdesk.core.plan import analyze, kv_cache_bytes, measure_weight_bytes, plan
    from specdesk.hw.memory import memory_budget, peak_memory_bytes

    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)  # its int8 path logs a line per matmul on the CPU
    cuda = args.device.startswith("cuda")
    drafter = {"ngram": "ngram", "none": "none"}.get(str(args.draft), None)
    draft = None if drafter else args.draft
    def spec(method: str) -> str:
        return method + ("+dq" if args.double_quant and method in ("nf4", "fp4") else "")

    budget = memory_budget(args.device).bytes or 2**50
    p = plan(args.target, draft, drafter=drafter, target_quant=spec(args.target_quant),
             draft_quant=spec(args.draft_quant), dtype=args.dtype,
             device=args.device, context=args.context, k=args.k, budget_bytes=budget, recommend=False,
             use_history=False)
    new_tokens = min(args.new_tokens, p.context - 1)
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(torch.device(args.device))
    engine = specdesk.load(args.target, p.draft.path if p.draft else None, drafter=p.drafter,
                           target_quant=args.target_quant, draft_quant=args.draft_quant,
                           double_quant=args.double_quant, dtype=args.dtype, device=args.device)
    prompt = _prompt_ids(engine, p.context - new_tokens)
    result = engine.generate(prompt, max_new_tokens=new_tokens, temperature=1.0, seed=0, k=args.k)
    if cuda:
        torch.cuda.synchronize()
    runner = engine._runner  # the target's side of the loop: its cache is what the plan's KV row predicts
    t_a = analyze(args.target)
    rows = [("target weights (without lean-path copies)", p.target.weight_bytes - _lean(p.target),
             measure_weight_bytes(engine.target.model), True),
            ("target KV at the length reached", kv_cache_bytes(t_a, runner.cache_len, p.dtype),
             runner.kv_bytes(), True)]
    if p.draft is not None and engine.draft is not None:
        w = measure_weight_bytes(engine.draft.model)
        rows.append(("draft weights (without lean-path copies)", p.draft.weight_bytes - _lean(p.draft), w, True))
    peak = peak_memory_bytes(args.device) or 0
    measured_total = peak + (p.overheads.cuda_context_bytes if cuda else 0)
    label = ("max_memory_reserved + CUDA context" if cuda else "process peak RSS (reported, not judged)")
    rows.append((f"total ({label})", p.total_bytes, measured_total, cuda))
    report_rows = []
    ok = True
    for name, predicted, measured, judged in rows:
        err = _error(predicted, measured)
        tol = args.tolerance if name.startswith("total") else 0.03
        passed = (not judged) or abs(err) <= tol
        ok &= passed
        report_rows.append({"what": name, "predicted": predicted, "measured": measured, "error": err,
                            "tolerance": tol if judged else None, "ok": passed})
    return {"device": args.device, "gpu": torch.cuda.get_device_name(torch.device(args.device)) if cuda else None,
            "target": p.target.name, "draft": p.draft.name if p.draft else p.drafter, "dtype": p.dtype,
            "target_quant": p.target.quant, "draft_quant": p.draft.quant if p.draft else None,
            "context": p.context, "new_tokens": len(result.token_ids), "rows": report_rows, "ok": ok,
            "versions": {"torch": torch.__version__, "specdesk": specdesk.__version__}}


def _lean(model_plan) -> int:
    return sum(r.bytes for r in model_plan.rows if r.label.startswith("lean path"))


def print_report(r: dict) -> None:
    print(f"{r['target']} ({r['target_quant']}) + {r['draft']} on {r['gpu'] or r['device']}, {r['dtype']}, "
          f"context {r['context']}")
    for row in r["rows"]:
        verdict = "ok" if row["ok"] else "OUT OF TOLERANCE"
        tol = f" (tolerance {row['tolerance']:.0%})" if row["tolerance"] is not None else ""
        print(f"  {row['what']:<55} predicted {row['predicted']:>14,}  measured {row['measured']:>14,}  "
              f"{row['error']:+.2%}{tol}  {verdict}")
    print("PASS" if r["ok"] else "FAIL")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    why = cuda_missing_reason(args.device)
    if why is not None:
        print(f"cuda_check_plan: skipped: {why}; run it on a machine with a CUDA GPU (or pass --device cpu "
              f"for a dry run of the same steps)")
        return 0
    from specdesk.core.errors import SpecdeskError

    try:
        report = run_check(args)
    except SpecdeskError as e:
        print(f"cuda_check_plan: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report))
    else:
        print_report(report)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
