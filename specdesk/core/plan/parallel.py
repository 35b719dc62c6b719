"""Several GPUs: how vLLM would split the pair, and what each GPU holds.

Tensor parallelism (TP) cuts every layer's weights across GPUs: attention heads and MLP columns, and the
vocabulary of the embeddings and the output layer (vLLM's ``VocabParallelEmbedding``). The KV cache splits
by KV head; with more GPUs than KV heads each GPU keeps a replica of one head (vLLM replicates them), so
a GPU's share is max(1/TP, 1/kv_heads). Pipeline parallelism (PP) gives each GPU a run of whole layers.
vLLM needs the attention heads divisible by TP; this picks the largest TP that divides both the GPU
count and the heads, and makes up the rest with PP.

A pre-quantized bitsandbytes checkpoint cannot be split by TP in vLLM (its quantization states do not
follow a split weight: ``bitsandbytes_loader.py``, "Prequant BitsAndBytes models with tensor parallelism
is not supported. Please try with pipeline parallelism."), so it gets PP only. The draft runs with TP 1
(on the first GPU) or the target's TP, the two sizes vLLM allows (``SpeculativeConfig.draft_tensor_parallel_size``).

These are shares of specdesk's own estimate (weights, KV cache at the planned context, transients);
vLLM itself reserves ``--gpu-memory-utilization`` (0.9 by default) of every GPU and fills what the
weights leave with KV-cache blocks, so the figure to compare is weights + transients against that share.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdesk.core.errors import BadSetting
from specdesk.core.plan.params import ModelAnalysis, analyze
from specdesk.core.plan.planner import Plan

MAX_GPUS = 1024


@dataclass(frozen=True)
class GpuShare:
    index: int
    target_weights: int
    target_kv: int
    draft_weights: int
    draft_kv: int
    transient: int
    overhead: int

    @property
    def total(self) -> int:
        return (self.target_weights + self.target_kv + self.draft_weights + self.draft_kv + self.transient
                + self.overhead)


@dataclass(frozen=True)
class ParallelPlan:
    gpus: int
    tensor_parallel: int
    pipeline_parallel: int
    draft_tensor_parallel: int
    shares: tuple[GpuShare, ...]
    budget_bytes: int  # per GPU
    notes: tuple[str, ...] = ()

    @property
    def largest(self) -> GpuShare:
        return max(self.shares, key=lambda s: s.total)

    @property
    def fits(self) -> bool:
        return self.largest.total <= self.budget_bytes

    def to_dict(self) -> dict:
        return {"gpus": self.gpus, "tensor_parallel_size": self.tensor_parallel,
                "pipeline_parallel_size": self.pipeline_parallel,
                "draft_tensor_parallel_size": self.draft_tensor_parallel, "budget_bytes_per_gpu": self.budget_bytes,
                "fits": self.fits, "per_gpu": [{**s.__dict__, "total": s.total} for s in self.shares],
                "notes": list(self.notes)}


def choose_parallel(a: ModelAnalysis, gpus: int) -> tuple[int, int, list[str]]:
    """(TP, PP, notes) for ``gpus`` GPUs."""
    notes: list[str] = []
    layers = max(1, len(a.kv.layers)) if a.kv.known else None
    if a.prequantized == "bitsandbytes":
        notes.append("vLLM cannot split a pre-quantized bitsandbytes checkpoint by tensor parallelism: "
                     "pipeline parallelism only")
        tp = 1
    else:
        tp = max(t for t in range(1, gpus + 1) if gpus % t == 0 and a.num_heads % t == 0)
        if tp < gpus:
            notes.append(f"{a.num_heads} attention heads do not divide by {gpus}: tensor parallel {tp}, the rest "
                         f"as pipeline stages")
        if a.kv.known and a.kv.kv_heads and tp > a.kv.kv_heads:
            notes.append(f"tensor parallel {tp} > {a.kv.kv_heads} KV heads: vLLM replicates KV heads, each GPU "
                         f"keeps one")
    pp = gpus // tp
    if layers is not None and pp > layers:
        raise BadSetting(f"{gpus} GPUs would need {pp} pipeline stages but {a.name} has {layers} layers")
    return tp, pp, notes


def check_gpus(gpus: int) -> int:
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not (1 <= gpus <= MAX_GPUS):
        raise BadSetting(f"--gpus must be between 1 and {MAX_GPUS}, got {gpus!r}")
    return gpus


def split(p: Plan, gpus: int, budget_per_gpu: int) -> ParallelPlan:
    """What each of ``gpus`` GPUs holds when vLLM serves the planned pair (``p``'s context and quantization)."""
    check_gpus(gpus)
    t_a = analyze(p.target.path)
    tp, pp, notes = choose_parallel(t_a, gpus)
    kv_share = max(1 / tp, 1 / t_a.kv.kv_heads) if (t_a.kv.known and t_a.kv.kv_heads) else 1 / tp
    # the draft: TP 1 on the first GPU when it fits there beside its share of the target, else the target's TP
    d = p.draft
    d_tp = 1
    overhead = sum(r.bytes for r in p.overhead_rows)
    t_w = p.target.weight_bytes / tp / pp
    t_kv = p.target.kv_bytes * kv_share / pp
    if d is not None and tp > 1 and t_w + t_kv + d.weight_bytes + d.kv_bytes + p.transient_bytes + overhead \
            > budget_per_gpu:
        d_tp = tp
        notes.append(f"the draft does not fit on one GPU beside the target's share: draft tensor parallel {tp}")
    shares = []
    for i in range(gpus):
        on_draft = d is not None and (d_tp > 1 or i == 0)
        shares.append(GpuShare(index=i, target_weights=int(t_w), target_kv=int(t_kv),
                               draft_weights=int(d.weight_bytes / d_tp) if on_draft else 0,
                               draft_kv=int(d.kv_bytes / d_tp) if on_draft else 0,
                               transient=int(p.transient_bytes / tp), overhead=overhead))
    return ParallelPlan(gpus=gpus, tensor_parallel=tp, pipeline_parallel=pp, draft_tensor_parallel=d_tp,
                        shares=tuple(shares), budget_bytes=int(budget_per_gpu), notes=tuple(notes))
