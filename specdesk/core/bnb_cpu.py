"""bitsandbytes' 4-bit layers on the CPU: the packed layout some CPUs get, and the shapes it refuses.

Source: bitsandbytes 0.49-0.50, ``nn/modules.py`` (``Linear4bit.forward``) and ``functional.py``
(``_convert_weight_packed_for_cpu``, ``has_avx512bf16``), from the CPU fused kernel (bitsandbytes PR #1804).
On a CPU with AVX-512 BF16, a ``Linear4bit`` repacks its weight at its first inference forward: the 4-bit
values are re-ordered in blocks of 32 output rows (same bytes), absmax becomes a transposed bfloat16 table
(2 bytes per block of 64 weights instead of 4), double quantization is undone (the nested state is dropped;
its float32 offset stays), and the layer then computes in bfloat16 with a fused kernel. The conversion asserts
``out_features % 32 == 0`` and reshapes absmax per row, so it also needs ``in_features % blocksize == 0``;
other shapes crash inside bitsandbytes ("N must be divisible by block_n", "shape '[64, 2]' is invalid").

The packed kernel computes in bfloat16 whatever the model's dtype: a float32 model quantized to nf4 would run
its 4-bit products in bfloat16 on these CPUs only, and bfloat16 products over k + 1 positions round differently
from one-position products often enough to part greedy speculative output from the target's own decoding at a
near tie (seen: an nf4 + double-quantization target, 1 prompt in 3). So specdesk honours the compute dtype:
float32 (the CPU default) and float16 models keep every 4-bit layer on the unpacked path (dequantize, then a
product in the model's dtype), through the flag the layer reads (``support_avx512bf16_for_cpu``); bfloat16
models get the packed layout, packed right after loading (so the memory a user sees, the planner's figures and
the first reply's timing all have the layout the layer runs with), except layers whose shape the kernel refuses.
On CPUs without AVX-512 BF16 nothing changes.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

PACK_BLOCK_N = 32  # _convert_weight_packed_for_cpu's block_n: output rows per packed block
BLOCKSIZE_4BIT = 64  # quantize_4bit's default blocksize, the one transformers uses


@functools.cache
def cpu_packs_4bit() -> bool:
    """Whether this bitsandbytes, on this CPU, repacks 4-bit weights for its CPU kernel."""
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)  # its hub-kernel notice at import is noise here
    try:
        import bitsandbytes.functional as bnbf
    except Exception as e:  # not installed or no native library: no 4-bit on the CPU at all
        log.info("bitsandbytes unavailable: %s", e)
        return False
    if not hasattr(bnbf, "_convert_weight_packed_for_cpu"):
        return False  # bitsandbytes < 0.49: one layout everywhere
    return bool(bnbf.has_avx512bf16())


def packable(out_features: int, in_features: int, blocksize: int = BLOCKSIZE_4BIT) -> bool:
    """Whether the packed CPU kernel accepts a weight of this shape (see the module docstring)."""
    return out_features % PACK_BLOCK_N == 0 and in_features % blocksize == 0 and in_features % 2 == 0


@dataclass(frozen=True)
class Prepared:
    packed: int  # layers now in the packed layout
    unpacked: int  # layers kept on the unpacked path (not bfloat16, or shapes the packed kernel refuses)


def packs_for_dtype(dtype: str) -> bool:
    """Whether 4-bit layers of a CPU model in ``dtype`` ("float32", "bfloat16", ...) get the packed layout."""
    return dtype == "bfloat16" and cpu_packs_4bit()


def prepare_4bit_layers(model) -> Prepared:
    """On a CPU that packs: pack the 4-bit layers of a bfloat16 model that the packed kernel takes; keep the
    others (and every layer of a float32 or float16 model) unpacked.

    Packing goes through the layer's own forward (one zero row), the way bitsandbytes does it on first use.
    """
    import torch

    if not cpu_packs_4bit():
        return Prepared(0, 0)
    packed = unpacked = 0
    for module in model.modules():
        if type(module).__name__ not in ("Linear4bit", "LinearNF4", "LinearFP4") or not hasattr(
                module, "support_avx512bf16_for_cpu"):
            continue
        weight = module.weight
        state = getattr(weight, "quant_state", None)
        if weight.device.type != "cpu" or state is None:
            continue
        if getattr(state, "packing_format_for_cpu", False):
            packed += 1
            continue
        out_features, in_features = (int(x) for x in state.shape)
        if state.dtype != torch.bfloat16 or not packable(out_features, in_features, int(state.blocksize)):
            module.support_avx512bf16_for_cpu = False
            unpacked += 1
            continue
        with torch.inference_mode():
            module(torch.zeros(1, in_features, dtype=state.dtype))
        packed += 1
    if unpacked:
        log.info("%d 4-bit layers kept unpacked (model dtype, or shapes the packed CPU kernel refuses)", unpacked)
    return Prepared(packed, unpacked)
