"""``specdesk export vllm``: the `vllm serve` command for a pair, planned for N GPUs (nothing is loaded)."""

from __future__ import annotations

import argparse
import json

from specdesk.commands.common import add_model_args


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="export the pair for another engine (vllm)",
                       description="Print the command that serves this pair with another engine.")
    targets = p.add_subparsers(dest="engine", metavar="ENGINE", parser_class=type(p))
    targets.required = True
    v = targets.add_parser("vllm", help="the `vllm serve` command with --speculative-config",
                           description="The `vllm serve` command for the pair: --speculative-config (draft model or "
                                       "n-gram, k from the best measured in this pair's session logs), quantization "
                                       "mapped, tensor/pipeline parallel sizes from the planner for --gpus N, and "
                                       "the vLLM limits that apply. Checked against vLLM 0.32.0.")
    g = add_model_args(v, loading=False)
    g.add_argument("--ngram-max", type=int, default=4, help="prompt lookup: longest n-gram (prompt_lookup_max)")
    g.add_argument("--ngram-min", type=int, default=2, help="prompt lookup: shortest n-gram (prompt_lookup_min)")
    s = v.add_argument_group("vllm")
    s.add_argument("--gpus", type=int, default=1, help="GPUs to serve on (default 1)")
    s.add_argument("--budget-gib", type=float, default=None,
                   help="memory per GPU in GiB (default: this machine's GPU from NVML, else 24)")
    s.add_argument("--context", type=int, default=None, help="--max-model-len (default min(4096, the model's))")
    s.add_argument("--k", type=int, default=None, help="num_speculative_tokens (default: the best k measured in "
                                                       "this pair's session logs, else 4)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--served-model-name", default=None)
    v.add_argument("--json", action="store_true", help="print one JSON object")
    v.set_defaults(func=run)


def _budget(gib: float | None) -> tuple[int, str]:
    from specdesk.core.errors import BadSetting

    if gib is not None:
        if not (0 < gib < 2**20):
            raise BadSetting(f"--budget-gib must be positive, got {gib:g}")
        return int(gib * 2**30), "given (--budget-gib)"
    from specdesk.hw.memory import memory_budget

    b = memory_budget("cuda")
    if b.bytes is not None:
        return b.bytes, b.source
    return 24 * 2**30, "no GPU here: 24 GiB assumed (give --budget-gib)"


def run(args: argparse.Namespace) -> int:
    from specdesk.core.plan.planner import human_bytes
    from specdesk.core.plan.vllm import VLLM_VERSION_READ, export_vllm

    budget, source = _budget(args.budget_gib)
    cmd, p, par = export_vllm(args.target, args.draft, drafter=args.drafter, target_quant=args.target_quant,
                              draft_quant=args.draft_quant, double_quant=args.double_quant, dtype=args.dtype,
                              gpus=args.gpus, budget_bytes_per_gpu=budget, context=args.context, k=args.k,
                              ngram=(args.ngram_max, args.ngram_min), port=args.port,
                              served_model_name=args.served_model_name)
    if args.json:
        print(json.dumps({**cmd.to_dict(), "parallel": par.to_dict(), "budget_source": source}, ensure_ascii=False))
        return 0
    print(cmd.shell())
    print()
    print(f"# k = {cmd.k}: {cmd.k_source}" if cmd.k is not None else f"# {cmd.k_source}")
    print(f"# {args.gpus} GPU(s), {human_bytes(budget)} each ({source}): tensor parallel {par.tensor_parallel}, "
          f"pipeline parallel {par.pipeline_parallel}")
    big = par.largest
    print(f"# busiest GPU ({big.index}): {human_bytes(big.total)} of {human_bytes(budget)} "
          f"(target weights {human_bytes(big.target_weights)}, KV {human_bytes(big.target_kv)}"
          + (f", draft {human_bytes(big.draft_weights + big.draft_kv)}" if big.draft_weights else "")
          + f"): {'fits' if par.fits else 'does NOT fit'}")
    for line in cmd.limits:
        print(f"# vLLM limit: {line}")
    for line in cmd.notes:
        print(f"# note: {line}")
    print(f"# (keys and flags as in vLLM {VLLM_VERSION_READ})")
    return 0
