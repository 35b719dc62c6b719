"""``specdesk plan``: will this target + draft fit, why, and what is the best configuration that does.

Nothing is loaded or downloaded: a model folder with only config.json can be planned.
"""

from __future__ import annotations

import argparse
import json

from specdesk.commands.common import SUGGESTED_TREE, add_model_args, k_value
from specdesk.core.errors import BadSetting


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="will a target + draft fit in memory? (nothing is loaded)",
                       description="Plan memory for a target and a draft before loading or downloading them: "
                                   "weights, KV caches, logits, activations and overheads, whether they fit, "
                                   "the largest context that fits, and the best configurations that do.")
    g = add_model_args(p, target_help="folder (config.json alone is enough), Hugging Face id in the local cache, "
                                      "or demo-target (default)", loading=False)
    g.add_argument("--candidate", action="append", default=None, metavar="DRAFT",
                   help="a draft to consider for the recommendations (repeatable); default: every compatible "
                        "local model")
    m = p.add_argument_group("memory")
    m.add_argument("--device", default="auto",
                   help="auto (CUDA when present), cpu, cuda or cuda:N; the budget is that GPU's free memory "
                        "(NVML) or the available system RAM")
    m.add_argument("--budget-gib", type=float, default=None,
                   help="memory budget in GiB instead of reading the device (plan for a GPU you don't have here "
                        "with --device cuda --budget-gib 24)")
    m.add_argument("--context", type=int, default=None,
                   help="tokens in total (prompt + new); default min(4096, the model's maximum)")
    m.add_argument("--k", type=k_value, default=4, help="draft tokens per step, or 'auto' (default 4)")
    m.add_argument("--tree", default="none", help=f"the draft's sibling-tree widths, as generate's (e.g. "
                                                   f"{SUGGESTED_TREE}; default none = a plain chain)")
    m.add_argument("--gpus", type=int, default=None,
                   help="plan for N GPUs as vLLM splits a model (tensor, then pipeline parallel); the budget is "
                        "per GPU (see also `specdesk export vllm`)")
    p.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    p.add_argument("--no-recommend", action="store_true", help="skip the ranked list of configurations")
    p.set_defaults(func=run)


def _budget(args) -> tuple[int, str, str]:
    """(bytes, where they come from, device) from --budget-gib or the device's own reading."""
    device = args.device
    if args.budget_gib is not None:
        if not (0 < args.budget_gib < 2**20):  # also refuses nan and inf
            raise BadSetting(f"the memory budget must be positive (and below 2^20 GiB), got {args.budget_gib:g} GiB")
        if device == "auto":
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        return int(args.budget_gib * 2**30), "given (--budget-gib)", device
    if device != "auto" and device != "cpu" and not device.startswith("cuda"):
        raise BadSetting(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N")
    from specdesk.hw.memory import memory_budget

    b = memory_budget(device)
    if b.bytes is None:
        raise BadSetting(f"{b.source}: give the budget with --budget-gib")
    return b.bytes, b.source, b.device


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def print_plan(p) -> None:
    from specdesk.core.plan.planner import human_bytes, human_count

    k = p.k if p.drafter != "none" else f"{p.k} (not drafting)"
    dtype = p.dtype if p.target.dtype == p.dtype else f"{p.dtype}; the {p.target.quant} target in {p.target.dtype}"
    print(f"plan on {p.device} ({dtype}), context {p.context} tokens, k {k}")
    print(f"budget {_gib(p.budget_bytes)}: {p.budget_source}")
    for m in (p.target, p.draft):
        if m is None:
            continue
        est = ", ESTIMATED" if m.estimated else ""
        print(f"\n{m.role} {m.name}: {m.architecture}, {human_count(m.params)} params, {m.quant}; "
              f"sizes from {m.source}{est}")
        for r in m.rows:
            print(f"  {human_bytes(r.bytes):>12}  {r.label}")
        for n in m.notes:
            print(f"  note: {n}")
    if p.draft is None:
        table = " (the table of the target's phrases is counted below)" if p.drafter == "phrases" else ""
        print(f"\ndrafter {p.drafter}: no draft model, no draft memory{table}")
    print("\nshared")
    print(f"  {human_bytes(p.transient_bytes):>12}  {p.transient_label} (counted once: they never overlap)")
    for r in p.overhead_rows:
        print(f"  {human_bytes(r.bytes):>12}  {r.label}")
    print(f"\ntotal: {p.verdict}")
    print(f"largest context that fits: {p.max_context} tokens, limited by {p.max_context_reason}")
    if p.measured is not None:
        what = "torch's max reserved + the CUDA context" if p.measured.kind.startswith("cuda") else "peak RSS"
        print(f"measured before (this configuration, context {p.measured.context}): "
              f"{human_bytes(p.measured_bytes)} ({what}); estimated at that context: "
              f"{human_bytes(p.measured_estimate_bytes)}")
    for n in p.notes:
        print(f"note: {n}")
    if p.recommendations:
        print("\nconfigurations that fit, best first:")
        for r in p.recommendations:
            print(f"  {r.rank:2}. {_flags(r)}: {human_bytes(r.total_bytes)}")
            print(f"      {r.reason}")
    elif p.recommendations == () and not p.fits:
        print("\nno configuration fits this budget")


def _flags(r) -> str:
    """The command-line flags that select a recommendation."""
    s = r.settings
    out = [f"--target-quant {s['target_quant']}"]
    out.append(f"--draft {s['draft']}" if s["drafter"] == "model" else f"--drafter {s['drafter']}")
    if s["drafter"] == "model" and s["draft_quant"] != "none":
        out.append(f"--draft-quant {s['draft_quant']}")
    if s["double_quant"]:
        out.append("--double-quant")
    out.append(f"--context {s['context']}")
    return " ".join(out)


def run(args: argparse.Namespace) -> int:
    from specdesk.core.plan import plan

    if args.draft is not None and args.drafter in ("ngram", "none"):
        raise BadSetting(f"--draft and --drafter {args.drafter} contradict each other: choose one")
    budget, source, device = _budget(args)
    target_quant = args.target_quant + ("+dq" if args.double_quant and args.target_quant in ("nf4", "fp4") else "")
    draft_quant = args.draft_quant + ("+dq" if args.double_quant and args.draft_quant in ("nf4", "fp4") else "")
    from specdesk.core.plan.parallel import check_gpus

    gpus = check_gpus(args.gpus) if args.gpus is not None else 1
    p = plan(args.target, args.draft, drafter=args.drafter, target_quant=target_quant, draft_quant=draft_quant,
             dtype=args.dtype, device=device, context=args.context, k=args.k, budget_bytes=budget * gpus,
             budget_source=source + (f", x {gpus} GPUs" if gpus > 1 else ""), candidate_drafts=args.candidate,
             recommend=not args.no_recommend and gpus == 1, tree=args.tree)
    par = None
    if args.gpus is not None:
        from specdesk.core.plan.parallel import split

        par = split(p, gpus, budget)
    if args.json:
        print(json.dumps({**p.to_dict(), **({"parallel": par.to_dict()} if par else {})}, ensure_ascii=False))
    else:
        print_plan(p)
        if par is not None:
            print_parallel(par)
    return 0


def print_parallel(par) -> None:
    from specdesk.core.plan.planner import human_bytes

    print(f"\non {par.gpus} GPUs as vLLM splits it: tensor parallel {par.tensor_parallel}, pipeline parallel "
          f"{par.pipeline_parallel}, draft tensor parallel {par.draft_tensor_parallel}")
    for s in par.shares:
        draft = f", draft {human_bytes(s.draft_weights)} + KV {human_bytes(s.draft_kv)}" if s.draft_weights else ""
        print(f"  GPU {s.index}: {human_bytes(s.total):>11} = target {human_bytes(s.target_weights)} + KV "
              f"{human_bytes(s.target_kv)}{draft}, transient {human_bytes(s.transient)}, overheads "
              f"{human_bytes(s.overhead)}")
    verdict = "fits" if par.fits else "does not fit"
    print(f"per GPU: {verdict} ({human_bytes(par.largest.total)} on the busiest of {human_bytes(par.budget_bytes)})")
    for n in par.notes:
        print(f"note: {n}")
