"""The planner: verdicts at the budget's edge, the largest context, recommendations, measured peaks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specdesk.core.errors import BadSetting
from specdesk.core.plan import Overheads, analyze, kv_cache_bytes, lookup_measurement, plan, record_measurement
from specdesk.core.plan.quant import QuantSpec

CONFIGS = Path(__file__).resolve().parent / "data" / "configs"
GiB = 2**30


@pytest.fixture(scope="module")
def llama_pair(tmp_path_factory) -> tuple[Path, Path]:
    """Llama-3.1-8B and Llama-3.2-1B as folders holding config.json only (planning before a download)."""
    root = tmp_path_factory.mktemp("llama-pair")
    out = []
    for name in ("llama-3.1-8b", "llama-3.2-1b"):
        (root / name).mkdir()
        shutil.copy(CONFIGS / f"{name}.json", root / name / "config.json")
        out.append(root / name)
    return out[0], out[1]


@pytest.fixture(autouse=True)
def private_history(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDESK_DATA_DIR", str(tmp_path / "data"))


def test_engine_constants_match_the_planner():
    """The planner models the engine's prefill chunks, k cap, capacity rule and lean-path fusing limit."""
    from specdesk.core import fastdraft, sequence, settings
    from specdesk.core.plan import memory, planner

    assert memory.PREFILL_CHUNK == sequence.PREFILL_CHUNK
    assert planner.MAX_K == settings.MAX_K
    assert memory.LEAN_FUSE_LIMIT_BYTES == fastdraft.FUSE_LIMIT_BYTES
    import inspect

    from specdesk.core import decode
    assert "len(prompt_ids) + settings.max_new_tokens + k_cap + 2" in inspect.getsource(decode.decode)


def test_8b_with_1b_draft_on_a_24gib_gpu(llama_pair):
    t, d = llama_pair
    p = plan(str(t), str(d), device="cuda", context=8192, budget_bytes=24 * GiB, candidate_drafts=[])
    assert p.dtype == "bfloat16" and p.target.params == 8_030_261_248 and p.draft.params == 1_235_814_400
    assert p.target.weight_bytes == 8_030_261_248 * 2 and p.draft.weight_bytes == 1_235_814_400 * 2
    cap = 8192 + 4 + 2
    # GQA: 8 KV heads of 128, bf16, K and V; + the lean path's cos/sin tables (fastdraft.LeanDecoder)
    assert p.target.kv_bytes == 32 * 2 * 8 * 128 * 2 * cap + 2 * cap * 128 * 2
    assert p.draft.kv_bytes == 16 * 2 * 8 * 64 * 2 * cap + 2 * cap * 64 * 2
    assert p.fits and 0 < p.headroom_bytes < 6 * GiB
    # The total is the sum of its parts (what the GUI's stacked bar shows).
    parts = (p.target.weight_bytes + p.target.kv_bytes + p.draft.weight_bytes + p.draft.kv_bytes
             + p.transient_bytes + sum(r.bytes for r in p.overhead_rows))
    assert parts == p.total_bytes
    long = plan(str(t), str(d), device="cuda", context=131072, budget_bytes=24 * GiB, candidate_drafts=[])
    assert not long.fits and 8192 < long.max_context < 131072
    assert long.max_context == p.max_context


def test_fits_exactly_at_the_budget_edge(llama_pair):
    t, _ = llama_pair
    base = plan(str(t), drafter="ngram", device="cuda", context=4096, budget_bytes=100 * GiB, recommend=False)
    at = plan(str(t), drafter="ngram", device="cuda", context=4096, budget_bytes=base.total_bytes, recommend=False)
    below = plan(str(t), drafter="ngram", device="cuda", context=4096, budget_bytes=base.total_bytes - 1,
                 recommend=False)
    assert at.fits and at.headroom_bytes == 0
    assert not below.fits and below.headroom_bytes == -1
    assert "does not fit" in below.verdict


def test_max_context_is_the_largest_that_fits(llama_pair):
    t, d = llama_pair
    budget = 20 * GiB
    p = plan(str(t), str(d), target_quant="int8", device="cuda", context=1024, budget_bytes=budget, recommend=False)
    m = p.max_context
    assert 1024 < m < 131072
    assert plan(str(t), str(d), target_quant="int8", device="cuda", context=m, budget_bytes=budget,
                recommend=False).fits
    assert not plan(str(t), str(d), target_quant="int8", device="cuda", context=m + 1, budget_bytes=budget,
                    recommend=False).fits


def test_draft_memory_is_counted(llama_pair):
    """The complaint this planner answers: the draft's weights and KV cache are part of the total."""
    t, d = llama_pair
    with_draft = plan(str(t), str(d), device="cuda", context=8192, budget_bytes=40 * GiB, recommend=False)
    lookup = plan(str(t), drafter="ngram", device="cuda", context=8192, budget_bytes=40 * GiB, recommend=False)
    assert lookup.draft is None
    extra = with_draft.draft.weight_bytes + with_draft.draft.kv_bytes
    grown = (with_draft.total_bytes - with_draft.transient_bytes) - (lookup.total_bytes - lookup.transient_bytes)
    headroom = Overheads().allocator_headroom
    transient_change = abs(with_draft.transient_bytes - lookup.transient_bytes)
    assert abs(grown - extra * (1 + headroom)) <= 2 + headroom * transient_change


def test_quantization_shrinks_weights_as_bitsandbytes_stores_them(llama_pair):
    t, _ = llama_pair
    sizes = {}
    for q in ("none", "int8", "nf4", "nf4+dq"):
        sizes[q] = plan(str(t), drafter="none", device="cuda", context=512, budget_bytes=80 * GiB,
                        target_quant=q, recommend=False).target
    lin = analyze(t).linear_params
    assert sizes["none"].quantized_bytes == 2 * lin
    assert sizes["int8"].quantized_bytes == lin + 4 * sum(x.out_features for x in analyze(t).linears)
    assert sizes["nf4"].quantized_bytes == pytest.approx(lin * (0.5 + 4 / 64), rel=1e-3)  # 4.5 bits per weight
    assert sizes["nf4+dq"].quantized_bytes == pytest.approx(lin * (0.5 + 1 / 64 + 4 / 64 / 256), rel=1e-3)
    assert len({s.kept_bytes for s in sizes.values()}) == 1  # embeddings, lm_head and norms stay bf16


def test_recommendations_rank_what_fits(llama_pair):
    t, d = llama_pair
    p = plan(str(t), str(d), device="cuda", context=32768, budget_bytes=20 * GiB, candidate_drafts=[])
    assert not p.fits  # bf16 weights (18.5 GB) + 5.4 GB of KV caches exceed 20 GiB
    recs = p.recommendations
    assert recs and all(r.total_bytes <= 20 * GiB and r.headroom_bytes >= 0 for r in recs)
    assert [r.rank for r in recs] == list(range(1, len(recs) + 1))
    best = recs[0]
    assert best.full_context and best.target_quant == "int8" and best.drafter == "model"
    assert best.reason.startswith("best that fits")
    assert all(r.reason for r in recs) and "below the one above" in recs[1].reason
    # The requested context first, then quality (none > int8 > nf4 > nf4+dq), then drafter.
    full = [r for r in recs if r.full_context]
    order = [QuantSpec.parse(r.target_quant).quality_rank for r in full]
    assert order == sorted(order)
    assert {"model", "ngram", "none"} <= {r.drafter for r in recs}
    assert best.settings == {"target_quant": "int8", "draft_quant": "none", "double_quant": False,
                             "drafter": "model", "draft": str(d), "context": 32768}


def test_recommendations_cut_the_context_when_nothing_fits_it(llama_pair):
    t, d = llama_pair
    p = plan(str(t), str(d), device="cuda", context=131072, budget_bytes=12 * GiB, candidate_drafts=[])
    assert p.recommendations and not any(r.full_context for r in p.recommendations)
    assert "context cut to" in p.recommendations[0].reason
    assert all(r.context <= 131072 and r.total_bytes <= 12 * GiB for r in p.recommendations)


def test_candidate_drafts_are_analysed_and_ranked(llama_pair, tmp_path):
    t, d = llama_pair
    other = tmp_path / "qwen2.5-0.5b"
    other.mkdir()
    shutil.copy(CONFIGS / "qwen2.5-0.5b.json", other / "config.json")
    p = plan(str(t), drafter="ngram", device="cuda", context=4096, budget_bytes=24 * GiB,
             candidate_drafts=[str(d), str(other), "/no/such/draft"])
    drafts = {r.draft for r in p.recommendations if r.drafter == "model"}
    assert str(d) in drafts  # a bad candidate is skipped, not fatal


def test_demo_pair_on_the_cpu_with_discovery():
    p = plan("demo-target", device="cpu", budget_bytes=8 * GiB)  # drafter defaults like specdesk.load
    assert p.drafter == "model" and p.draft.name == "demo-draft" and p.dtype == "float32"
    assert p.context == 2048 and p.max_context == 2048 and "maximum" in p.max_context_reason
    a = analyze("demo-target")
    lean_rotary_tables = 2 * (2048 + 4 + 2) * 64 * 4  # the target runs on fastdraft.LeanDecoder
    assert p.target.kv_bytes == kv_cache_bytes(a, 2048 + 4 + 2, "float32") + lean_rotary_tables
    assert any(r.label.startswith("lean path: fused") for r in p.target.rows)  # 42 MB target: fused copies
    assert any(r.drafter == "model" and r.draft == "demo-draft" for r in p.recommendations)
    assert [row.label for row in p.overhead_rows][0].startswith("runtime")
    json.dumps(p.to_dict())  # plain values only


def test_config_only_replan_reuses_the_analyses(llama_pair, monkeypatch):
    """Re-planning at another context builds no model again (the GUI re-plans on every setting change); how fast
    that is gets measured outside the suite, not asserted on a shared machine."""
    from specdesk.core.plan import params

    t, d = llama_pair
    plan(str(t), str(d), device="cuda", context=8192, budget_bytes=24 * GiB, candidate_drafts=[])  # warm the cache
    built = []
    real = params.meta_model
    monkeypatch.setattr(params, "meta_model", lambda path: built.append(path) or real(path))
    for ctx in (2048, 4096, 8192, 16384, 32768):
        plan(str(t), str(d), device="cuda", context=ctx, budget_bytes=24 * GiB, candidate_drafts=[])
    assert built == []


@pytest.mark.parametrize("kwargs,needle", [
    (dict(budget_bytes=0), "budget must be a positive"),
    (dict(budget_bytes=-5), "budget must be a positive"),
    (dict(budget_bytes=None), "no memory budget"),
    (dict(budget_bytes=GiB, context=0), "context must be a positive"),
    (dict(budget_bytes=GiB, context=4096), "exceeds"),
    (dict(budget_bytes=GiB, k=99), "k must be"),
    (dict(budget_bytes=GiB, target_quant="int4"), "unknown quantization"),
    (dict(budget_bytes=GiB, dtype="float8"), "unknown dtype"),
    (dict(budget_bytes=GiB, device="tpu"), "unknown device"),
    (dict(budget_bytes=GiB, drafter="ngram", draft="demo-draft"), "contradict"),
])
def test_bad_settings_are_one_line_errors(kwargs, needle):
    args = dict(device="cpu", recommend=False)
    args.update(kwargs)
    with pytest.raises(BadSetting, match=needle):
        plan("demo-target", **args)


def test_measured_peak_is_shown_beside_the_estimate():
    p0 = plan("demo-target", "demo-draft", device="cpu", context=1024, budget_bytes=8 * GiB, recommend=False)
    assert p0.measured is None
    path = analyze("demo-target").path
    record_measurement(path, "none", 1000, 500 * 2**20, "cpu", draft=analyze("demo-draft").path, dtype="float32")
    record_measurement(path, "nf4", 1024, 400 * 2**20, "cpu", draft=analyze("demo-draft").path, dtype="float32")
    p = plan("demo-target", "demo-draft", device="cpu", context=1024, budget_bytes=8 * GiB, recommend=False)
    assert p.measured is not None and p.measured.context == 1000 and p.measured.kind == "cpu_peak_rss"
    assert p.measured_bytes == 500 * 2**20  # RSS already holds everything
    assert p.measured_estimate_bytes < p.total_bytes  # re-estimated at the measured (shorter) context
    cuda = record_measurement(path, "none", 1024, 3 * GiB, "cuda:0", draft="ngram", dtype="bfloat16")
    assert cuda.kind == "cuda_max_reserved"
    found = lookup_measurement(path, "none", 1024, "cuda", draft="ngram", dtype="bfloat16")
    assert found == cuda and found.comparable_bytes(512 * 2**20) == 3 * GiB + 512 * 2**20
    assert lookup_measurement(path, "none", 1024, "cuda", draft="none", dtype="bfloat16") is None


def test_cpu_recommendations_offer_specdesks_own_quantizations(llama_pair):
    """On a CPU the choices are none, q8 and q4 (bitsandbytes' CPU int8 ran the demo target ~50x slower than float);
    a float dtype asked for, which q8 and q4 cannot keep, leaves none only; a GPU keeps bitsandbytes' choices."""
    t, d = llama_pair
    p = plan(str(t), str(d), device="cpu", context=4096, budget_bytes=48 * GiB, candidate_drafts=[])
    quants = [r.target_quant for r in p.recommendations]
    assert set(quants) == {"none", "q8", "q4"}  # an 8B float folder: 32 GB as float32 fits 48 GiB, so do q8 and q4
    assert quants.index("q8") < quants.index("q4")  # quality first
    tight = plan(str(t), str(d), device="cpu", context=4096, budget_bytes=12 * GiB, candidate_drafts=[])
    assert tight.recommendations and {r.target_quant for r in tight.recommendations} <= {"q8", "q4"}
    f32 = plan(str(t), str(d), device="cpu", dtype="float32", context=4096, budget_bytes=64 * GiB,
               candidate_drafts=[])
    assert {r.target_quant for r in f32.recommendations} == {"none"}
    gpu = plan(str(t), str(d), device="cuda", context=4096, budget_bytes=12 * GiB, candidate_drafts=[])
    assert {r.target_quant for r in gpu.recommendations} <= {"none", "int8", "nf4", "nf4+dq"}


def test_pairs_the_load_refuses_are_not_planned(tmp_path):
    """A draft whose tokenizer the load refuses, or a distilled draft as the target: the load's one line, not a plan
    that says the pair fits. Config-only folders (no tokenizer yet) are planned as before."""
    from conftest import swapped_token_copy

    from specdesk.core.errors import BadModel, IncompatibleDraft

    odd = swapped_token_copy(Path(analyze("demo-draft").path), tmp_path / "odd-draft")
    with pytest.raises(IncompatibleDraft, match="token id 500"):
        plan("demo-target", str(odd), device="cpu", budget_bytes=8 * GiB, recommend=False)
    bundled = Path(__file__).resolve().parent.parent / "resources/models/smollm2-135m-instruct-draft"
    with pytest.raises(BadModel, match="borrows its target's embeddings"):
        plan(str(bundled), drafter="none", device="cpu", budget_bytes=8 * GiB, recommend=False)
