"""bitsandbytes' 4-bit layers get the layout this CPU gives them, and never crash on shapes the packed kernel refuses.

Whether bitsandbytes packs depends on the CPU (AVX-512 BF16) and on its version; these tests read the CPU's
flags themselves and assert what must happen on the CPU they run on (see specdesk/core/bnb_cpu.py).
"""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
import torch

import specdesk
from specdesk.core.bnb_cpu import cpu_packs_4bit, packable
from specdesk.core.loading import load_model
from tests.conftest import PROMPTS, make_llama


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def four_bit_layers(model) -> list:
    return [m for m in model.modules() if type(m).__name__ == "Linear4bit"]


@pytest.mark.skipif(platform.system() != "Linux" or not cpu_flags(), reason="reads /proc/cpuinfo")
def test_packing_follows_the_cpu_flags():
    import bitsandbytes.functional as bnbf

    has_packing = hasattr(bnbf, "_convert_weight_packed_for_cpu")
    assert cpu_packs_4bit() == (has_packing and "avx512_bf16" in cpu_flags())


@pytest.fixture(scope="module")
def odd_qwen2(tmp_path_factory) -> Path:
    # intermediate 80: gate/up have 80 output rows (not a multiple of 32) and down_proj 80 inputs (not of 64)
    return make_llama(tmp_path_factory.mktemp("bnb") / "qwen2-odd", arch="qwen2", hidden=64, layers=2,
                      intermediate=80, seed=4)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_each_4bit_layer_has_the_layout_this_cpu_and_dtype_give_it(odd_qwen2, dtype):
    m = load_model(str(odd_qwen2), "nf4", dtype=dtype, device="cpu")
    layers = four_bit_layers(m.model)
    assert layers
    for lin in layers:
        state = lin.weight.quant_state
        packed = bool(getattr(state, "packing_format_for_cpu", False))
        want = cpu_packs_4bit() and dtype == "bfloat16" and packable(*(int(x) for x in state.shape))
        assert packed == want, (lin, tuple(state.shape))
        if not want and cpu_packs_4bit():
            assert lin.support_avx512bf16_for_cpu is False  # kept off the packed path for good
    with torch.inference_mode():  # every layer runs, the refused shapes included, and nothing repacks later
        m.model(input_ids=torch.tensor([[1, 2, 3, 4]]))
    assert [bool(getattr(lin.weight.quant_state, "packing_format_for_cpu", False)) for lin in layers] == \
        [cpu_packs_4bit() and dtype == "bfloat16" and packable(*(int(x) for x in lin.weight.quant_state.shape))
         for lin in layers]
    if cpu_packs_4bit() and dtype == "bfloat16":
        assert any(lin.support_avx512bf16_for_cpu is False for lin in layers)  # the odd shapes
        assert any(getattr(lin.weight.quant_state, "packing_format_for_cpu", False) for lin in layers)


def test_engine_generates_on_shapes_the_packed_kernel_refuses(odd_qwen2):
    """What crashed inside bitsandbytes on AVX-512 BF16 CPUs ("shape '[64, 2]' is invalid") now generates."""
    engine = specdesk.load(str(odd_qwen2), drafter="ngram", target_quant="nf4", dtype="bfloat16", device="cpu")
    result = engine.generate(PROMPTS[2], max_new_tokens=12, k=3)
    assert len(result.token_ids) == 12 or result.stop_reason == "eos"


def test_the_planner_says_which_4bit_layout_it_assumed(odd_qwen2):
    from specdesk.core.plan import plan

    for dtype in ("float32", "bfloat16"):
        p = plan(str(odd_qwen2), drafter="none", target_quant="nf4", dtype=dtype, device="cpu",
                 budget_bytes=2**30, recommend=False, use_history=False)
        notes = " ".join(p.target.notes)
        packed = cpu_packs_4bit() and dtype == "bfloat16"
        assert ("packed CPU layout" in notes) == packed
        assert ("packed CPU layout" in p.target.rows[0].label) == packed
        if packed:
            assert "keep the unpacked layout" in notes
