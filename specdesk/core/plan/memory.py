"""Bytes of one loaded model on a device: weights, KV cache, logits, prefill activations.

Pure arithmetic over a :class:`~specdesk.core.plan.params.ModelAnalysis`, cheap enough to re-run for
every setting the planner tries. What each part models, and where it comes from in our engine:

- weights: quantized linear layers at bitsandbytes' storage (``quant.linear_weight_bytes``); the rest
  (embeddings, lm_head, norms, biases) in the compute dtype. A small unquantized model on the lean
  path (``fastdraft.LeanDecoder``, target and draft alike) also holds fused copies of its q/k/v and
  gate/up weights, and any model on it holds rotary tables beside its KV cache.
- KV cache: ``kvcache.new_cache`` preallocates, per full-attention layer, keys and values of shape
  (1, kv_heads, capacity, head_dim) in the compute dtype, capacity = prompt + max new tokens + k + 2
  (``decode.decode``); sliding-window layers keep at most ``window - 1`` positions (transformers'
  ``DynamicSlidingWindowLayer``). GQA: only the KV heads are stored.
- verify logits: the target scores k + 1 positions over its vocabulary per step; sampling makes float32
  copies (``sampling.process_logits``); the draft keeps k float32 distributions.
- prefill activations: the prompt goes through in chunks of 512 tokens (``sequence.PREFILL_CHUNK``, target
  and draft alike) with ``logits_to_keep=1``, so the peak is one chunk's hidden states, q/k/v, attention mask and MLP
  intermediates, plus the weight bitsandbytes dequantizes for a multi-token 4-bit matmul.

The overheads (CUDA context, library workspaces, allocator headroom, CPU runtime) are stated constants
in :class:`Overheads`, adjustable by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdesk.core.plan.params import ModelAnalysis
from specdesk.core.bnb_cpu import packable
from specdesk.core.plan.quant import (BF16, FP32, MAP_BYTES, OWN, Q4_GROUP, QuantSpec, dtype_bytes, linear_weight_bytes,
                                     q4_fits, q8_weight_bytes, shares_head)

MiB = 2**20
PREFILL_CHUNK = 512  # = specdesk.core.sequence.PREFILL_CHUNK, which target and draft share (a test checks)
CAPACITY_EXTRA = 2  # decode.decode: capacity = prompt + max new tokens + k + tree leaves + 2
SAMPLING_COPIES = 3  # process_logits: .float()/temperature, masked top-k/top-p, softmax: live at once
LEAN_FUSE_LIMIT_BYTES = 512 * MiB  # = fastdraft.FUSE_LIMIT_BYTES (a test checks)


@dataclass(frozen=True)
class Overheads:
    """Memory that is not any model's tensors. Defaults are stated estimates; pass your own to adjust.

    cuda_context_bytes: the CUDA context, kernel images and driver state, outside torch's allocator
        (nvidia-smi shows ~300-600 MiB per process on recent GPUs; not in ``max_memory_reserved``).
    cuda_workspace_bytes: cuBLAS/cuBLASLt workspaces, allocated through torch's caching allocator.
    cpu_runtime_bytes: resident memory of Python + torch + transformers + bitsandbytes before any weights
        (measured 430 MiB on Linux x86-64, torch 2.13 CPU, transformers 5.24, bitsandbytes 0.50).
    allocator_headroom: caching-allocator block rounding and fragmentation, as a fraction of tensor bytes.
    """

    cuda_context_bytes: int = 512 * MiB
    cuda_workspace_bytes: int = 64 * MiB
    cpu_runtime_bytes: int = 448 * MiB
    allocator_headroom: float = 0.05

    def to_dict(self) -> dict:
        return {"cuda_context_bytes": self.cuda_context_bytes, "cuda_workspace_bytes": self.cuda_workspace_bytes,
                "cpu_runtime_bytes": self.cpu_runtime_bytes, "allocator_headroom": self.allocator_headroom}


DEFAULT_OVERHEADS = Overheads()


@dataclass(frozen=True)
class WeightBytes:
    quantized: int  # the linear layers bitsandbytes converts (at 16/32 bits when unquantized)
    kept: int  # embeddings, lm_head, norms, biases: the compute dtype
    lean_copies: int = 0  # fused q/k/v, gate/up copies of a small model on the lean path

    @property
    def total(self) -> int:
        return self.quantized + self.kept + self.lean_copies


def weight_bytes(a: ModelAnalysis, spec: QuantSpec, dtype: str, *, lean: bool = False,
                 cpu_packed: bool = False) -> WeightBytes:
    """Weights of ``a`` loaded with ``spec`` in ``dtype`` (bytes, after bitsandbytes, as held in memory).

    lean: include the copies the lean decoder makes while generating (``a`` alone, as loaded, has none).
    cpu_packed: 4-bit layers in bitsandbytes' packed CPU layout (``bnb_cpu.cpu_packs_4bit()`` on a CPU).
    """
    b = dtype_bytes(dtype)
    if a.prequantized:
        if a.stored_bytes is None:
            raise ValueError("a pre-quantized checkpoint is planned from its weights files")
        return WeightBytes(a.stored_bytes, 0)
    quantized = sum(linear_weight_bytes(lin.numel, lin.out_features, spec, b, lin.in_features, cpu_packed)
                    for lin in a.linears)
    copies = 0
    fuses = a.uses_lean_path and a.lean_layer_params * b <= LEAN_FUSE_LIMIT_BYTES
    if lean and spec.method == "none" and fuses:
        copies = a.lean_fused_params * b  # LeanDecoder: torch.cat of q/k/v and gate/up weights (new tensors)
    if spec.method == "q4" and a.uses_lean_path:
        copies = BF16 * 2 * (a.lean_fused_params // Q4_GROUP)  # int4.quantize_model: the joined layers' own scales
    if spec.method == "q8" and a.uses_lean_path and q8_joins():
        copies = BF16 * (a.lean_fused_params // Q4_GROUP)  # the same: a step per 32 weights
    kept = a.kept_params * b
    if spec.method in OWN and a.own_head is not None:  # a distilled draft of a q4 target: its head in 8 bits
        rows, hidden = a.own_head
        if q4_fits(rows, hidden):
            kept -= rows * hidden * b
            if shares_head(rows, hidden, a.target_head_rows):  # a view of the target's head: its column map only
                quantized += MAP_BYTES * a.target_head_rows
            else:
                quantized += q8_weight_bytes(rows, hidden)
    if spec.method in OWN and a.head is not None and q4_fits(*a.head):  # a model's own head: 8-bit codes
        rows, hidden = a.head
        quantized += q8_weight_bytes(rows, hidden)
        if not a.tied_embeddings:
            kept -= rows * hidden * b  # replaced; a tied head is untied, the embeddings stay beside it
    return WeightBytes(quantized, kept, copies)


def q8_joins() -> bool:
    """Whether q8 layers are joined (int4.fuse): on specdesk's own kernels only (torch's int4 kernel takes them as two
    4-bit halves, kept apart)."""
    from specdesk.core import kernels

    return kernels.available()


def kv_cache_bytes(a: ModelAnalysis, positions: int, dtype: str) -> int:
    """Keys + values for a sequence of ``positions`` tokens (batch 1), in ``dtype``."""
    per_position = 2 * a.kv.kv_heads * a.kv.head_dim * dtype_bytes(dtype)  # K and V
    hidden = a.hidden_rows * a.hidden_size * dtype_bytes(dtype) * max(0, positions)  # an EAGLE head's feature rows
    return per_position * a.kv.positions_kept(max(0, positions)) + hidden


def capacity(context: int, k: int, leaves: int = 0) -> int:
    """Positions the engine preallocates for a generation of ``context`` tokens in total (``leaves``: a draft
    tree's extra positions per verify pass, core/tree.py)."""
    return context + k + leaves + CAPACITY_EXTRA


def lean_table_bytes(a: ModelAnalysis, positions: int, dtype: str) -> int:
    """LeanDecoder's rotary cos/sin tables: (positions, head_dim) each."""
    return 2 * positions * a.kv.head_dim * dtype_bytes(dtype)


def logits_bytes(a: ModelAnalysis, k: int, dtype: str, *, as_draft: bool = False, leaves: int = 0) -> int:
    """Per decode step: the target's (k+1+leaves, vocab) logits + float32 sampling copies; a draft's k float32
    rows."""
    v = a.vocab_size
    if as_draft:
        return k * v * FP32 + v * dtype_bytes(dtype) + SAMPLING_COPIES * v * FP32
    rows = k + 1 + leaves
    return rows * v * dtype_bytes(dtype) + SAMPLING_COPIES * rows * v * FP32


def prefill_activation_bytes(a: ModelAnalysis, spec: QuantSpec, dtype: str, context: int,
                             cpu_packed: bool = False) -> int:
    """Peak of one prefill chunk's live tensors (the KV cache itself is counted separately).

    cpu_packed: 4-bit layers in bitsandbytes' packed CPU layout, whose fused kernel takes any number of rows
    without dequantizing the weight (it works on a bfloat16 copy of the input).
    """
    b = dtype_bytes(dtype)
    c = max(1, min(PREFILL_CHUNK, context))
    h, i = a.hidden_size, a.intermediate_size
    hq, hk, hd = a.num_heads, a.kv.kv_heads, a.kv.head_dim
    residual = 2 * c * h * b  # the residual stream and its normed copy
    qkv = c * (hq + 2 * hk) * hd * b
    rotated = c * (hq + hk) * hd * b
    attn_out = c * hq * hd * b
    mask = c * context  # boolean (chunk, positions so far) causal mask
    window = 0
    if a.kv.sliding:  # DynamicSlidingWindowLayer concatenates the window and the chunk
        cap = max(x for x in a.kv.layers if x is not None)
        window = 2 * hk * hd * (min(cap, context) + c) * b
    attention = qkv + rotated + attn_out + mask + window
    mlp = 3 * c * i * b  # gate, up, act(gate) * up
    dequant = 0
    big = a.max_linear
    if big is not None and spec.is_4bit and cpu_packed and packable(big.out_features, big.in_features):
        dequant = c * (big.in_features + big.out_features) * BF16  # bfloat16 input and output of the fused kernel
    elif big is not None and spec.is_4bit:
        dequant = big.numel * b  # a multi-token 4-bit matmul dequantizes the whole weight first
    elif big is not None and spec.method == "int8":
        dequant = c * big.in_features + c * big.out_features * 4  # int8 activations + int32 accumulators
    head = a.vocab_size * b  # logits_to_keep=1
    return residual + max(attention, mlp) + dequant + head
