"""What a loaded model's weights really take: the ground truth the planner's estimate is checked against.

``model.get_memory_footprint()`` counts parameters and buffers only, so it misses bitsandbytes'
quantization state, which lives in attributes: ``Int8Params.SCB`` (a float32 scale per output row)
and ``Params4bit.quant_state`` (absmax, code book, and for double quantization the nested state and
offset). After the first forward, ``Linear8bitLt`` moves ``CB``/``SCB`` from the weight to its
``state`` (``init_8bit_state``), so module states are walked too. Each storage is counted once (tied
weights, and CB which is the int8 weight itself).
"""

from __future__ import annotations


def _tensor_bytes(t, seen: set) -> int:
    if t is None or not hasattr(t, "untyped_storage"):
        return 0
    try:
        key = (t.device.type, t.untyped_storage().data_ptr(), t.data_ptr(), t.numel())
    except (RuntimeError, NotImplementedError):  # meta tensors and the like
        key = id(t)
    if key in seen:
        return 0
    seen.add(key)
    return t.numel() * t.element_size()


def _quant_state_bytes(state, seen: set) -> int:
    if state is None:
        return 0
    total = 0
    for name in ("absmax", "code", "offset"):
        total += _tensor_bytes(getattr(state, name, None), seen)
    return total + _quant_state_bytes(getattr(state, "state2", None), seen)


def measure_weight_bytes(model) -> int:
    """Bytes of every parameter of ``model`` plus bitsandbytes' quantization state (buffers excluded)."""
    seen: set = set()
    total = 0
    for p in model.parameters():
        total += _tensor_bytes(p, seen)
        total += _tensor_bytes(getattr(p, "SCB", None), seen)
        total += _quant_state_bytes(getattr(p, "quant_state", None), seen)
    for module in model.modules():
        state = getattr(module, "state", None)  # bitsandbytes' MatmulLtState once int8 layers have run
        for name in ("CB", "SCB"):
            total += _tensor_bytes(getattr(state, name, None), seen)
        if getattr(module, "borrowed", False):  # a draft's head sharing its target's rows: the map it added there
            total += module.map_bytes
        elif type(module).__name__ in ("Int4Linear", "Q8Linear", "NativeQ4Linear", "NativeQ8Linear"):  # q4 (core/int4.py): codes and scales are buffers
            total += _tensor_bytes(module.packed, seen) + _tensor_bytes(module.scales_zeros, seen)
    return total
