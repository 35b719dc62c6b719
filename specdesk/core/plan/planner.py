"""Does a target + draft pair fit, why, and what is the best configuration that does?

    from specdesk.core.plan import plan
    p = plan("demo-target", "demo-draft", device="cpu", context=2048, budget_bytes=8 * 2**30)
    p.fits, p.total_bytes, p.max_context, p.recommendations[0].reason, p.to_dict()

Nothing is loaded: models are described by :mod:`.params` (headers or config.json), their bytes by
:mod:`.memory`. The total is the weights and KV caches of both models, plus the largest transient
(prefill activations of either model, or one decode step's logits: they never overlap), plus the
overheads. ``budget_bytes`` comes from the caller (``specdesk.hw.memory.memory_budget`` reads NVML or
system RAM): core never touches NVML.

Recommendations try every target quantization x draft choice (each compatible local draft, prompt
lookup, none) at the requested context, or at the largest context that fits, and rank what fits:
the requested context first, then the target's quality (the speculative output is exactly the
target's, so its quantization decides quality), then the drafter (a model draft accepts most, prompt
lookup costs nothing, none gives no speedup), then the draft's own precision and size, then headroom.
fp4 is not proposed: it takes the same bytes as nf4 with lower quality (QLoRA, Dettmers et al. 2023).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specdesk.core import phrases
from specdesk.core.bnb_cpu import packable, packs_for_dtype
from specdesk.core.errors import BadModel, BadSetting, SpecdeskError
from specdesk.core.loading import cpu_only, follower_quant
from specdesk.core.pairing import HYBRID, PHRASES, may_take_own_draft, resolve_drafter
from specdesk.core.plan import history
from specdesk.core.plan.memory import (DEFAULT_OVERHEADS, Overheads, WeightBytes, capacity, kv_cache_bytes,
                                       lean_table_bytes, logits_bytes, prefill_activation_bytes, weight_bytes)
from specdesk.core.plan.params import ModelAnalysis, analyze
from specdesk.core.plan.quant import OWN, QuantSpec, resolve_plan_dtype
from specdesk.core.tree import checked_widths, leaf_count, widths_text

log = logging.getLogger(__name__)

MAX_K = 32  # = specdesk.core.settings.MAX_K: k "auto" preallocates for it
DEFAULT_CONTEXT = 4096
NO_LIMIT_CONTEXT = 1 << 20  # engine.max_context for a config without max_position_embeddings
TARGET_CHOICES = (QuantSpec("none"), QuantSpec("int8"), QuantSpec("nf4"), QuantSpec("nf4", True))
# On a CPU specdesk's own q8 and q4 (core/int4.py), not bitsandbytes': its CPU layers ran the demo target at 1.6
# tokens/s as int8 against ~88 unquantized; q8 and q4 are what "auto" loads on a CPU and faster than float
CPU_TARGET_CHOICES = (QuantSpec("none"), QuantSpec("q8"), QuantSpec("q4"))
MIN_USEFUL_CONTEXT = 256  # a configuration that fits only a shorter context is not recommended


def gib(n: int | float) -> str:
    return f"{n / 2**30:.2f} GiB"


def human_bytes(n: int | float) -> str:
    n = float(n)
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= div:
            return f"{n / div:.2f} {unit}"
    return f"{int(n)} B"


def human_count(n: int) -> str:
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


# ----------------------------------------------------------------------------- results

@dataclass(frozen=True)
class Row:
    """One line of a breakdown: what, and how many bytes."""

    label: str
    bytes: int


@dataclass(frozen=True)
class ModelPlan:
    role: str  # "target" or "draft"
    name: str
    path: str
    architecture: str
    source: str
    estimated: bool
    params: int
    quant: str
    dtype: str
    weight_bytes: int
    quantized_bytes: int
    kept_bytes: int
    kv_bytes: int
    kv_positions: int
    logits_bytes: int
    activation_bytes: int
    rows: tuple[Row, ...]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["rows"] = [asdict(r) for r in self.rows]
        d["notes"] = list(self.notes)
        return d


@dataclass(frozen=True)
class Recommendation:
    rank: int
    target_quant: str  # QuantSpec label: none, int8, nf4, nf4+dq (a GPU); none, q8, q4 (a CPU)
    drafter: str  # model, ngram, phrases, none
    draft: str | None  # the draft's name (what to pass as --draft) for drafter "model"
    draft_quant: str
    context: int
    total_bytes: int
    headroom_bytes: int
    full_context: bool
    reason: str

    @property
    def settings(self) -> dict:
        """Keyword arguments for ``specdesk.load`` (plus the context)."""
        t = QuantSpec.parse(self.target_quant)
        d = QuantSpec.parse(self.draft_quant)
        return {"target_quant": t.method, "draft_quant": d.method, "double_quant": t.double_quant or d.double_quant,
                "drafter": self.drafter, "draft": self.draft, "context": self.context}

    def to_dict(self) -> dict:
        return {**asdict(self), "settings": self.settings}


@dataclass(frozen=True)
class Plan:
    target: ModelPlan
    draft: ModelPlan | None
    drafter: str
    device: str
    dtype: str
    context: int
    k: int | str
    budget_bytes: int
    budget_source: str
    overhead_rows: tuple[Row, ...]
    transient_bytes: int
    transient_label: str
    total_bytes: int
    fits: bool
    headroom_bytes: int
    max_context: int  # 0 when not even one token fits
    max_context_reason: str
    recommendations: tuple[Recommendation, ...]
    measured: history.Measurement | None = None  # a real peak of this configuration, at measured.context
    measured_bytes: int | None = None  # that peak on the plan's scale (CUDA context added to allocator peaks)
    measured_estimate_bytes: int | None = None  # this plan's estimate at measured.context, to set beside it
    overheads: Overheads = DEFAULT_OVERHEADS
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def verdict(self) -> str:
        """One line: fits or not, and by how much."""
        if self.fits:
            return (f"fits: {human_bytes(self.total_bytes)} of {human_bytes(self.budget_bytes)}, "
                    f"{human_bytes(self.headroom_bytes)} spare")
        return (f"does not fit: needs {human_bytes(self.total_bytes)}, {human_bytes(-self.headroom_bytes)} more "
                f"than the {human_bytes(self.budget_bytes)} available")

    def rows(self) -> list[tuple[str, str, int]]:
        """(section, label, bytes) for every line of the breakdown, in display order."""
        out = [(m.role, r.label, r.bytes) for m in (self.target, self.draft) if m is not None for r in m.rows]
        out.append(("transient", self.transient_label, self.transient_bytes))
        out += [("overhead", r.label, r.bytes) for r in self.overhead_rows]
        return out

    def to_dict(self) -> dict:
        return {
            "target": self.target.to_dict(), "draft": self.draft.to_dict() if self.draft else None,
            "drafter": self.drafter, "device": self.device, "dtype": self.dtype, "context": self.context, "k": self.k,
            "budget_bytes": self.budget_bytes, "budget_source": self.budget_source,
            "overheads": [asdict(r) for r in self.overhead_rows], "overhead_constants": self.overheads.to_dict(),
            "transient_bytes": self.transient_bytes, "transient": self.transient_label,
            "total_bytes": self.total_bytes, "fits": self.fits, "headroom_bytes": self.headroom_bytes,
            "verdict": self.verdict, "max_context": self.max_context, "max_context_reason": self.max_context_reason,
            "recommendations": [r.to_dict() for r in self.recommendations],
            "measured": self.measured.to_dict() if self.measured else None, "measured_bytes": self.measured_bytes,
            "measured_estimate_bytes": self.measured_estimate_bytes,
            "notes": list(self.notes),
        }


# ----------------------------------------------------------------------------- the estimate

@dataclass
class _Config:
    """One candidate configuration; weights precomputed, the context-dependent parts on demand.

    ``k`` sizes the KV preallocation (the engine reserves room for k drafts even when drafting is off);
    ``drafting`` says whether a step verifies k + 1 positions (model, ngram) or one (none).
    """

    target: ModelAnalysis
    target_quant: QuantSpec
    draft: ModelAnalysis | None
    draft_quant: QuantSpec
    dtype: str
    device: str
    k: int
    drafting: bool
    overheads: Overheads
    leaves: int = 0  # a draft tree's leaves per verify pass (core/tree.py): extra KV slots and logits rows
    # host memory of the table of the target's phrases (core/phrases.py) a distilled draft's folder brings; None:
    # that of ``draft``'s folder (drafter "phrases" loads the table without the model: the caller gives it)
    table_bytes: int | None = None

    def __post_init__(self) -> None:
        self.cuda = self.device.startswith("cuda")
        if self.table_bytes is None:
            self.table_bytes = phrases.resident_bytes(Path(self.draft.path)) \
                if self.draft is not None and self.draft.borrows and self.draft.path else 0
        t_q4 = self.target_quant.method in OWN
        for spec in (self.target_quant, self.draft_quant):
            if self.cuda and spec.method in OWN:
                raise cpu_only(spec.method)
        borrowing = self.draft is not None and self.draft.borrows
        if borrowing:  # a distilled draft or EAGLE head follows its target: q4 beside q4/q8, else none (loading)
            self.draft_quant = QuantSpec(follower_quant(self.target_quant.method))
        # q4 and q8 compute in bfloat16 whatever the dtype; a distilled draft takes its target's dtype
        self.t_dtype = "bfloat16" if t_q4 else self.dtype
        self.d_dtype = "bfloat16" if self.draft_quant.method in OWN else self.t_dtype if borrowing else self.dtype
        # bitsandbytes' packed CPU layout for the 4-bit layers of a bfloat16 model, where this CPU gets it (bnb_cpu;
        # asked only then: it imports bitsandbytes)
        packs = not self.cuda and packs_for_dtype(self.dtype)
        self.t_packed = packs and self.target_quant.is_4bit
        self.d_packed = packs and self.draft is not None and self.draft_quant.is_4bit
        self.t_weights = weight_bytes(self.target, self.target_quant, self.t_dtype, lean=True, cpu_packed=self.t_packed)
        self.d_weights = (weight_bytes(self.draft, self.draft_quant, self.d_dtype, lean=True, cpu_packed=self.d_packed)
                          if self.draft else WeightBytes(0, 0))
        self.verify_k = self.k if self.drafting else 0
        self.t_logits = logits_bytes(self.target, self.verify_k, self.t_dtype, leaves=self.leaves)
        self.d_logits = logits_bytes(self.draft, self.k, self.d_dtype, as_draft=True) if self.draft else 0
        self.t_lean = self.target.uses_lean_path  # fastdraft.LeanDecoder runs it (target.TargetRunner)
        self.d_lean = self.draft is not None and self.draft.uses_lean_path

    def parts(self, context: int) -> dict:
        cap = capacity(context, self.k, self.leaves)
        t_kv = kv_cache_bytes(self.target, cap, self.t_dtype)
        if self.t_lean and self.target.runs_lean(cap):
            t_kv += lean_table_bytes(self.target, cap, self.t_dtype)
        d_kv = kv_cache_bytes(self.draft, cap, self.d_dtype) if self.draft else 0
        if self.d_lean and self.draft.runs_lean(cap):
            d_kv += lean_table_bytes(self.draft, cap, self.d_dtype)
        t_act = prefill_activation_bytes(self.target, self.target_quant, self.t_dtype, context, self.t_packed)
        d_act = (prefill_activation_bytes(self.draft, self.draft_quant, self.d_dtype, context, self.d_packed)
                 if self.draft else 0)
        transient = max(t_act, d_act, self.t_logits + self.d_logits)
        tensors = self.t_weights.total + self.d_weights.total + t_kv + d_kv + transient
        headroom = int(self.overheads.allocator_headroom * tensors)
        if self.cuda:
            fixed = [("CUDA context (outside torch's allocator)", self.overheads.cuda_context_bytes),
                     ("cuBLAS workspaces", self.overheads.cuda_workspace_bytes)]
        else:
            fixed = [("runtime (Python, torch, transformers)", self.overheads.cpu_runtime_bytes)]
            if self.table_bytes:  # a Python dict in host memory: on a GPU it takes none of the budget
                fixed.append(("the table of the target's phrases (a lookup dict)", self.table_bytes))
        fixed.append((f"allocator headroom ({self.overheads.allocator_headroom:.0%} of tensors)", headroom))
        total = tensors + sum(b for _, b in fixed)
        return {"capacity": cap, "t_kv": t_kv, "d_kv": d_kv, "t_act": t_act, "d_act": d_act,
                "transient": transient, "fixed": fixed, "total": total}

    def total(self, context: int) -> int:
        return self.parts(context)["total"]

    def max_context(self, budget: int, limit: int) -> int:
        """Largest context <= limit whose total fits ``budget`` (0 if none); totals grow with context."""
        if self.total(1) > budget:
            return 0
        if self.total(limit) <= budget:
            return limit
        lo, hi = 1, limit  # total(lo) fits, total(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.total(mid) <= budget:
                lo = mid
            else:
                hi = mid
        return lo


def _context_limit(a: ModelAnalysis) -> int:
    return int(a.max_positions) if a.max_positions else NO_LIMIT_CONTEXT


def _model_plan(role: str, a: ModelAnalysis, spec: QuantSpec, dtype: str, w: WeightBytes, kv: int, cap: int,
                logits: int, act: int, k: int, lean: bool = False, cpu_packed: bool = False) -> ModelPlan:
    quant_label = f"prequantized ({a.prequantized})" if a.prequantized else spec.label
    notes = a.notes
    if a.prequantized:
        rows = [Row(f"weights as stored ({a.prequantized})", w.quantized)]
    else:
        what = f"{spec.label} (bitsandbytes)" if spec.method != "none" else dtype
        if spec.method == "q4":
            what = "q4 (4-bit codes, bfloat16 step and zero per 32 weights)"
        elif spec.method == "q8":
            what = "q8 (8-bit codes, a bfloat16 step per 32 weights)"
        if cpu_packed:
            what = f"{spec.label} (bitsandbytes, packed CPU layout)"
            notes = notes + (packed_layout_note(a, spec),)
        layers = len(a.linears) + (1 if spec.method in OWN and a.own_head else 0)  # a q4 draft's own head
        rows = [Row(f"weights: {layers} linear layers in {what}", w.quantized),
                Row(f"weights kept in {dtype}: embeddings, lm_head, norms, biases", w.kept)]
    if w.lean_copies:
        rows.append(Row("lean path: fused q/k/v and gate/up copies", w.lean_copies))
    kv_what = f"{len(a.kv.layers)} layers x {a.kv.kv_heads} KV heads x {a.kv.head_dim}"
    if a.kv.sliding:
        kv_what += ", sliding-window layers capped"
    if lean:
        kv_what += "; + the lean path's rotary tables"
    rows.append(Row(f"KV cache: {cap} positions ({kv_what})", kv))
    if role == "target":
        rows.append(Row(f"verify logits per step: {k + 1} x {a.vocab_size} + float32 sampling copies", logits))
    else:
        rows.append(Row(f"draft distributions per step: {k} x {a.vocab_size} float32", logits))
    rows.append(Row("prefill activation peak (512-token chunks)", act))
    notes = notes + (("the KV layout is unknown: KV cache not counted",) if not a.kv.known else ())
    return ModelPlan(role=role, name=a.name, path=a.path, architecture=a.architecture, source=a.source,
                     estimated=a.estimated or not a.kv.known, params=a.params, quant=quant_label, dtype=dtype,
                     weight_bytes=w.total, quantized_bytes=w.quantized, kept_bytes=w.kept, kv_bytes=kv,
                     kv_positions=cap, logits_bytes=logits, activation_bytes=act, rows=tuple(rows), notes=notes)


def packed_layout_note(a: ModelAnalysis, spec: QuantSpec) -> str:
    """What the plan assumed for 4-bit layers on a CPU where bitsandbytes packs them (see core/bnb_cpu.py)."""
    kept = sum(1 for lin in a.linears if not packable(lin.out_features, lin.in_features))
    text = ("4-bit layout assumed: bitsandbytes' packed CPU layout (this CPU has AVX-512 BF16 and the model is "
            "bfloat16): absmax in bfloat16")
    if spec.double_quant:
        text += ", double quantization undone (it saves nothing here)"
    if kept:
        text += f"; {kept} of {len(a.linears)} layers keep the unpacked layout (shapes the packed kernel refuses)"
    return text


# ----------------------------------------------------------------------------- candidates

def find_candidate_drafts(target: str) -> list[str]:
    """Local models that can draft for ``target`` (compatible tokenizer, smaller), as refs.

    The hook for model discovery: ``specdesk.core.discovery.drafts_for``. A discovery failure means
    "no candidates" (prompt lookup and no drafting are always offered).
    """
    try:
        from specdesk.core.discovery import drafts_for

        return [c.entry.name for c in drafts_for(target) if c.compatible]
    except Exception as e:  # discovery is best effort here: planning must not fail because a cache is odd
        log.info("no draft candidates for %s: %s", target, e)
        return []


def _check_k(k: int | str) -> int:
    if k == "auto":
        return MAX_K
    if isinstance(k, bool) or not isinstance(k, int) or not (0 <= k <= MAX_K):
        raise BadSetting(f"k must be between 0 and {MAX_K} or 'auto', got {k!r}")
    return k


# ----------------------------------------------------------------------------- the public function

def plan(target: str, draft: str | None = None, *, drafter: str | None = None,
         target_quant: str | QuantSpec = "none", draft_quant: str | QuantSpec = "none", double_quant: bool = False,
         dtype: str = "auto", device: str = "cuda", context: int | None = None, k: int | str = 4,
         budget_bytes: int | None = None, budget_source: str = "given",
         candidate_drafts: Sequence[str] | None = None, recommend: bool = True, max_recommendations: int = 10,
         overheads: Overheads = DEFAULT_OVERHEADS, use_history: bool = True,
         tree: tuple[int, ...] | str = ()) -> Plan:
    """Plan target (+ draft) on ``device`` ("cuda", "cuda:N" or "cpu") within ``budget_bytes``.

    target, draft: what ``specdesk.load`` takes (demo name, folder, Hugging Face id in the local cache);
        config.json alone is enough. drafter: "model", "model+lookup", "phrases", "ngram" or "none" (default as
        ``specdesk.load``); the plan names "model+lookup" "model" (the same memory).
    target_quant, draft_quant: "none", "int8", "nf4", "fp4" (or "nf4+dq"), or a QuantSpec;
        ``double_quant`` applies to 4-bit names given as text. dtype: "auto" (bf16 on CUDA, fp32 on CPU),
        "float32", "float16" or "bfloat16". context: total tokens (prompt + new), default
        min(4096, the target's maximum). k: draft tokens per step (or "auto": room for 32). tree: the draft's
        sibling-tree widths (core/tree.py, e.g. "4,2"; () a plain chain, the app's and CLI's default), counted for a
        draft model.
    candidate_drafts: draft refs to consider for recommendations; None asks model discovery.
    Raises SpecdeskError subclasses (one-line messages) for bad input.
    """
    given_draft = draft
    if budget_bytes is None:
        raise BadSetting("no memory budget: give one (specdesk.hw.memory.memory_budget reads the device's)")
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, (int, float)) or budget_bytes <= 0:
        raise BadSetting(f"the memory budget must be a positive number of bytes, got {budget_bytes!r}")
    budget = int(budget_bytes)
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device != "cpu" and not str(device).startswith("cuda"):
        raise BadSetting(f"unknown device {device!r}: use cpu, cuda or cuda:N")
    k_int = _check_k(k)
    from specdesk.core.loading import resolve, resolve_quant

    target_quant = resolve_quant(target, target_quant, device, dtype)  # "auto" as the load makes it
    draft_quant = resolve_quant(draft, draft_quant, device, dtype)
    table_bytes = None
    own_note = None
    if may_take_own_draft(str(target), None if draft is None else str(draft), drafter):
        from specdesk.core.discovery import drafting_with, own_draft

        found = own_draft(str(target))  # a draft distilled for it, as the load takes it
        if found is not None:
            draft, own_note = found, (f"{drafting_with(found, drafter, str(target))}, as `specdesk generate` takes "
                                      f"it; --drafter ngram or none plans without it")
    own = phrases.own_table_for(str(target), draft, drafter)  # `specdesk distill --phrases-only`'s (engine.load)
    if own is not None:
        drafter, table_bytes = PHRASES, phrases.resident_bytes(own)
    else:
        drafter, draft = resolve_drafter(str(target), None if draft is None else str(draft), drafter)
    if drafter == HYBRID:  # the draft model with prompt lookup beside it: the same models in memory
        drafter = "model"
    elif drafter == PHRASES:  # the table only (host memory, ~7 MB for SmolLM2's): no model loaded
        if table_bytes is None:
            table_bytes = phrases.resident_bytes(resolve(draft)) if draft is not None else 0
        draft = None  # drafts as prompt lookup does (k + 1 positions a pass) with the table in host memory
    t_spec = QuantSpec.parse(target_quant, double_quant)
    d_spec = QuantSpec.parse(draft_quant, double_quant)
    pdtype = resolve_plan_dtype(dtype, device)

    t_a = analyze(target)
    if t_a.borrows:  # as the load refuses it
        raise BadModel(f"{t_a.name} is a distilled draft that borrows its target's embeddings: plan it as the draft "
                       f"of that target (or write a standalone copy: specdesk distill --standalone)")
    d_a = analyze(draft) if draft is not None else None
    if d_a is not None and given_draft is not None:
        _check_pair(str(target), str(draft))
    notes: list[str] = [own_note] if own_note else []
    for a, spec in ((t_a, t_spec), (d_a, d_spec)):
        if a is not None and a.prequantized and spec.method != "none":
            raise BadSetting(f"{a.name} is already quantized ({a.prequantized}); plan it with quantization none")
        if a is not None and a.prequantized and a.stored_bytes is None:
            raise BadModel(f"{a.name} is already quantized ({a.prequantized}) and its weights are not here "
                           f"to measure")
    limit = _context_limit(t_a)
    if context is None:
        context = min(DEFAULT_CONTEXT, limit)
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise BadSetting(f"the context must be a positive number of tokens, got {context!r}")
    if context > limit:
        raise BadSetting(f"context {context} exceeds {t_a.name}'s maximum of {limit} tokens")
    if d_a is not None and d_a.max_positions and context > d_a.max_positions:
        notes.append(f"the draft {d_a.name} was trained for {d_a.max_positions} positions, fewer than {context}")
    if k == "auto":
        notes.append(f"k auto: room planned for up to {MAX_K} draft tokens per step")
    widths = checked_widths(tree)
    leaves = leaf_count(widths, k_int) if drafter == "model" else 0
    if leaves:
        notes.append(f"draft tree {widths_text(widths)}: {leaves} more positions verified per step")

    cfg = _Config(t_a, t_spec, d_a, d_spec, pdtype, device, k_int, drafter != "none", overheads, leaves, table_bytes)
    if cfg.table_bytes and cfg.cuda:
        notes.append(f"the table of the target's phrases takes {human_bytes(cfg.table_bytes)} of host "
                     f"memory (not the GPU's)")
    parts = cfg.parts(context)
    t_plan = _model_plan("target", t_a, t_spec, cfg.t_dtype, cfg.t_weights, parts["t_kv"], parts["capacity"],
                         cfg.t_logits, parts["t_act"], cfg.verify_k, cfg.t_lean, cfg.t_packed)
    d_plan = None
    if d_a is not None:
        d_plan = _model_plan("draft", d_a, cfg.draft_quant, cfg.d_dtype, cfg.d_weights, parts["d_kv"], parts["capacity"],
                             cfg.d_logits, parts["d_act"], cfg.k, cfg.d_lean, cfg.d_packed)
    transient_label = "largest transient: " + max(
        (("target prefill activations", parts["t_act"]), ("draft prefill activations", parts["d_act"]),
         ("one decode step's logits", cfg.t_logits + cfg.d_logits)), key=lambda x: x[1])[0]
    total = parts["total"]
    max_ctx = cfg.max_context(budget, limit)
    if max_ctx == limit:
        why = "the model's maximum context" if t_a.max_positions else "the engine's maximum context"
    elif max_ctx == 0:
        why = "memory (the weights and overheads alone exceed the budget)"
    else:
        why = f"memory ({max_ctx + 1} tokens would need more than {gib(budget)})"

    measured = measured_bytes = measured_estimate = None
    if use_history:
        # the dtype the target computes in, as the load records it (q4 and q8: bfloat16, whatever was asked)
        measured = history.lookup_measurement(t_a.path, t_spec.label, context, device,
                                              draft=d_a.path if d_a else drafter, draft_quant=d_spec.label,
                                              dtype=cfg.t_dtype)
        if measured is not None:
            measured_bytes = measured.comparable_bytes(overheads.cuda_context_bytes)
            measured_estimate = cfg.total(min(max(1, measured.context), limit))

    recs: tuple[Recommendation, ...] = ()
    if recommend:
        if candidate_drafts is None:
            candidate_drafts = find_candidate_drafts(str(target))
        recs = recommendations(t_a, [draft] if draft else [], list(candidate_drafts), d_spec, pdtype, device,
                               context, k_int, budget, overheads, max_recommendations, widths,
                               own_quants=dtype in ("auto", "bfloat16"), stored=_gguf_quant(target, device, dtype))
    return Plan(target=t_plan, draft=d_plan, drafter=drafter, device=device, dtype=pdtype, context=context, k=k,
                budget_bytes=budget, budget_source=budget_source,
                overhead_rows=tuple(Row(label, b) for label, b in parts["fixed"]),
                transient_bytes=parts["transient"], transient_label=transient_label, total_bytes=total,
                fits=total <= budget, headroom_bytes=budget - total, max_context=max_ctx, max_context_reason=why,
                recommendations=recs, measured=measured, measured_bytes=measured_bytes,
                measured_estimate_bytes=measured_estimate, overheads=overheads,
                notes=tuple(notes))


def _check_pair(target: str, draft: str) -> None:
    """The tokenizer check the load makes (core/compat.py), where both models' tokenizers are here: a pair that
    `specdesk generate` refuses is not planned as fitting. Config-only folders (planning before a download) pass."""
    from specdesk.core.compat import check_tokenizers
    from specdesk.core.discovery import display_name, read_tokenizer
    from specdesk.core.loading import resolve

    t_tok, d_tok = read_tokenizer(resolve(target)), read_tokenizer(resolve(draft))
    if t_tok is None or d_tok is None:
        return
    check_tokenizers(t_tok, d_tok, display_name(target), display_name(draft)).raise_if_bad()


# ----------------------------------------------------------------------------- recommendations

def _gguf_quant(target: str, device: str, dtype: str) -> str | None:
    """q4 or q8 where ``target`` is a quantized GGUF file that "auto" loads so on ``device``, else None."""
    from specdesk.core.loading import is_gguf, resolve, resolve_quant

    q = resolve_quant(target, "auto", device, dtype)  # "none" where it does not resolve
    return q if q in OWN and is_gguf(resolve(target)) else None


_TARGET_PHRASE = {
    "none": "unquantized target (its full quality)",
    "int8": "int8 target (near-lossless, half the bytes of 16-bit)",
    "q8": "q8 target (8-bit groups of 32 on the CPU: near-lossless, about half the bytes of 16-bit)",
    "q4": "q4 target (4-bit groups of 32 on the CPU)",
    "nf4": "nf4 target (4-bit: some quality loss, about a quarter of the 16-bit bytes)",
    "nf4+dq": "nf4 target with double quantization (4-bit, ~0.4 bit/weight less than nf4)",
    "fp4": "fp4 target (4-bit)",
    "fp4+dq": "fp4 target with double quantization",
}
_DRAFTER_RANK = {"model": 0, "ngram": 1, "none": 2}


@dataclass
class _Candidate:
    cfg: _Config
    drafter: str
    draft_name: str | None
    context: int
    total: int
    full: bool
    budget: int

    def key(self) -> tuple:
        t = self.cfg.target
        d = self.cfg.draft
        size = (0, 0)
        if d is not None:  # a larger draft accepts more, until it costs more than it saves (~1/4 of the target)
            size = (0, -d.params) if d.params * 4 <= t.params else (1, d.params)
        return (not self.full, self.cfg.target_quant.quality_rank, _DRAFTER_RANK[self.drafter],
                self.cfg.draft_quant.quality_rank if d is not None else 0, size, -(self.budget - self.total))


_KEY_WHY = ("a shorter context", "a more quantized target (lower quality)", "a weaker drafter",
            "a more quantized draft", "a draft size less likely to pay off", "less headroom")


def _reason(c: _Candidate, prev: _Candidate | None, requested: int) -> str:
    parts = [_TARGET_PHRASE.get(c.cfg.target_quant.label, c.cfg.target_quant.label)]
    if c.drafter == "model":
        d = c.cfg.draft
        q = "" if c.cfg.draft_quant.method == "none" else f", {c.cfg.draft_quant.label}"
        parts.append(f"draft {c.draft_name} ({human_count(d.params)} params{q}: a model draft accepts the most)")
    elif c.drafter == "ngram":
        parts.append("prompt lookup (no draft memory; pays off on repetitive text)")
    else:
        parts.append("no drafting (plain decoding, no speedup)")
    parts.append(f"the full {c.context}-token context" if c.full
                 else f"context cut to {c.context} (the requested {requested} does not fit)")
    parts.append(f"{human_bytes(c.budget - c.total)} spare")
    line = "; ".join(parts)
    if prev is None:
        return "best that fits: " + line
    for i, (a, b) in enumerate(zip(prev.key(), c.key())):
        if a != b:
            return f"below the one above for {_KEY_WHY[i]}: " + line
    return line


def recommendations(target: ModelAnalysis, drafts: Sequence[str], candidates: Sequence[str], draft_quant: QuantSpec,
                    dtype: str, device: str, context: int, k: int, budget: int,
                    overheads: Overheads = DEFAULT_OVERHEADS, limit: int = 10,
                    tree: tuple[int, ...] = (), own_quants: bool = True,
                    stored: str | None = None) -> tuple[Recommendation, ...]:
    """Configurations that fit, best first (see the module docstring for the order). ``tree``: the draft's
    sibling-tree widths, counted for draft models. On a CPU the target's choices are none, q8 and q4
    (``own_quants`` False, a float dtype asked for, which q8 and q4 cannot keep: none only); ``stored``: a GGUF
    file's own form on a CPU (q4 or q8, as "auto" loads it): nothing less quantized is offered, since widening the
    file's codes adds bytes and no quality."""
    if target.prequantized:
        t_choices: tuple[QuantSpec, ...] = (QuantSpec("none"),)
    elif device.startswith("cuda"):
        t_choices = TARGET_CHOICES
    else:
        t_choices = CPU_TARGET_CHOICES if own_quants else (QuantSpec("none"),)
        if stored in OWN and own_quants:
            t_choices = tuple(c for c in t_choices if c.quality_rank >= QuantSpec(stored).quality_rank)
    draft_models: list[tuple[str, ModelAnalysis]] = []
    seen: set[str] = {target.path}
    for ref in [*drafts, *candidates]:
        try:
            a = analyze(ref)
        except SpecdeskError as e:
            log.info("draft candidate %s skipped: %s", ref, e)
            continue
        if a.path in seen:
            continue
        seen.add(a.path)
        draft_models.append((str(ref), a))
    d_specs = [QuantSpec("none")] + ([draft_quant] if draft_quant.method != "none" else [])
    options: list[tuple[str, str | None, ModelAnalysis | None, QuantSpec]] = []
    for name, a in draft_models:
        for spec in d_specs:
            if (a.prequantized or a.borrows) and spec.method != "none":  # quantized already, or follows its target
                continue
            options.append(("model", name, a, spec))
    options += [("ngram", None, None, QuantSpec("none")), ("none", None, None, QuantSpec("none"))]
    limit_ctx = _context_limit(target)
    found: list[_Candidate] = []
    for t_spec in t_choices:
        for drafter, name, a, d_spec in options:
            cfg = _Config(target, t_spec, a, d_spec, dtype, device, k, drafter != "none", overheads,
                          leaf_count(tree, k) if drafter == "model" else 0)
            total = cfg.total(context)
            ctx, full = context, True
            if total > budget:
                ctx, full = cfg.max_context(budget, min(context, limit_ctx)), False
                if ctx < min(context, MIN_USEFUL_CONTEXT):
                    continue
                total = cfg.total(ctx)
            found.append(_Candidate(cfg, drafter, name, ctx, total, full, budget))
    found.sort(key=_Candidate.key)
    out = []
    prev = None
    for i, c in enumerate(found[:limit]):
        out.append(Recommendation(rank=i + 1, target_quant=c.cfg.target_quant.label, drafter=c.drafter,
                                  draft=c.draft_name, draft_quant=c.cfg.draft_quant.label if c.drafter == "model"
                                  else "none", context=c.context, total_bytes=c.total,
                                  headroom_bytes=budget - c.total, full_context=c.full,
                                  reason=_reason(c, prev, context)))
        prev = c
    return tuple(out)

