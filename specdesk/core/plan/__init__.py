"""VRAM fit planning: will a target + draft pair fit, why, and what is the best configuration that does.

Public API (no Qt, no NVML; the budget comes from ``specdesk.hw.memory.memory_budget`` or the user):

- :func:`plan` -> :class:`Plan` (frozen; ``to_dict()`` for JSON; ``rows()`` for a breakdown table)
- :func:`analyze` -> :class:`ModelAnalysis`: a model folder described from its headers or config.json
- :class:`QuantSpec`, :func:`weight_bytes`, :func:`kv_cache_bytes`: the formulas, for checks and tools
- :func:`record_measurement`, :func:`lookup_measurement`: measured peaks shown beside the estimate
- :func:`measure_weight_bytes`: bytes a loaded model's weights really take (bitsandbytes states included)
"""

from specdesk.core.plan.history import Measurement, load_measurements, lookup_measurement, record_measurement
from specdesk.core.plan.measure import measure_weight_bytes
from specdesk.core.plan.memory import (DEFAULT_OVERHEADS, Overheads, WeightBytes, capacity, kv_cache_bytes,
                                       logits_bytes, prefill_activation_bytes, weight_bytes)
from specdesk.core.plan.params import KVLayout, LinearInfo, ModelAnalysis, analyze, clear_cache
from specdesk.core.plan.planner import ModelPlan, Plan, Recommendation, Row, plan
from specdesk.core.plan.quant import QuantSpec, linear_weight_bytes

__all__ = [
    "DEFAULT_OVERHEADS", "KVLayout", "LinearInfo", "Measurement", "ModelAnalysis", "ModelPlan", "Overheads", "Plan",
    "QuantSpec", "Recommendation", "Row", "WeightBytes", "analyze", "capacity", "clear_cache", "kv_cache_bytes",
    "linear_weight_bytes", "load_measurements", "logits_bytes", "lookup_measurement", "measure_weight_bytes", "plan",
    "prefill_activation_bytes", "record_measurement", "weight_bytes",
]
