"""The ``vllm serve`` command for a pair: speculative config, quantization, parallelism, and vLLM's limits.

Checked against vLLM v0.32.0 (docs.vllm.ai/en/v0.32.0; source ``vllm/config/speculative.py``,
``vllm/model_executor/model_loader/bitsandbytes_loader.py``, ``docs/features/speculative_decoding/
acceptance_metrics.md``):

- ``--speculative-config`` JSON keys: ``method`` ("draft_model", "ngram", ...), ``model`` (the draft),
  ``num_speculative_tokens`` (k), ``draft_tensor_parallel_size`` ("can only be 1 or the same as the
  target model's tensor parallel size"), ``quantization`` (the draft's weights), ``max_model_len``,
  ``prompt_lookup_max`` / ``prompt_lookup_min`` (ngram).
- bitsandbytes: ``--quantization bitsandbytes`` quantizes in flight, and the loader's in-flight 4-bit is
  NF4 with double quantization (int8 and fp4 are read only from pre-quantized checkpoints); a pre-quantized
  bitsandbytes checkpoint is detected from its config and refuses tensor parallelism.
- ``--per-request-spec-decode-metrics summary`` (vLLM 0.29 and later) puts ``metrics.speculative_decoding``
  in each response, the shape `specdesk serve` answers with, so the app's remote mode reads both alike.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from specdesk.core.errors import BadSetting
from specdesk.core.plan.bestk import BestK
from specdesk.core.plan.parallel import ParallelPlan
from specdesk.core.plan.planner import Plan

VLLM_VERSION_READ = "0.32.0"
DEFAULT_K = 4  # specdesk's own default, when no session log says better


@dataclass(frozen=True)
class VllmCommand:
    argv: tuple[str, ...]
    speculative_config: dict | None
    k: int | None
    k_source: str
    tensor_parallel: int
    pipeline_parallel: int
    limits: tuple[str, ...] = ()  # vLLM's known limits that apply to this pair
    notes: tuple[str, ...] = field(default_factory=tuple)

    def shell(self) -> str:
        """The command as one copyable shell line per option."""
        parts = [shlex.join(self.argv[:3])]
        i = 3
        while i < len(self.argv):
            if i + 1 < len(self.argv) and not self.argv[i + 1].startswith("--"):
                parts.append(f"{self.argv[i]} {shlex.quote(self.argv[i + 1])}")
                i += 2
            else:
                parts.append(self.argv[i])
                i += 1
        return " \\\n    ".join(parts)

    def to_dict(self) -> dict:
        return {"argv": list(self.argv), "command": self.shell(), "speculative_config": self.speculative_config,
                "num_speculative_tokens": self.k, "k_source": self.k_source,
                "tensor_parallel_size": self.tensor_parallel, "pipeline_parallel_size": self.pipeline_parallel,
                "limits": list(self.limits), "notes": list(self.notes), "vllm_version_read": VLLM_VERSION_READ}


def model_ref(ref: str, path: str) -> str:
    """What vLLM should load: a Hugging Face id stays an id (vLLM finds it in the same cache), else the folder."""
    text = str(ref)
    if text.count("/") == 1 and not text.startswith((".", "/", "~")) and not Path(text).expanduser().exists():
        return text
    return str(path)


def build(p: Plan, par: ParallelPlan, *, target_ref: str, draft_ref: str | None, best: BestK,
          k: int | None = None, ngram: tuple[int, int] = (4, 2), port: int = 8000,
          served_model_name: str | None = None, standalone: tuple[str, str, bool] | None = None) -> VllmCommand:
    """The command for plan ``p`` split as ``par``; ``k`` overrides the measured best k. ``standalone``: for a
    distilled draft that borrows its target's tensors (which vLLM cannot load), the standalone copy's folder, the
    command that writes it, and whether it is there already."""
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise BadSetting(f"k for vLLM must be a whole number of at least 1, got {k!r}")
    limits: list[str] = []
    notes: list[str] = list(par.notes)
    t = p.target
    argv = ["vllm", "serve", model_ref(target_ref, t.path)]
    tq = t.quant
    if tq.startswith("prequantized"):
        if "bitsandbytes" in tq:
            limits.append("a pre-quantized bitsandbytes model cannot use tensor parallelism in vLLM "
                          "(pipeline parallelism only)")
        notes.append(f"the target is {tq}: vLLM reads its quantization from its config")
    elif tq != "none":
        argv += ["--quantization", "bitsandbytes"]
        if not tq.startswith("nf4"):
            limits.append(f"vLLM's in-flight bitsandbytes quantization is 4-bit NF4: the {tq} target specdesk ran "
                          f"becomes nf4 in vLLM, so its output can differ from what specdesk measured")
        elif "+dq" not in tq:
            notes.append("vLLM's in-flight NF4 also double-quantizes the constants (a little smaller than "
                         "specdesk's nf4 without --double-quant; the weights are the same)")
    argv += ["--dtype", p.dtype if p.dtype in ("bfloat16", "float16", "float32") else "auto"]
    argv += ["--max-model-len", str(p.context)]
    if par.tensor_parallel > 1:
        argv += ["--tensor-parallel-size", str(par.tensor_parallel)]
    if par.pipeline_parallel > 1:
        argv += ["--pipeline-parallel-size", str(par.pipeline_parallel)]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    argv += ["--port", str(port)]

    spec: dict | None = None
    chosen = k if k is not None else (best.k or DEFAULT_K)
    source = "given (--k)" if k is not None else (best.source if best.k else
                                                  f"{best.source}: k={DEFAULT_K}, specdesk's default")
    if p.drafter == "model" and p.draft is not None:
        draft_model = model_ref(draft_ref or p.draft.path, p.draft.path)
        if standalone is not None:
            draft_model, how, there = standalone
            notes.insert(0, f"the draft {p.draft.name} borrows its target's embeddings and head (specdesk's form), "
                            f"which vLLM cannot load: the command names its standalone copy {draft_model}"
                            + ("" if there else f", which is not written yet: {how}"))
        spec = {"method": "draft_model", "model": draft_model,
                "num_speculative_tokens": chosen, "draft_tensor_parallel_size": par.draft_tensor_parallel,
                "max_model_len": p.context}
        dq = p.draft.quant
        if dq.startswith("prequantized"):
            notes.append(f"the draft is {dq}: vLLM reads its quantization from its config")
        elif dq != "none":
            spec["quantization"] = "bitsandbytes"
            if not dq.startswith("nf4"):
                limits.append(f"the {dq} draft becomes nf4 in vLLM's in-flight bitsandbytes quantization")
        limits.append("the draft's tensor parallel size must be 1 or the target's "
                      f"({par.tensor_parallel}); this uses {par.draft_tensor_parallel}")
        limits.append("the draft must share the target's tokenizer (specdesk's loader checks it: `specdesk models --drafts-for TARGET`)")
    elif p.drafter in ("ngram", "phrases"):
        if p.drafter == "phrases":
            notes.append("vLLM has no table of the target's phrases: its prompt lookup (ngram) drafts instead")
        spec = {"method": "ngram", "num_speculative_tokens": chosen, "prompt_lookup_max": int(ngram[0]),
                "prompt_lookup_min": int(ngram[1])}
    else:
        chosen, source = None, "no drafter: plain decoding"
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec, separators=(", ", ": ")),
                 "--per-request-spec-decode-metrics", "summary"]
        limits.append("vLLM's k is fixed per server (num_speculative_tokens); specdesk's k=auto has no vLLM "
                      "equivalent")
    if p.device == "cpu":
        notes.append("planned for the CPU: vLLM serves on GPUs (plan with --device cuda --budget-gib N for the GPU "
                     "you will use)")
    return VllmCommand(argv=tuple(argv), speculative_config=spec, k=chosen, k_source=source,
                       tensor_parallel=par.tensor_parallel, pipeline_parallel=par.pipeline_parallel,
                       limits=tuple(limits), notes=tuple(notes))


def export_vllm(target: str, draft: str | None = None, *, drafter: str | None = None, target_quant: str = "none",
                draft_quant: str = "none", double_quant: bool = False, dtype: str = "auto", gpus: int = 1,
                budget_bytes_per_gpu: int, context: int | None = None, k: int | None = None,
                ngram: tuple[int, int] = (4, 2), logs_dir=None, port: int = 8000,
                served_model_name: str | None = None) -> tuple[VllmCommand, Plan, ParallelPlan]:
    """Plan the pair for vLLM on ``gpus`` GPUs and build its command (nothing is loaded)."""
    from specdesk.core import userdirs
    from specdesk.core.plan.bestk import best_k
    from specdesk.core.plan.parallel import check_gpus, split
    from specdesk.core.plan.planner import plan

    check_gpus(gpus)
    target_quant = "none" if target_quant == "auto" else target_quant  # on GPUs auto is the model as stored
    draft_quant = "none" if draft_quant == "auto" else draft_quant
    tq = target_quant + ("+dq" if double_quant and target_quant in ("nf4", "fp4") else "")
    dq = draft_quant + ("+dq" if double_quant and draft_quant in ("nf4", "fp4") else "")
    p = plan(target, draft, drafter=drafter, target_quant=tq, draft_quant=dq, dtype=dtype, device="cuda",
             context=context, k=k or DEFAULT_K, budget_bytes=budget_bytes_per_gpu * gpus,
             budget_source=f"{gpus} GPU(s)", recommend=False, use_history=False)
    par = split(p, gpus, budget_bytes_per_gpu)
    best = best_k(p.target.path, p.drafter, p.draft.path if p.draft else None,
                  logs_dir if logs_dir is not None else userdirs.logs_dir())
    from specdesk.core.distill.draft import borrow_info

    standalone = None
    if p.drafter == "model" and p.draft is not None and borrow_info(Path(p.draft.path)) is not None:
        out = userdirs.data_dir() / "standalone" / f"{Path(p.draft.path).name}-standalone"
        how = shlex.join(["specdesk", "distill", "--standalone", p.draft.path, "--target", target, "--out", str(out)])
        standalone = (str(out), how, (out / "config.json").exists())
    cmd = build(p, par, target_ref=target, draft_ref=draft if p.drafter == "model" else None, best=best, k=k,
                ngram=ngram, port=port, served_model_name=served_model_name, standalone=standalone)
    return cmd, p, par

