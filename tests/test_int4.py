"""The q4 quantization (core/int4.py): 4-bit codes in groups of 32 through torch's CPU int4 kernel (where
specdesk's own kernel builds, q4 models take that one: tests/test_own_kernels.py; here torch's is asked for).

Checked: weights already on a Q4_1 grid get their codes back; each row of a product is the same whether it comes
alone or with others (what makes a verify pass equal one-position steps in bfloat16); joined q/k/v codes give the
separate layers' outputs bit for bit; greedy speculative output equals plain decoding of the same q4 target; the
planner's weight bytes equal a real load; the settings q4 cannot take are refused in one line."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import specdesk
from specdesk.core import int4, kernels
from specdesk.core.errors import BadSetting
from specdesk.core.loading import load_model
from specdesk.core.plan import QuantSpec, analyze, measure_weight_bytes, weight_bytes
from tests.conftest import PROMPTS, make_llama

pytestmark = pytest.mark.skipif(not int4.available(), reason="this torch has no CPU int4 kernel")


@pytest.fixture(autouse=True)
def torchs_kernel(monkeypatch, request):
    """q4 models load onto torch's kernel here, even where specdesk's own builds (tests/test_own_kernels.py); the
    tests taking ``which`` run on both."""
    if "which" not in request.fixturenames:
        monkeypatch.setenv(kernels.ENV, "torch")


@pytest.fixture(params=["torch", "own"])
def which(request, monkeypatch):
    """torch's kernels (int4 products, attention one call a position) or specdesk's own (core/kernels)."""
    if request.param == "torch":
        monkeypatch.setenv(kernels.ENV, "torch")
    elif not kernels.available():
        pytest.skip(f"no own kernels here: {kernels.status()}")
    return request.param


def q4_1_grid(n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights as a Q4_1 file stores them (per 32: float16 step d and minimum m, codes 0..15 with 0 and 15 used),
    dequantized to float32 as the gguf reader does; and the codes."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (n, k // 32, 32), generator=g)
    q[..., 0], q[..., 1] = 0, 15  # the block's own minimum and maximum, as quantize_row_q4_1 leaves them
    d = (torch.rand(n, k // 32, 1, generator=g) * 0.01 + 1e-3).half().float()
    m = (-torch.rand(n, k // 32, 1, generator=g) * 0.08).half().float()
    return (d * q + m).reshape(n, k), q.reshape(n, k)


def test_codes_of_q4_1_weights_come_back_and_the_product_uses_them():
    w, codes = q4_1_grid(64, 128)
    got, step, lo = int4.quantize(w)
    assert torch.equal(got, codes.to(torch.int32))
    lin = nn.Linear(128, 64, bias=False)
    lin.weight.data.copy_(w)
    q = int4.Int4Linear.from_linear(lin)
    # the kernel multiplies by step * (q - 8) + zero with the step and zero in bfloat16 (read back rounded to bfloat16)
    s_bf = step.bfloat16().float().repeat_interleave(32, dim=1)
    z_bf = (lo + 8 * step).bfloat16().float().repeat_interleave(32, dim=1)
    expected = s_bf * (codes.float() - 8) + z_bf
    assert torch.equal(q.codes(), codes.to(torch.int32))  # read back from the kernel's own packed layout
    assert torch.equal(q.dequantized(), expected)
    assert (expected - w).abs().max() <= 0.05 * step.max()  # the file's weights, up to the rounded step and zero
    x = torch.randn(3, 128)
    ref = x.bfloat16().float() @ q.dequantized().t()
    torch.testing.assert_close(q(x).float(), ref, atol=0.05, rtol=0.02)
    assert q(x.reshape(1, 3, 128)).shape == (1, 3, 64)


@pytest.mark.parametrize("shape", [(64, 64), (96, 128), (576, 1536)])
def test_each_row_is_the_same_alone_or_among_others(shape):
    lin = nn.Linear(shape[1], shape[0], bias=True)
    q = int4.Int4Linear.from_linear(lin)
    x = torch.randn(9, shape[1]).bfloat16()
    together = q(x)
    for n in (1, 2, 5):
        assert torch.equal(q(x[:n]), together[:n])
    assert torch.equal(torch.cat([q(x[i:i + 1]) for i in range(9)]), together)


def test_joined_codes_give_the_separate_outputs():
    mods = [int4.Int4Linear.from_linear(nn.Linear(128, n, bias=False)) for n in (128, 64, 64)]
    joined = int4.fuse(mods)
    x = torch.randn(4, 128).bfloat16()
    assert torch.equal(joined(x), torch.cat([m(x) for m in mods], dim=-1))
    assert int4.fuse([int4.Int4Linear.from_linear(nn.Linear(128, 48, bias=False))] * 2) is None  # not whole blocks of 64


def q8_0_grid(n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Weights as a Q8_0 file stores them (per 32: a float16 d, codes -127..127 with +-127 used), dequantized to
    float32 as the gguf reader does; the codes; d."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(-127, 128, (n, k // 32, 32), generator=g)
    q[..., 0] = torch.where(torch.rand(n, k // 32, generator=g) < 0.5, 127, -127)  # the block's largest magnitude
    d = (torch.rand(n, k // 32, 1, generator=g) * 0.002 + 1e-4).half().float()
    return (d * q).reshape(n, k), q.reshape(n, k), d.reshape(n, k // 32)


def test_a_q8_0_head_keeps_the_files_codes_and_each_row_is_the_same_alone():
    w, codes, d = q8_0_grid(192, 128)
    lin = nn.Linear(128, 192, bias=False)
    lin.weight.data.copy_(w)
    q = int4.Q8Linear.from_linear(lin)
    # the codes come back exactly (split into two 4-bit halves); only d is rounded to bfloat16
    expected = d.bfloat16().float().repeat_interleave(32, dim=1) * codes
    assert torch.equal(q.dequantized(), expected)
    assert (expected - w).abs().max() <= 2 ** -8 * w.abs().max()
    x = torch.randn(9, 128)
    together = q(x)
    assert together.dtype == torch.bfloat16 and together.shape == (9, 192)
    ref = x.bfloat16().float() @ expected.t()
    torch.testing.assert_close(together.float(), ref, atol=0.02, rtol=0.01)
    assert torch.equal(torch.cat([q(x[i:i + 1]) for i in range(9)]), together)  # row-invariant: verify = steps
    # bytes: two 4-bit codes per weight and two (step, zero) pairs per 32, against bfloat16's 2 per weight
    assert int4.stored(nn.Sequential(q)) == (192 * 128, 192 * 128 + 2 * 2 * 2 * 192 * 128 // 32)


def test_a_row_plan_splits_only_where_the_calls_add_up_to_less():
    # the Q8 head's costs on 2 AMX cores (ms): a jump at 5 rows, where the kernel takes another path
    cost = {1: 1.5, 2: 1.6, 3: 2.3, 4: 2.4, 5: 5.6, 6: 5.8, 7: 6.0, 8: 6.1}
    plan = int4.row_plan(cost)
    assert sorted(plan[5]) == [1, 4] and sorted(plan[6]) == [2, 4] and sorted(plan[8]) == [4, 4]
    assert sorted(plan[7]) == [3, 4]  # 4.7 ms against 6.0
    assert all(n not in plan for n in (1, 2, 3, 4))
    assert int4.row_plan({n: 1.0 for n in range(1, 9)}) == {}  # flat: one call always wins
    assert 5 not in int4.row_plan({**cost, 5: 0.95 * (1.5 + 2.4)})  # a gain under 10% is not taken


def test_a_split_head_gives_one_calls_output_bit_for_bit():
    w, _, _ = q8_0_grid(192, 128)
    lin = nn.Linear(128, 192, bias=False)
    lin.weight.data.copy_(w)
    q = int4.Q8Linear.from_linear(lin)
    q._row_plan = {5: (4, 1), 3: (1, 1, 1)}
    split, whole = q.split_call(), q.kernel_call()
    for n in (1, 3, 5, 6):
        x = torch.randn(n, 128).bfloat16()
        assert torch.equal(split(x), whole(x))
    measured = int4.Q8Linear.from_linear(lin)
    measured.split_call()
    assert set(measured._row_plan) <= set(range(2, int4.SPLIT_ROWS + 1))  # measured once, kept on the module


@pytest.fixture(scope="module")
def q4_pair(models_dir):
    # kv heads = heads so q/k/v all have 64 outputs and join up; intermediate 128 joins gate/up
    target = make_llama(models_dir / "q4-target", hidden=64, layers=2, heads=4, kv_heads=4, intermediate=128, seed=5)
    draft = make_llama(models_dir / "q4-draft", hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64, seed=6)
    return target, draft


def test_a_q4_model_runs_on_the_lean_path_with_joined_layers(q4_pair):
    loaded = load_model(str(q4_pair[0]), quant="q4", device="cpu")
    assert loaded.quant == "q4" and loaded.dtype == "bfloat16"
    layer = loaded.model.model.layers[0]
    assert isinstance(layer.self_attn.q_proj, int4.Int4Linear) and isinstance(layer.mlp.down_proj, int4.Int4Linear)
    assert int4.fused(layer.self_attn) is not None and int4.fused(layer.mlp) is not None
    assert layer.self_attn.k_proj.packed.data_ptr() != layer.self_attn.q_proj.packed.data_ptr()  # views, each its rows
    assert loaded.model.get_input_embeddings().weight.dtype == torch.bfloat16  # embeddings stay bfloat16
    assert isinstance(loaded.model.lm_head, int4.Q8Linear)  # the head gets 8-bit codes, untied from them
    engine = specdesk.load(str(q4_pair[0]), str(q4_pair[1]), device="cpu", target_quant="q4")
    assert engine.describe()["lean_target"] is True


def assert_greedy_parity(engine) -> None:
    """Every greedy speculative method's output equals plain decoding's, on every prompt."""
    checked = 0
    for p in PROMPTS:
        plain = engine.generate(p, drafter="none", max_new_tokens=40).token_ids
        for kw in (dict(k=1), dict(k=4), dict(k="auto"), dict(k=3, tree=(4, 2)), dict(drafter="ngram", k=4)):
            got = engine.generate(p, max_new_tokens=40, **kw)
            assert got.token_ids == plain, (p, kw)
            checked += got.stats.drafted > 0
    assert checked >= 10  # the drafts really were verified in multi-row passes


def test_greedy_output_equals_plain_decoding_of_the_q4_target(q4_pair):
    assert_greedy_parity(specdesk.load(str(q4_pair[0]), str(q4_pair[1]), device="cpu", target_quant="q4"))


def test_the_planner_counts_q4_weights_exactly(q4_pair):
    loaded = load_model(str(q4_pair[0]), quant="q4", device="cpu")
    predicted = weight_bytes(analyze(str(q4_pair[0])), QuantSpec("q4"), "bfloat16")
    assert predicted.quantized + predicted.kept == measure_weight_bytes(loaded.model)
    from specdesk.core.plan.planner import plan

    p = plan(str(q4_pair[0]), str(q4_pair[1]), target_quant="q4", device="cpu", context=256, recommend=False, budget_bytes=2**30)
    assert p.target.dtype == "bfloat16"


def test_a_q8_model_keeps_8_bit_codes_joins_its_layers_and_decodes_as_its_plain_self(q4_pair, which):
    """--target-quant q8: every decoder layer in GGUF Q8_0's layout (8-bit codes, a bfloat16 step per 32 weights,
    about a float model's precision), q/k/v and gate/up joined (the same outputs as the layers apart), the lean path
    on bfloat16; greedy speculative output equals its plain decoding; the planner counts its bytes exactly."""
    said: list[str] = []
    loaded = load_model(str(q4_pair[0]), quant="q8", device="cpu", progress=said.append)
    assert loaded.quant == "q8" and loaded.dtype == "bfloat16"
    steps = [m for m in said if m.startswith("quantizing q4-target to 8 bits (q8): ")]  # a long step shows progress
    assert len(steps) >= 2 and steps[-1].endswith(": 100%")
    layer = loaded.model.model.layers[0]
    kind = int4.NativeQ8Linear if which == "own" else int4.Q8Linear
    assert all(type(m) is kind for m in (layer.self_attn.q_proj, layer.self_attn.o_proj, layer.mlp.down_proj))
    assert type(loaded.model.lm_head) is kind
    # within half a step (a group's largest magnitude / 127) of the float weights, plus the step's bfloat16
    # rounding (relative 2**-8 at most) times a code of at most 127
    from safetensors.torch import load_file

    w = load_file(str(q4_pair[0] / "model.safetensors"))["model.layers.0.mlp.down_proj.weight"]
    step = w.reshape(w.shape[0], -1, 32).abs().amax(-1, keepdim=True) / 127
    err = (layer.mlp.down_proj.dequantized() - w).reshape(step.shape[0], -1, 32).abs()
    assert (err <= (0.5 + 127 * 2 ** -8) * step * (1 + 2 ** -20)).all() and err.max() > 0.25 * step.min()
    x = torch.randn(5, 64).bfloat16()
    if which == "own":  # joined like q4's (torch's kernel takes a q8 layer as two 4-bit halves: not joined)
        joined = int4.fused(layer.self_attn)
        assert type(joined) is kind and int4.fused(layer.mlp) is not None
        apart = torch.cat([m(x) for m in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj)], 1)
        assert torch.equal(joined(x), apart)
        assert layer.self_attn.k_proj.packed.data_ptr() == joined.packed.data_ptr() + 64 // 16 * joined.packed[0].numel()
    engine = specdesk.load(str(q4_pair[0]), str(q4_pair[1]), device="cpu", target_quant="q8")
    assert engine.describe()["lean_target"] is True
    assert_greedy_parity(engine)
    predicted = weight_bytes(analyze(str(q4_pair[0])), QuantSpec("q8"), "bfloat16", lean=True)
    assert predicted.quantized + predicted.kept == measure_weight_bytes(loaded.model)
    joined = [int4.fused(m) for layer in loaded.model.model.layers for m in (layer.self_attn, layer.mlp)]
    assert predicted.lean_copies == sum(j.scales_zeros.numel() * 2 for j in joined if j is not None)  # their steps
    from specdesk.core.plan.planner import plan

    p = plan(str(q4_pair[0]), None, drafter="none", target_quant="q8", device="cpu", context=256, recommend=False,
             budget_bytes=2**30)
    assert p.target.dtype == "bfloat16" and p.target.quant == "q8"
    assert p.target.weight_bytes < plan(str(q4_pair[0]), None, drafter="none", target_quant="none", device="cpu",
                                        context=256, recommend=False, budget_bytes=2**30).target.weight_bytes


@pytest.mark.parametrize("half", ["bfloat16", "float16"])
def test_a_16_bit_folder_is_quantized_from_its_own_dtype_to_the_same_model(q4_pair, tmp_path, half):
    """q4 / q8 of a bfloat16 or float16 folder load it in that dtype (half float32's memory while quantizing) and hold
    what quantizing the same values loaded as float32 gives: every tensor, buffers included, bit for bit."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    from specdesk.core import loading

    src = q4_pair[0]
    weights = {k: v.to(getattr(torch, half)) for k, v in load_file(str(src / "model.safetensors")).items()}
    folders = {}
    for name, dtype in ((half, getattr(torch, half)), ("float32", torch.float32)):
        folder = tmp_path / name
        shutil.copytree(src, folder)
        save_file({k: v.to(dtype) for k, v in weights.items()}, str(folder / "model.safetensors"))
        cfg = json.loads((folder / "config.json").read_text())
        cfg.pop("torch_dtype", None)
        (folder / "config.json").write_text(json.dumps({**cfg, "dtype": name}))
        folders[name] = folder
    assert loading._stored_16_bit(folders[half]) is getattr(torch, half)
    assert loading._stored_16_bit(folders["float32"]) is None
    for quant in ("q4", "q8"):
        a, b = (load_model(str(folders[n]), quant, device="cpu").model for n in (half, "float32"))
        ta = dict(a.state_dict(keep_vars=True), **dict(a.named_buffers()))
        tb = dict(b.state_dict(keep_vars=True), **dict(b.named_buffers()))
        assert ta.keys() == tb.keys()
        assert all(ta[k].dtype == tb[k].dtype and torch.equal(ta[k], tb[k]) for k in ta), quant


def test_a_float_targets_kernel_line_names_q8():
    """The status bar's and the session log's line for a float32 model on the CPU says what would be faster."""
    line = specdesk.load("demo-target", None, drafter="none", device="cpu").describe()["cpu_kernels"]
    assert line.startswith("torch's kernels (float32: specdesk's own serve q4, q8 and bfloat16 models")
    assert "quantization q8 decodes a float model several times faster" in line


def test_q8_is_refused_on_a_gpu_and_with_a_float_dtype(q4_pair):
    from specdesk.core.plan.planner import plan

    with pytest.raises(BadSetting, match="q8 runs on the CPU only: on a GPU use int8"):
        plan(str(q4_pair[0]), None, drafter="none", target_quant="q8", device="cuda", context=256, recommend=False,
             budget_bytes=2**30)
    with pytest.raises(BadSetting, match="q8 computes in bfloat16"):
        load_model(str(q4_pair[0]), quant="q8", device="cpu", dtype="float32")


@pytest.mark.parametrize("kwargs, words", [(dict(dtype="float32"), "bfloat16"), (dict(dtype="float16"), "bfloat16")])
def test_settings_q4_cannot_take_are_refused(q4_pair, kwargs, words):
    with pytest.raises(BadSetting) as err:
        load_model(str(q4_pair[0]), quant="q4", device="cpu", **kwargs)
    assert "q4" in str(err.value) and words in str(err.value) and "\n" not in str(err.value)


def test_the_planner_refuses_q4_on_a_gpu(q4_pair):
    from specdesk.core.plan.planner import plan

    with pytest.raises(BadSetting, match="CPU only"):
        plan(str(q4_pair[0]), None, drafter="none", target_quant="q4", device="cuda", context=256, recommend=False, budget_bytes=2**30)


@pytest.mark.parametrize("hidden", [64, 128])  # head_dim 16, and 32 (own kernel: AVX512-BF16 scores where there)
def test_a_verify_pass_gives_one_position_steps_hidden_states_bit_for_bit(models_dir, which, hidden):
    """Everything before the output head: the int4 layers, the attention (position by position in a pass that
    returns every position, LeanDecoder._rows), the norms and the rotary embedding give the same final hidden state
    to a position whether it comes alone or among k others, 70 included. (The head is row-invariant like the layers;
    it is checked through greedy parity above.) With one bfloat16 attention call over all k positions, 2 of these 13
    cases differed on the 2-core EPYC."""
    from specdesk.core.fastdraft import LeanDecoder

    path = make_llama(models_dir / f"q4-gqa-{hidden}", hidden=hidden, layers=2, heads=4, kv_heads=2, intermediate=128,
                      seed=5)
    model = load_model(str(path), quant="q4", device="cpu").model
    ids = torch.randint(3, 4000, (600,), generator=torch.Generator().manual_seed(3))
    dec = LeanDecoder(model, 700, keep_hidden=True)
    assert dec.attn64 and (dec._attend is not None) == (which == "own")
    with torch.inference_mode():
        for p0, n in [(p0, 2 + p0 % 7) for p0 in range(20, 500, 37)] + [(300, 70)]:
            dec.crop(0)
            dec.forward(ids[:p0])
            dec.forward(ids[p0:p0 + n], every=True)
            together = dec.hidden[p0:p0 + n].clone()
            dec.crop(p0)
            for i in range(n):
                dec.forward(ids[p0 + i:p0 + i + 1])
            assert torch.equal(dec.hidden[p0:p0 + n], together), (p0, n)


@pytest.mark.parametrize("hidden", [64, 128])
def test_each_tree_node_gets_the_hidden_state_of_its_path_run_one_position_at_a_time(models_dir, which, hidden):
    """A token tree (chain and leaves) in one q4 pass: every node's final hidden state equals, bit for bit, what
    one-position steps along its own path give (a leaf attends to the cache, its ancestors and itself, gathered)."""
    from specdesk.core.fastdraft import LeanDecoder
    from specdesk.core.tree import layout

    path = make_llama(models_dir / f"q4-gqa-tree-{hidden}", hidden=hidden, layers=2, heads=4, kv_heads=2,
                      intermediate=128, seed=6)
    model = load_model(str(path), quant="q4", device="cpu").model
    ids = torch.randint(3, 4000, (300,), generator=torch.Generator().manual_seed(4)).tolist()
    dec = LeanDecoder(model, 400, keep_hidden=True)
    assert (dec._attend is not None) == (which == "own")
    chain, leaves = torch.tensor([101, 102, 103]), (torch.tensor([201, 202]), torch.tensor([301]))
    paths = [[], [101], [101, 102], [101, 102, 103], [201], [202], [101, 301]]  # each row's tokens after ids
    with torch.inference_mode():
        for p0 in range(30, 290, 20):
            dec.crop(0)
            dec.forward(torch.tensor(ids[:p0 - 1]))
            tree = layout(torch.tensor(ids[p0 - 1:p0]), chain, leaves)
            dec.forward_tree(tree.tokens, tree.depths, tree.allowed)
            together = dec.hidden[p0 - 1:p0 - 1 + len(paths)].clone()
            for row, extra in enumerate(paths):
                dec.crop(p0 - 1)
                for tok in [ids[p0 - 1]] + extra:
                    dec.forward(torch.tensor([tok]))
                assert torch.equal(dec.hidden[dec.length - 1], together[row]), (p0, row)
