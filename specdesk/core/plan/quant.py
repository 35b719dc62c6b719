"""Bytes a weight matrix really takes once bitsandbytes has quantized it.

Sources: bitsandbytes 0.45-0.50, ``bitsandbytes/nn/modules.py`` (``Int8Params``, ``Params4bit``) and
``bitsandbytes/functional.py`` (``quantize_4bit``, ``quantize_blockwise``, ``get_4bit_type``):

- int8 (LLM.int8, Dettmers et al. 2022): the weight is stored as int8 (1 byte per weight) plus one
  float32 scale per output row (``SCB``, from ``int8_vectorwise_quant``).
- 4-bit (nf4/fp4, QLoRA, Dettmers et al. 2023): two weights per uint8 byte, one float32 absmax per
  block of 64 weights, and the 16-entry float32 code book of the 4-bit type (one per layer).
- 4-bit with double quantization: the absmax values are themselves quantized blockwise (blocks of
  256) to uint8 with an 8-bit dynamic map: 1 byte per 64 weights, plus one float32 absmax per 256
  blocks, a float32 offset and a copy of the 256-entry float32 dynamic map per layer
  (``quantize_blockwise`` stores ``code.to(device, copy=True)`` in each state).

On CPUs with AVX-512 BF16, bitsandbytes >= 0.49 repacks 4-bit weights for its fused CPU kernel (see
``specdesk.core.bnb_cpu``, which packs at load time): same 4-bit bytes, absmax as bfloat16 (2 bytes per block
of 64), double quantization undone (its float32 offset kept), for layers whose shape the kernel takes
(``bnb_cpu.packable``); the others stay in the layout above.

Biases of quantized layers stay in the compute dtype. transformers keeps embeddings, the output
projection (lm_head) and anything tied to them unquantized (``get_keys_to_not_convert``); norms are not
linear layers, so they are never quantized either.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdesk.core.bnb_cpu import packable
from specdesk.core.errors import BadSetting
from specdesk.core.loading import OWN_QUANTS as OWN  # q4, q8: specdesk's own (bfloat16 activations, an 8-bit head)

METHODS = ("none", "int8", "nf4", "fp4", *OWN)  # q4, q8: core/int4.py, CPU only
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
BLOCKSIZE_4BIT = 64  # quantize_4bit's default blocksize, the one transformers uses
DQ_BLOCKSIZE = 256  # quantize_blockwise(absmax, blocksize=256) for double quantization
CODE_4BIT_BYTES = 16 * 4  # get_4bit_type: 16 float32 values, a new tensor per quantized layer
DYNAMIC_MAP_BYTES = 256 * 4  # create_dynamic_map(), copied into every nested state
FP32 = 4
BF16 = 2
Q4_GROUP = 32

# Quality order for ranking: the output of an exact speculative decoder is the target's own, so the
# target's quantization is what decides the quality of the text.
QUALITY_ORDER = ("none", "q8", "int8", "q4", "nf4", "nf4+dq", "fp4", "fp4+dq")


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class QuantSpec:
    """How one model is stored: ``method`` none/int8/nf4/fp4, double quantization for 4-bit only."""

    method: str = "none"
    double_quant: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise BadSetting(f"unknown quantization {self.method!r}: use one of {', '.join(METHODS)}")
        if self.double_quant and not self.is_4bit:
            object.__setattr__(self, "double_quant", False)  # bitsandbytes ignores it too

    @classmethod
    def parse(cls, value: str | QuantSpec, double_quant: bool = False) -> QuantSpec:
        """A QuantSpec from "nf4", "nf4+dq" (or "nf4-dq"), or an existing QuantSpec."""
        if isinstance(value, QuantSpec):
            return value
        text = str(value).strip().lower()
        for suffix in ("+dq", "-dq"):
            if text.endswith(suffix):
                return cls(text[: -len(suffix)], True)
        return cls(text, double_quant)

    @property
    def is_4bit(self) -> bool:
        return self.method in ("nf4", "fp4")

    @property
    def label(self) -> str:
        return f"{self.method}+dq" if self.double_quant else self.method

    @property
    def quality_rank(self) -> int:
        return QUALITY_ORDER.index(self.label)


def linear_weight_bytes(numel: int, out_features: int, spec: QuantSpec, dtype_bytes: int,
                        in_features: int | None = None, cpu_packed: bool = False) -> int:
    """Bytes of one linear layer's weight (without bias) as stored after loading with ``spec``.

    cpu_packed: bitsandbytes' packed CPU layout applies (this CPU gets it); only layers whose shape the packed
    kernel takes are packed, so ``in_features`` is needed with it.
    """
    if spec.method == "none":
        return numel * dtype_bytes
    if spec.method == "q4":  # core/int4.py: codes (N, K/2) uint8, bfloat16 step and zero per 32 weights
        if in_features is None or not q4_fits(out_features, in_features):
            return numel * BF16  # a shape the kernel does not take stays bfloat16
        return numel // 2 + BF16 * 2 * (numel // Q4_GROUP)
    if spec.method == "q8":  # core/int4.py: 8-bit codes, a bfloat16 step per 32 weights
        if in_features is None or not q4_fits(out_features, in_features):
            return numel * BF16
        return q8_weight_bytes(out_features, in_features)
    if spec.method == "int8":
        return numel + FP32 * out_features  # int8 CB + float32 SCB per output row
    blocks = _ceil_div(numel, BLOCKSIZE_4BIT)
    packed = _ceil_div(numel, 2)  # Params4bit: uint8 tensor of shape ((n + 1) // 2, 1)
    if cpu_packed and in_features is not None and packable(out_features, in_features):
        # (N, K/2) uint8, bfloat16 absmax (K/64, N), the code book; double quantization undone, offset kept
        return packed + BF16 * blocks + CODE_4BIT_BYTES + (FP32 if spec.double_quant else 0)
    if spec.double_quant:
        # uint8 absmax + state2.absmax (float32 per 256 blocks) + offset + state2.code
        absmax = blocks + FP32 * _ceil_div(blocks, DQ_BLOCKSIZE) + FP32 + DYNAMIC_MAP_BYTES
    else:
        absmax = FP32 * blocks
    return packed + absmax + CODE_4BIT_BYTES


def q4_fits(out_features: int, in_features: int) -> bool:
    """The shapes the int4 kernel takes (int4.fits): inputs in whole groups, outputs a multiple of 16."""
    return in_features % Q4_GROUP == 0 and out_features % 16 == 0


MAP_BYTES = 8  # a shared head's column map: one int64 a row of the target's head (int4.share_rows)


def shares_head(rows: int, hidden: int, target_rows: int) -> bool:
    """Whether a q4 target's distilled draft with a reduced head of ``rows`` x ``hidden`` takes it as a view of the
    target's 8-bit head of ``target_rows`` rows (loading._share_head_rows): both heads on specdesk's own kernel."""
    from specdesk.core import kernels

    return target_rows > 0 and q4_fits(rows, hidden) and q4_fits(target_rows, hidden) and kernels.available()


def q8_weight_bytes(rows: int, hidden: int) -> int:
    """A q4 model's 8-bit head (and a q8 model's layers): with specdesk's own kernel (core/kernels)
    int4.NativeQ8Linear, one byte a weight and a bfloat16 step per 32; else int4.Q8Linear, a q4 layer of 2 x hidden
    inputs (each weight's high and low 4 bits)."""
    from specdesk.core import kernels

    if q4_fits(rows, hidden) and kernels.available():
        return rows * hidden + BF16 * (rows * hidden // Q4_GROUP)
    return linear_weight_bytes(2 * rows * hidden, rows, QuantSpec("q4"), BF16, 2 * hidden)


def dtype_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise BadSetting(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPE_BYTES)}") from None


def resolve_plan_dtype(dtype: str, device: str) -> str:
    """The dtype a load with ``dtype`` on ``device`` gets (loading.resolve_dtype, without touching CUDA).

    "auto" is bfloat16 on CUDA (float16 on GPUs without bf16: the same size) and float32 on the CPU.
    """
    if dtype in ("auto", "", None):
        return "bfloat16" if str(device).startswith("cuda") else "float32"
    dtype_bytes(dtype)
    return dtype
