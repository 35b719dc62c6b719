"""specdesk's own CPU kernels: q4/q8 products (core/kernels/q4gemm.c, int4.NativeQ4Linear / NativeQ8Linear) and
position-by-position attention (core/kernels/attention.c, the lean decoder's verify passes) and the row-wise steps (rows.c: RMSNorm, rotary embedding with the cache write, SwiGLU).

Checked for the products: it builds here and says which instructions it uses, and torch's kernel is taken when asked; the same
codes, steps and zeros as torch's layout hold (read back bit for bit); the product is the dequantized weights times
the rows quantized to 8 bits per group of 32, to float32 rounding; every row is bit for bit the same alone, among up
to 19 others (the kernel works in blocks of 8 rows) and on 1 or 2 threads (what keeps a verify pass equal to
one-position steps); joined layers give the separate outputs; a q4 model loads onto it and greedy speculative output
equals its plain decoding; the planner counts its head exactly. For attention: each position's output is float64
attention's to bfloat16 rounding, the same bit for bit alone, among others and on 1 or 2 threads, and a tree node
reading its ancestors from other slots gets what the same keys in order give (tests/test_int4.py checks whole
verify passes and trees against one-position steps on both kernels).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import specdesk
from specdesk.core import int4, kernels
from specdesk.core.loading import load_model
from specdesk.core.plan import QuantSpec, analyze, measure_weight_bytes, weight_bytes
from tests.conftest import PROMPTS, make_llama
from tests.test_int4 import q4_1_grid, q8_0_grid

pytestmark = pytest.mark.skipif(not kernels.available(), reason=f"no own q4 kernel here: {kernels.status()}")


@pytest.fixture(params=["native", "x86-64-v3"])
def march(request, monkeypatch):
    """The kernels built for this CPU, and for x86-64-v3 (AVX2 and FMA: the AVX2 paths, which AMD CPUs without
    AVX-512 take, checked on any CPU here)."""
    monkeypatch.setenv(kernels.MARCH_ENV, request.param)
    if not kernels.available():
        pytest.skip(kernels.status())
    return request.param


def act_quantized(x: torch.Tensor) -> torch.Tensor:
    """Rows as the kernel reads them: per group of 32, step max|x| / 127, codes rounded to nearest (float32)."""
    m, k = x.shape
    g = x.bfloat16().float().reshape(m, k // 32, 32)
    amax = g.abs().amax(-1, keepdim=True)
    inv = torch.full_like(amax, 127.0) / amax  # (127 / tensor is 127 * reciprocal: another rounding)
    q = torch.round(g * torch.where(amax > 0, inv, torch.zeros_like(amax))).clamp(-127, 127)
    return (q * amax / 127).reshape(m, k)


def assert_product(got: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> None:
    """got = act_quantized(x) @ w.T up to bfloat16 rounding of the result (2**-9 relative) and float32 sums in
    another order (a few 2**-24 of the sum of the terms' magnitudes)."""
    a = act_quantized(x)
    ref, size = a.double() @ w.double().t(), a.abs().double() @ w.abs().double().t()
    assert ((got.double() - ref).abs() <= 2 ** -8 * ref.abs() + 2 ** -18 * size).all()


def test_it_builds_here_and_torchs_kernel_is_taken_when_asked(monkeypatch):
    assert kernels.library().sd_isa().decode() in ("avx512vnni, amx", "avx512vnni", "avx2")  # amx: q4 prefills
    monkeypatch.setenv(kernels.MARCH_ENV, "x86-64-v3")
    assert kernels.library().sd_isa().decode() == "avx2"
    monkeypatch.delenv(kernels.MARCH_ENV)
    assert "kernels (" in kernels.status()
    monkeypatch.setenv(kernels.ENV, "torch")
    assert kernels.library() is None and not int4.native() and "torch" in kernels.status()
    model = nn.Module()
    model.lm_head = nn.Linear(64, 256, bias=False)
    model.model = nn.Module()
    model.model.layers = nn.ModuleList([nn.Sequential(nn.Linear(64, 64))])
    assert int4.quantize_model(model) == 2
    assert type(model.lm_head) is int4.Q8Linear and type(model.model.layers[0][0]) is int4.Int4Linear


def test_q4_codes_come_back_and_the_product_is_llama_cpps(march):
    w, codes = q4_1_grid(96, 256)
    lin = nn.Linear(256, 96, bias=False)
    lin.weight.data.copy_(w)
    ours, torchs = int4.NativeQ4Linear.from_linear(lin), int4.Int4Linear.from_linear(lin)
    assert torch.equal(ours.codes(), codes.to(torch.int32))
    assert torch.equal(ours.dequantized(), torchs.dequantized())  # the same steps and zeros, bit for bit
    assert int4.stored(nn.Sequential(ours)) == int4.stored(nn.Sequential(torchs))
    x = torch.randn(5, 256) * torch.tensor([0.1, 1, 10, 100, 0.0])[:, None]  # a zero row too
    got = ours(x).float()
    assert_product(got, x, ours.dequantized())
    assert torch.equal(got[4], torch.zeros(96))
    torch.testing.assert_close(got[:4], x[:4].bfloat16().float() @ ours.dequantized().t(), atol=0.05 * x.abs().amax(), rtol=0.05)
    assert ours(x.reshape(1, 5, 256)).shape == (1, 5, 96)


def test_q8_codes_come_back_and_the_product_is_llama_cpps(march):
    w, codes, d = q8_0_grid(192, 128)
    lin = nn.Linear(128, 192, bias=False)
    lin.weight.data.copy_(w)
    ours = int4.NativeQ8Linear.from_linear(lin)
    assert torch.equal(ours.codes(), codes.to(torch.int32))
    assert torch.equal(ours.dequantized(), int4.Q8Linear.from_linear(lin).dequantized())
    x = torch.randn(3, 128)
    assert_product(ours(x).float(), x, ours.dequantized())
    # one byte a weight and one bfloat16 step per 32 (torch's layout: two nibbles, two step/zero pairs)
    assert int4.stored(nn.Sequential(ours)) == (192 * 128, 192 * 128 + 2 * 192 * 128 // 32)


@pytest.mark.parametrize("kind", ["q4", "q8"])
def test_each_row_is_the_same_alone_among_others_and_on_any_thread_count(kind, march):
    cls = int4.NativeQ4Linear if kind == "q4" else int4.NativeQ8Linear
    q = cls.from_linear(nn.Linear(576, 320, bias=False))
    # 40 rows: on a CPU with AMX, q4's blocks of 16 rows go through its tiles (two here, and 8 rows past them)
    x = (torch.randn(40, 576) * torch.linspace(0.01, 30, 40)[:, None]).bfloat16()
    together = q(x)
    for n in (1, 2, 5, 8, 9, 16, 17, 33):
        assert torch.equal(q(x[:n]), together[:n]), n
        assert torch.equal(q(x[n:]), together[n:]), n
    assert torch.equal(torch.cat([q(x[i:i + 1]) for i in range(40)]), together)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert torch.equal(q(x), together)
    finally:
        torch.set_num_threads(threads)


def test_joined_layers_give_the_separate_outputs(march):
    mods = [int4.NativeQ4Linear.from_linear(nn.Linear(128, n, bias=False)) for n in (128, 48, 16)]
    joined = int4.fuse(mods)  # whole blocks of 16 join (torch's layout needs 64)
    assert type(joined) is int4.NativeQ4Linear
    x = torch.randn(4, 128).bfloat16()
    assert torch.equal(joined(x), torch.cat([m(x) for m in mods], dim=-1))
    assert int4.fuse([mods[0], int4.Int4Linear.from_linear(nn.Linear(128, 64, bias=False))]) is None  # no mixing


@pytest.fixture(scope="module")
def q4_pair(models_dir):
    # q/k/v of 128, 64, 64 outputs and gate/up of 96: joined in blocks of 16
    # head_dim 64: the attention kernel's AVX512-BF16 scores where the CPU has them
    target = make_llama(models_dir / "q4k-target", hidden=128, layers=2, heads=2, kv_heads=1, intermediate=96, seed=15)
    draft = make_llama(models_dir / "q4k-draft", hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64, seed=16)
    return target, draft


def test_a_q4_model_runs_on_it_and_greedy_output_equals_plain_decoding(q4_pair, march):
    loaded = load_model(str(q4_pair[0]), quant="q4", device="cpu")
    layer = loaded.model.model.layers[0]
    assert type(layer.mlp.down_proj) is int4.NativeQ4Linear and type(loaded.model.lm_head) is int4.NativeQ8Linear
    assert type(int4.fused(layer.self_attn)) is int4.NativeQ4Linear and int4.fused(layer.mlp) is not None
    # the joined codes are the layers' own (views), and the views' pointers are where their rows start
    joined = int4.fused(layer.self_attn)
    assert layer.self_attn.k_proj.packed.data_ptr() == joined.packed.data_ptr() + 128 // 16 * joined.packed[0].numel()
    engine = specdesk.load(str(q4_pair[0]), str(q4_pair[1]), device="cpu", target_quant="q4")
    assert engine.describe()["cpu_kernels"] == kernels.status()  # session logs and bench reports say which ran
    assert "kernels (" in kernels.status()
    checked = 0
    for p in PROMPTS:
        plain = engine.generate(p, drafter="none", max_new_tokens=40).token_ids
        for kw in (dict(k=1), dict(k=4), dict(k=9), dict(k="auto"), dict(k=3, tree=(4, 2)), dict(drafter="ngram", k=4)):
            got = engine.generate(p, max_new_tokens=40, **kw)
            assert got.token_ids == plain, (p, kw)
            checked += got.stats.drafted > 0
    assert checked >= 12  # the drafts really were verified in multi-row passes
    predicted = weight_bytes(analyze(str(q4_pair[0])), QuantSpec("q4"), "bfloat16")
    assert predicted.quantized + predicted.kept == measure_weight_bytes(loaded.model)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spans: list, threads: int = 2) -> torch.Tensor:
    """The attention kernel as the lean decoder calls it: q (n, hq, hd), caches (hk, capacity, hd), all bfloat16;
    spans: per position (contiguous slots, further slots)."""
    n, hq, hd = q.shape
    hk, capacity = k.shape[:2]
    prefix = torch.tensor([p for p, _ in spans])
    offsets = torch.tensor([0] + [len(e) for _, e in spans]).cumsum(0)
    extras = torch.tensor([x for _, e in spans for x in e] + [0])
    out = torch.empty(n, hq * hd, dtype=torch.bfloat16)
    assert kernels.library().sd_attend(q.data_ptr(), k.data_ptr(), v.data_ptr(), capacity * hd, n, hq, hk, hd,
                                       prefix.data_ptr(), offsets.data_ptr(), extras.data_ptr(), hd ** -0.5,
                                       out.data_ptr(), threads) == 0
    return out


@pytest.mark.parametrize("hd", [16, 64, 128])  # the portable path, and AVX512-BF16 scores where the CPU has them
def test_attention_is_each_positions_own_whatever_the_call_holds(hd, march):
    g = torch.Generator().manual_seed(hd)
    hq, hk, cap = 6, 2, 256
    k, v = (torch.randn(hk, cap, hd, generator=g).bfloat16() for _ in range(2))
    q = (torch.randn(9, hq, hd, generator=g) * 3).bfloat16()
    spans = [(150 + t + 1, []) for t in range(9)]
    together = attend(q, k, v, spans)
    for t, (end, _) in enumerate(spans):  # float64 attention over the same keys, query head i on KV head i // 3
        keys, values = k[:, :end].double(), v[:, :end].double()
        ref = torch.nn.functional.scaled_dot_product_attention(q[t].double().view(hk, 3, hd), keys, values)
        torch.testing.assert_close(together[t].double(), ref.reshape(-1), atol=2e-2, rtol=2 ** -7)
    assert torch.equal(torch.cat([attend(q[t:t + 1], k, v, spans[t:t + 1]) for t in range(9)]), together)
    assert torch.equal(attend(q[3:7], k, v, spans[3:7]), together[3:7])
    assert torch.equal(attend(q, k, v, spans, threads=1), together)
    # rows of any lengths in one call (the kernel takes a KV head's rows together, up to 6 at once): each its own
    mixed = [(n, []) for n in (7, 200, 16, 1, 151, 33, 256, 17, 64)]
    assert torch.equal(attend(q, k, v, mixed, threads=3), torch.cat([attend(q[t:t + 1], k, v, mixed[t:t + 1])
                                                                     for t in range(9)]))
    # a tree leaf: slots 0..99, then its ancestors in slots 200, 203, 201 = the same keys laid out in a row
    for cache in (k, v):
        cache[:, 100:103] = cache[:, [200, 203, 201]]
    assert torch.equal(attend(q[:1], k, v, [(100, [200, 203, 201])]), attend(q[:1], k, v, [(103, [])]))


def test_attentions_two_paths_are_the_same_bits_in_float32(march, tmp_path):
    """tests/attention_bits.c, built as the kernels are: attention over rows sharing a KV head (a verify pass) and
    over one query head alone (a one-position step's head where the rows path does not serve, a tree's positions)
    give the same float32 weights and sums for 1-6 rows, equal and different lengths. The bfloat16 outputs the
    test above compares round a changed order of additions away almost always; these do not."""
    import subprocess

    flags = [f for f in kernels.FLAGS if f not in ("-shared", "-fPIC")]
    exe = tmp_path / "attention_bits"
    subprocess.run([kernels._compiler(), f"-march={march}", *flags, str(Path(__file__).with_name("attention_bits.c")),
                    "-o", str(exe), "-lm"], check=True, capture_output=True, timeout=300)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.startswith("ok "), r.stdout
    assert int(r.stdout.split()[1]) >= 500  # the rows path served (it does on every CPU these kernels build for)


def test_without_a_compiler_torchs_kernels_run_and_say_why(monkeypatch, tmp_path):
    monkeypatch.setattr(kernels, "_state", {})  # as a fresh process would start (the built library stays loaded)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no cc, gcc or clang
    assert kernels.library() is None and not int4.native()
    assert kernels.status() == "torch's kernels: no C compiler (cc, gcc or clang) to build specdesk's own"
    broken = tmp_path / "cc"
    broken.write_text("#!/bin/sh\necho 'cc: error: bad flags' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setattr(kernels, "_state", {})
    monkeypatch.setenv("SPECDESK_CACHE_DIR", str(tmp_path / "cache"))
    heard: list[str] = []
    assert kernels.library(heard.append) is None  # a load's progress hears of the build before it starts
    assert heard == ["building specdesk's CPU kernels for this machine (once, several seconds)"]
    assert kernels.status() == "torch's kernels: specdesk's own did not build here: cc: error: bad flags"
    assert kernels.library(heard.append) is None and len(heard) == 1  # once a process


def test_rmsnorm_is_torchs_to_one_bfloat16_step_and_each_rows_own(march):
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(9, 576, generator=g) * torch.logspace(-3, 2, 9)[:, None]).bfloat16()
    w = (torch.rand(576, generator=g) * 2).bfloat16()

    def norm(rows: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(rows)
        kernels.library().sd_rmsnorm(rows.data_ptr(), rows.shape[0], 576, w.data_ptr(), 1e-5, out.data_ptr())
        return out

    together = norm(x)
    xf = x.float()
    ref = w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).bfloat16()  # LeanDecoder._norm in torch
    step = 2.0 ** (torch.floor(torch.log2(ref.float().abs().clamp_min(1e-30))) - 6)  # two bfloat16 steps
    assert ((together.float() - ref.float()).abs() <= step).all()
    assert (together == ref).float().mean() > 0.9  # mostly bit for bit: only the float32 sum's order differs
    assert torch.equal(torch.cat([norm(x[i:i + 1].contiguous()) for i in range(9)]), together)


def test_rotary_cache_write_and_swiglu_are_the_torch_forms(march):
    """sd_rope_kv: LeanDecoder._rotate's three bfloat16 operations bit for bit, q out as (n, hq, hd), rotated k and
    v into the cache slots after p0; sd_silu_mul: silu(gate) * up to one bfloat16 step."""
    g = torch.Generator().manual_seed(11)
    n, hq, hk, hd, cap, p0 = 3, 4, 2, 32, 64, 40
    qkv = torch.randn(n, (hq + 2 * hk) * hd, generator=g).bfloat16()
    cos, sin = torch.randn(n, hd, generator=g).bfloat16(), torch.randn(n, hd, generator=g).bfloat16()
    kc, vc = torch.zeros(hk, cap, hd, dtype=torch.bfloat16), torch.zeros(hk, cap, hd, dtype=torch.bfloat16)
    q = torch.empty(n, hq, hd, dtype=torch.bfloat16)
    kernels.library().sd_rope_kv(qkv.data_ptr(), n, hq, hk, hd, cos.data_ptr(), sin.data_ptr(), q.data_ptr(),
                                 kc.data_ptr(), vc.data_ptr(), cap * hd, p0)
    heads = qkv.view(n, hq + 2 * hk, hd).transpose(0, 1)  # (heads, n, hd)
    rotated = heads[:hq + hk] * cos + heads[:hq + hk].roll(hd // 2, -1) * sin  # LeanDecoder._rotate
    assert torch.equal(q.transpose(0, 1), rotated[:hq])
    assert torch.equal(kc[:, p0:p0 + n], rotated[hq:]) and torch.equal(vc[:, p0:p0 + n], heads[hq + hk:])
    assert not kc[:, :p0].any() and not kc[:, p0 + n:].any()  # nothing else written
    gu = (torch.randn(5, 2 * 96, generator=g) * 4).bfloat16()
    out = torch.empty(5, 96, dtype=torch.bfloat16)
    kernels.library().sd_silu_mul(gu.data_ptr(), 5, 96, out.data_ptr())
    gate, up = gu.chunk(2, dim=-1)
    ref = torch.nn.functional.silu(gate) * up
    assert ((out.float() - ref.float()).abs() <= ref.float().abs() * 2 ** -7 + 1e-30).all()
    assert (out == ref).float().mean() > 0.95
    # 8 lanes at a time where AVX2 is built, then one by one: the same (gate, up) pairs at 0-4 (in the first 8) and
    # at 8-12 (the tail of 13) give the same bits, infinities and NaN included
    vals = torch.cat([torch.randn(4092, 2, generator=g) * 8, torch.tensor([[float("inf"), 1.0], [float("-inf"), 2.0],
                                                                          [float("nan"), 1.0], [1.0, float("nan")]])])
    pairs = vals[torch.randperm(4096, generator=g)].bfloat16().view(-1, 4, 2)  # (1024 rows, 4 pairs, gate/up)
    gu = torch.zeros(1024, 26, dtype=torch.bfloat16)
    for at in (0, 8):
        gu[:, at:at + 4], gu[:, 13 + at:13 + at + 4] = pairs[..., 0], pairs[..., 1]
    out = torch.empty(1024, 13, dtype=torch.bfloat16)
    kernels.library().sd_silu_mul(gu.data_ptr(), 1024, 13, out.data_ptr())
    assert torch.equal(out[:, :4].view(torch.int16), out[:, 8:12].view(torch.int16))
    assert out[:, :4].isnan().sum() >= 2 and out[:, :4].isinf().any()


def test_argmax_is_torchs_first_largest_value(march):
    g = torch.Generator().manual_seed(12)
    x = torch.randn(4, 49152 + 7, generator=g).bfloat16()
    x[1, 100] = x[1, 9000] = x[1, 49158] = 50.0  # a tie: the first one counts
    x[2, -1] = 60.0  # in the tail after the last whole 16
    x[3] = -1.0  # all equal: index 0
    x[0, 32] = x[0, 17] = 70.0  # a tie across lanes: the later lane's index comes first
    assert torch.equal(kernels.argmax(x), x.argmax(dim=-1))
    assert kernels.argmax(x).tolist() == [17, 100, 49158, 0]
    short = torch.tensor([[1.0, 3.0, 3.0, -2.0]]).bfloat16()  # fewer logits than a vector's lanes
    assert kernels.argmax(short).tolist() == [1]
    assert kernels.argmax(torch.full((2, 40), float("-inf")).bfloat16()).tolist() == [0, 0]
    assert torch.equal(kernels.argmax(x[0]), x[0].argmax())  # one row, a 0-d index, as the drafter asks
    assert torch.equal(kernels.argmax(x.float()), x.float().argmax(dim=-1))  # other dtypes: torch's


def test_sampling_softmax_is_torchs_to_float32_rounding(march):
    """Temperature alone (no top-k, top-p) on a q4 model's bfloat16 logits goes through rows.c: softmax(x / t)."""
    from specdesk.core.sampling import SamplingConfig, process_logits

    g = torch.Generator().manual_seed(13)
    x = (torch.randn(3, 49152 + 5, generator=g) * 4).bfloat16()
    x[1, 7] = float("-inf")  # a masked logit has no mass
    for t in (0.7, 1.0, 1.6):
        got = kernels.softmax(x, t)
        ref = (x.float() / t).softmax(dim=-1)
        assert got.dtype == torch.float32 and got.shape == x.shape
        assert torch.allclose(got, ref, rtol=2e-5, atol=1e-12)
        assert torch.allclose(got.sum(-1), torch.ones(3), atol=1e-5)
        assert got[1, 7] == 0
        assert torch.equal(process_logits(x, SamplingConfig(temperature=t)), got)  # the path sampling takes
    assert kernels.softmax(x[0], 0.7).shape == (49152 + 5,)  # one row, as a drafter asks
    # the vector loops' exp and the tail's one by one: the same logit gives the same probability in either
    y = x.clone()
    y[:, -5:] = y[:, 100:105]
    for t in (0.7, 1.6):
        got = kernels.softmax(y, t)
        assert torch.equal(got[:, -5:], got[:, 100:105])
        kept = process_logits(y, SamplingConfig(temperature=t, top_k=40000))  # and through sd_process_bf16's
        assert torch.equal(kept[:, -5:], kept[:, 100:105]) and (kept[:, 100:105] > 0).any()


@pytest.mark.parametrize("v", [49152 + 9, 300, 17])
def test_top_k_and_top_p_are_torchs_up_to_which_of_tied_tokens(v, march):
    """With top-k and/or top-p, bfloat16 logits go through rows.c's sd_process_bf16 (process_logits' path): per row
    the tokens Hugging Face's warpers keep in torch, compared as the multiset of their logits (where tied logits sit
    at the top-p boundary either may keep another of them; bfloat16's 8-bit mantissa makes such ties common among
    SmolLM2-sized rows), and the same probabilities to float32 rounding; masked logits stay without mass. In a flat
    row (20,000 tokens kept of 49,161) the cumulative sums' rounding may move the boundary by a token."""
    from specdesk.core.sampling import SamplingConfig, process_logits

    g = torch.Generator().manual_seed(21)
    configs = [(0.7, 0, 0.9), (0.7, 40, 1.0), (1.3, 20, 0.8), (0.7, 0, 0.5), (1.0, 0, 0.01), (0.7, 1, 1.0),
               (0.7, v - 1, 0.95), (2.0, 0, 0.99), (0.5, 3, 0.3)]
    for scale in (1.0, 3.0, 8.0):
        x = (torch.randn(3, v, generator=g) * scale).bfloat16()
        x[1, :4] = float("-inf")
        for t, k, p in configs:
            cfg = SamplingConfig(temperature=t, top_k=k, top_p=p)
            got = process_logits(x, cfg)
            assert torch.equal(got, kernels.process(x, t, k, p))  # the kernel's
            want = process_logits(x.float(), cfg)  # float32 logits: torch's form, on the same values
            for r in range(3):
                kg, kw = got[r] > 0, want[r] > 0
                n = min(int(kg.sum()), int(kw.sum()))
                slack = 1 if n > 1000 else 0  # a flat row's boundary, to rounding
                assert abs(int(kg.sum()) - int(kw.sum())) <= slack, (scale, cfg, r)
                top_got = x[r][kg].float().sort(descending=True).values[:n - slack]
                top_want = x[r][kw].float().sort(descending=True).values[:n - slack]
                assert torch.equal(top_got, top_want), (scale, cfg, r)
                assert torch.allclose(got[r][kg].sort(descending=True).values[:n],
                                      want[r][kw].sort(descending=True).values[:n], rtol=1e-4, atol=0)
                if 0 < k < v:  # nothing under the k-th largest logit (its ties kept)
                    assert (x[r][kg].float() >= x[r].float().topk(k).values[-1]).all()
            assert (got[1, :4] == 0).all() and torch.allclose(got.sum(-1), torch.ones(3), atol=1e-5)


def test_sampling_draws_by_the_cumulative_mass_as_torchs_form(march):
    """sd_sample_f32: the first token whose cumulative mass exceeds u * total, never a token without mass; the
    same token as torch's cumsum and searchsorted for the same u but where the two sums round apart."""
    g = torch.Generator().manual_seed(14)
    p = torch.rand(49152 + 3, generator=g) ** 4
    p[torch.rand(p.shape, generator=g) < 0.3] = 0.0  # tokens without mass (a reduced head, a residual)
    p[-3:] = 0.0
    u = torch.rand(4000, generator=g)
    got = kernels.sample_rows(p.expand(4000, -1), u)
    cum = p.double().cumsum(0)
    want = torch.searchsorted(cum, u.double() * cum[-1], right=True)
    assert (p[got] > 0).all()
    assert (got == want).float().mean() > 0.99
    # where they part, u * total lies within float32 rounding of the sums (1e-6 of the total) of the token drawn
    target = u.double() * cum[-1]
    lo, hi = cum[got] - p[got].double(), cum[got]
    off = torch.maximum(lo - target, target - hi).clamp_min(0)
    assert (off <= 1e-6 * cum[-1]).all()
    # the law: u on a fine grid draws each token as often as its share of the mass
    few = torch.tensor([0.0, 0.5, 0.0, 1.5, 2.0, 0.0], dtype=torch.float32)
    grid = (torch.arange(20000, dtype=torch.float64) + 0.5) / 20000
    counts = torch.bincount(kernels.sample_rows(few.expand(20000, -1), grid), minlength=6)
    assert counts.tolist() == [0, 2500, 0, 7500, 10000, 0]
    assert kernels.sample_rows(few[None], torch.tensor([0.999999])).item() == 4  # the top end: the last with mass
    big = torch.zeros(262144 + 5)  # a vocabulary past the block sums kept on the stack (Gemma 3's 262k)
    big[[3, 200000, 262146]] = torch.tensor([1.0, 2.0, 1.0])
    assert kernels.sample_rows(big.expand(4, -1), torch.tensor([0.1, 0.3, 0.6, 0.9])).tolist() == [3, 200000, 200000,
                                                                                                  262146]


def test_the_residual_of_a_reduced_heads_draft_is_the_wide_forms(march):
    """normalize(max(0, p_target - p_draft)) with the draft's probabilities over its head's tokens only: rows.c's
    one call against the wide form in torch, and p_target itself where the two distributions are equal."""
    from specdesk.core.acceptance import residual_distribution

    g = torch.Generator().manual_seed(15)
    v, ids = 49152 + 9, torch.randperm(49152 + 9, generator=g)[:8192]
    pt = torch.rand(v, generator=g) ** 3
    pt /= pt.sum()
    pd = torch.rand(8192, generator=g) ** 3
    pd /= pd.sum()
    wide = torch.zeros(v).index_copy_(0, ids, pd)
    want = (pt - wide).clamp_min(0)
    want /= want.sum()
    got = kernels.residual(pt, pd, ids)
    assert torch.allclose(got, want, rtol=1e-5, atol=0) and (got[want == 0] == 0).all()
    assert torch.equal(residual_distribution(pt, pd, ids), got)  # the path verify_sampled takes
    same = torch.zeros(v).index_copy_(0, ids, pd)  # a draft equal to the target: nothing left, the target's own
    assert torch.equal(kernels.residual(same, pd, ids), same)


def test_the_residual_of_a_wide_draft_and_of_a_point_mass_is_the_wide_forms(march):
    """The same with the draft's probabilities as a whole row (a draft without a reduced head), and for a point mass
    (prompt lookup's token: acceptance.point_residual, the target's row without it): one rows.c call each, the path
    verify_sampled takes on a CPU, to float32 rounding of torch's wide form."""
    from specdesk.core.acceptance import one_hot, point_residual, residual_distribution

    g = torch.Generator().manual_seed(16)
    v = 49152 + 9
    pt = torch.rand(v, generator=g) ** 3
    pt[torch.rand(v, generator=g) < 0.2] = 0.0
    pt /= pt.sum()
    pd = torch.rand(v, generator=g) ** 3
    pd /= pd.sum()
    token = int(pt.argmax())  # a point mass on a token with the most mass: the residual must not draw it again
    for row, got in ((pd, kernels.residual(pt, pd, None)),
                     (one_hot(torch.tensor([token]), v)[0], point_residual(pt, torch.tensor([token])))):
        want = (pt - row).clamp_min(0)
        want /= want.sum()
        assert torch.allclose(got, want, rtol=1e-5, atol=0) and (got[want == 0] == 0).all()
    assert point_residual(pt, torch.tensor([token]))[token] == 0
    assert torch.equal(residual_distribution(pt, pd), kernels.residual(pt, pd, None))  # the path verify_sampled takes
    assert torch.equal(kernels.residual(pt, pt.clone(), None), pt)  # nothing left: the target's own
    assert kernels.residual(pt, pd[:-1], None) is None  # not a whole row: torch's form


@pytest.mark.parametrize("arch", ["llama", "qwen2"])  # qwen2: q/k/v with biases
def test_the_layers_in_one_call_give_the_bits_of_the_calls_one_by_one(models_dir, arch, march):
    """layers.c runs a pass's layers (the one-position steps, verify passes and trees that attend position by
    position) in one call: logits, final hidden states and KV caches equal those of the same kernels called from
    Python one by one, for one position, a verify pass over five and a token tree."""
    from specdesk.core.fastdraft import LeanDecoder
    from specdesk.core.tree import layout

    path = make_llama(models_dir / f"one-call-{arch}", hidden=128, layers=2, heads=4, kv_heads=2, intermediate=96,
                      seed=21, arch=arch)
    model = load_model(str(path), quant="q4", device="cpu").model
    ids = torch.randint(3, 4000, (200,), generator=torch.Generator().manual_seed(5))
    decs = [LeanDecoder(model, 300, keep_hidden=True) for _ in range(2)]
    assert decs[0].layers_in_one_call and decs[1].layers_in_one_call
    decs[1].layers_in_one_call = False
    tree = layout(ids[150:151], torch.tensor([101, 102]), (torch.tensor([201, 202]), torch.tensor([301])))
    outs = []
    with torch.inference_mode():
        for dec in decs:
            got = [dec.forward(ids[:150])]  # a prefill: torch's attention in one call, the same on both
            got += [dec.forward(ids[150 + i:151 + i]) for i in range(3)]
            got.append(dec.forward(ids[153:158], every=True))
            dec.crop(150)
            got.append(dec.forward_tree(tree.tokens, tree.depths, tree.allowed))
            got += [dec.hidden[:dec.length].clone()] + [L[c][:, :, :dec.length].clone() for L in dec.layers
                                                         for c in ("k", "v")]
            outs.append(got)
    for a, b in zip(*outs):
        assert torch.equal(a, b)
    assert not torch.equal(outs[0][1], outs[0][2])  # the steps did differ from each other


def test_a_head_stored_with_a_drafts_rows_first_gives_the_same_logits_and_the_draft_its_rows(march):
    """int4.share_rows: the target's 8-bit head with a draft's rows stored first writes its logits in vocabulary
    order through a column map, bit for bit the head's; the draft's reduced head is a view of those rows (no memory
    of its own but the map), bit for bit the head's outputs at those tokens."""
    torch.manual_seed(3)
    head = int4.NativeQ8Linear.from_linear(nn.Linear(128, 320, bias=False))
    ids = torch.randperm(320)[:48]
    shared, view = int4.share_rows(head, ids)
    x = torch.randn(11, 128).bfloat16()  # rows in blocks of 8 and a rest
    full = head(x)
    assert torch.equal(shared(x), full) and torch.equal(view(x), full[:, ids])
    assert torch.equal(shared.codes(), head.codes()) and torch.equal(shared.dequantized(), head.dequantized())
    assert view.packed.data_ptr() == shared.packed.data_ptr() and view.borrowed
    assert int4.stored(nn.Sequential(view)) == (48 * 128, 320 * 8)  # the map it added, not the rows
    assert int4.share_rows(head, ids[:40]) is None  # whole blocks of 16 only
    assert int4.share_rows(shared, ids) is None  # shared once
    some = torch.tensor([5, 319, 0, 17, 17, 200])  # any rows, repeats too: those rows of the whole dequantized head
    for h in (head, shared):
        assert torch.equal(h.dequantized_rows(some), h.dequantized()[some])
        assert torch.equal(h.dequantized_rows(ids), head.dequantized()[ids])


def test_a_q4_targets_distilled_draft_reads_its_head_rows_from_the_targets(models_dir, march):
    """specdesk.load with a q4 target and a distilled draft: the draft's reduced head is a view of the target's head
    (its memory the column map), the planner says so to the byte, and greedy output equals plain decoding."""
    from specdesk.core.distill.draft import build_draft, save_draft
    from specdesk.core.plan.planner import plan

    path = make_llama(models_dir / "share-target", hidden=128, layers=2, heads=2, kv_heads=1, intermediate=96, seed=31)
    target = load_model(str(path), device="cpu")
    ids = torch.randperm(4096, generator=torch.Generator().manual_seed(1))[:64]
    draft = build_draft(target.model, 1, ids)
    out = models_dir / "share-draft"
    save_draft(draft, out, target, head_ids=ids, target_sha256="0" * 64, target_source=path)
    engine = specdesk.load(str(path), str(out), device="cpu", target_quant="q4")
    t_head, d_head = engine.target.model.lm_head, engine.draft.model.lm_head
    assert d_head.borrowed and d_head.packed.data_ptr() == t_head.packed.data_ptr()
    assert torch.equal(t_head.out_map[:64], ids)
    p = plan(str(path), str(out), target_quant="q4", device="cpu", context=256, recommend=False, budget_bytes=2**30)
    assert sum(r.bytes for r in p.draft.rows[:2]) == engine.draft.weight_bytes
    plain = specdesk.load(str(path), drafter="none", device="cpu", target_quant="q4")
    for prompt in PROMPTS[:2]:
        want = plain.generate(prompt, max_new_tokens=30).token_ids
        assert engine.generate(prompt, max_new_tokens=30, k=3).token_ids == want
    # the greedy chain through ints maps head positions to tokens as the general loop does
    from specdesk.core import drafters
    from specdesk.core.sampling import SamplingConfig

    dr, toks, got = engine._model_drafter, engine.encode(PROMPTS[0]), {}
    try:
        for by_ids in (True, False):
            drafters.ModelDrafter.ids_path = by_ids
            dr.start(toks[:-1], 128)
            got[by_ids] = dr.propose(toks, 4, SamplingConfig(), None).tokens.tolist()
    finally:
        drafters.ModelDrafter.ids_path = True
    assert got[True] == got[False] and len(got[True]) == 4 and set(got[True]) <= set(ids.tolist())


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_fed_as_ints_a_pass_gives_the_bits_of_the_tensor_form(models_dir, arch, march):
    """forward_ids (the decode loop's steps: a drafted token, a verify's k + 1 positions, a catch-up) computes what
    forward does, bit for bit: logits and KV caches, one position, several with every position's logits, several
    with the last one's."""
    from specdesk.core.fastdraft import LeanDecoder

    path = make_llama(models_dir / f"ids-{arch}", hidden=128, layers=2, heads=4, kv_heads=2, intermediate=96,
                      seed=23, arch=arch)
    model = load_model(str(path), quant="q4", device="cpu").model
    ids = torch.randint(3, 4000, (200,), generator=torch.Generator().manual_seed(6)).tolist()
    decs = [LeanDecoder(model, 300) for _ in range(3)]
    assert decs[0]._fast_ids and decs[0]._ends is not None  # the whole pass in one call (sd_forward_ids)
    decs[2]._ends = None  # the layers in one call, the embedding rows, final norm and head around it from Python
    outs = []
    with torch.inference_mode():
        for i, dec in enumerate(decs):
            def feed(part, every=False):
                return dec.forward(torch.tensor(part), every) if i == 1 else dec.forward_ids(part, every)
            got = [feed(ids[:150])]  # a prefill
            got += [feed(ids[150 + j:151 + j]) for j in range(3)]
            got.append(feed(ids[153:158], every=True))  # a verify pass
            got.append(feed(ids[158:161]))  # a catch-up: the last position's logits
            dec.crop(155)
            got.append(feed(ids[155:157], every=True))  # after a rollback
            got += [L[c][:, :, :dec.length].clone() for L in dec.layers for c in ("k", "v")]
            outs.append(got)
    for a, b, c in zip(*outs):
        assert a.shape == b.shape == c.shape and torch.equal(a, b) and torch.equal(c, b)
    assert outs[0][1].dim() == 1 and outs[0][4].shape[0] == 5 and outs[0][5].dim() == 1
    assert not torch.equal(outs[0][1], outs[0][2])  # the steps did differ from each other
    with pytest.raises(ValueError):
        decs[0].forward_ids([])


def test_greedys_reading_from_the_passs_own_call_is_argmax_and_softmax_of_its_logits(models_dir, march):
    """top_ids (sd_forward_ids computing each row's argmax and its probability in the pass's own call) reads what
    kernels.argmax_list and kernels.top_probability read from forward_ids' logits of the same pass: every row of a
    verify, the last row of several, within a limit of the head's rows; a token id outside the embedding table is
    an IndexError that leaves the sequence as it was."""
    from specdesk.core.fastdraft import LeanDecoder

    path = make_llama(models_dir / "tops", hidden=128, layers=2, heads=4, kv_heads=2, intermediate=96, seed=29)
    model = load_model(str(path), quant="q4", device="cpu").model
    ids = torch.randint(3, 4000, (120,), generator=torch.Generator().manual_seed(8)).tolist()
    dec = LeanDecoder(model, 200)
    assert dec._ends is not None
    with torch.inference_mode():
        dec.forward_ids(ids[:100])
        for part, every, limit in (([ids[100]], False, None), (ids[101:105], True, None), (ids[105:108], False, None),
                                   (ids[108:111], True, 700)):
            n0 = dec.length
            logits = dec.forward_ids(part, every)
            dec.crop(n0)
            top, prob = dec.top_ids(part, every, prob=True, limit=limit)
            assert dec.length == n0 + len(part)
            dec.crop(n0)
            rows = logits if every else logits[None]
            rows = rows[:, :limit] if limit else rows
            assert top == kernels.argmax_list(rows) and len(top) == (len(part) if every else 1)
            assert prob == [kernels.top_probability(r)[1] for r in rows]
            assert dec.top_ids(part, every, limit=limit) == (top, None)
            dec.crop(n0 + len(part))
            if limit:  # the limit changed what was read
                assert max(top) < limit <= max(kernels.argmax_list(logits))
        n0 = dec.length
        with pytest.raises(IndexError):
            dec.top_ids([5, dec.embed.shape[0]])
        assert dec.length == n0


class GeneralCheck:
    """acceptance.SampledCheck's general form for the tests: process_logits and verify_sampled, drawing when it
    decides (after the pass), as the decode loop did before."""

    scratch = None

    def __init__(self, sampling, p_draft, tokens, generator, vocab, ids=None, pos=None, scratch=None):
        # the decode loop hands the drafted tokens and their columns over as ints (SampledCheck takes either)
        tokens = torch.tensor(tokens, dtype=torch.long) if isinstance(tokens, list) else tokens
        pos = torch.tensor(pos, dtype=torch.long) if isinstance(pos, list) else pos
        self.args = sampling, p_draft, tokens, generator, ids, pos

    def decide(self, logits):
        from specdesk.core.acceptance import verify_sampled
        from specdesk.core.sampling import process_logits

        sampling, p_draft, tokens, generator, ids, pos = self.args
        return verify_sampled(process_logits(logits, sampling), p_draft, tokens, generator, draft_ids=ids,
                              draft_pos=pos)


def test_without_the_kernels_the_sampled_chain_and_check_take_torchs_forms(q4_pair, monkeypatch):
    """SPECDESK_KERNELS=torch: the draft's sampled chain as ints draws through process_logits and draw_at, and the
    check made before the pass decides through verify_sampled with its draws made ahead: the same seeded replies as
    the general forms'."""
    from specdesk.core import acceptance, decode, drafters

    monkeypatch.setenv(kernels.ENV, "torch")
    assert not kernels.available()
    engine = specdesk.load(str(q4_pair[0]), str(q4_pair[1]), device="cpu", target_quant="q4")

    runs = {}
    for by_ids in (True, False):
        monkeypatch.setattr(drafters.ModelDrafter, "ids_path", by_ids)
        monkeypatch.setattr(decode, "SampledCheck", acceptance.SampledCheck if by_ids else GeneralCheck)
        runs[by_ids] = [engine.generate(p, max_new_tokens=24, temperature=0.8, seed=s, drafter="model", k=2).token_ids
                        for s, p in enumerate(PROMPTS[:2])]
    assert runs[True] == runs[False] and runs[True][0] != runs[True][1]


def test_argmax_as_a_list_and_the_top_tokens_probability(march):
    g = torch.Generator().manual_seed(13)
    x = torch.randn(3, 8192 + 5, generator=g).bfloat16()
    x[1, 40] = x[1, 4000] = 30.0  # a tie: the first one
    assert kernels.argmax_list(x) == x.argmax(dim=-1).tolist()
    assert kernels.argmax_list(x[1]) == [40]  # one row
    assert kernels.argmax_list(x.float()) == x.float().argmax(dim=-1).tolist()  # torch's for other dtypes
    for row in x:
        i, p = kernels.top_probability(row)
        want = row.float().softmax(-1)
        assert i == int(row.argmax()) and abs(p - float(want[i])) <= 1e-6 * max(1.0, float(want[i]))
    i, p = kernels.top_probability(x[0].float())  # the torch form elsewhere
    assert i == int(x[0].argmax()) and abs(p - float(x[0].float().softmax(-1).max())) < 1e-6


def test_a_greedy_drafts_tokens_are_the_same_fed_as_ints_or_as_tensors(q4_pair, march):
    """The draft's greedy chain through ints (ModelDrafter._propose_greedy) proposes what the general loop does:
    fixed k, and drafting by confidence (the same tokens, the same probabilities to float32 rounding)."""
    from specdesk.core import drafters
    from specdesk.core.sampling import SamplingConfig

    engine = specdesk.load(str(q4_pair[0]), str(q4_pair[1]), device="cpu", target_quant="q4", drafter="model")
    dr = engine._model_drafter
    ids = engine.encode(PROMPTS[0])
    out = {}
    try:
        for by_ids in (True, False):
            drafters.ModelDrafter.ids_path = by_ids
            seen: list[float] = []
            dr.start(ids[:-1], 200)
            a = dr.propose(ids, 5, SamplingConfig(), None)
            dr.commit(len(ids))
            b = dr.propose(ids + a.tokens.tolist()[:2], 4, SamplingConfig(), None,
                           keep=lambda j, p, t: seen.append(p) or j < 3)
            out[by_ids] = (a.tokens.tolist(), b.tokens.tolist(), seen)
    finally:
        drafters.ModelDrafter.ids_path = True
    assert out[True][:2] == out[False][:2] and len(out[True][0]) == 5 and len(out[True][1]) == 3
    assert out[True][2] == pytest.approx(out[False][2], rel=1e-2)  # torch's softmax in bfloat16 there


def _reduced_draft(target, models_dir, rows: int = 300):
    """A distilled draft of the q4 pair's target with a reduced head (``rows`` of its tokens), built once. 300 rows
    are no multiple of 16: its head stays out of the layers' call; 320 go in it (LeanDecoder._ends)."""
    from specdesk.core.distill.draft import build_draft, save_draft

    draft = models_dir / ("sampled-reduced-draft" if rows == 300 else f"sampled-reduced-draft-{rows}")
    if not draft.exists():
        loaded = load_model(str(target), device="cpu")
        ids = torch.randperm(4096, generator=torch.Generator().manual_seed(2))[:rows]
        save_draft(build_draft(loaded.model, 1, ids), draft, loaded, head_ids=ids, target_sha256="0" * 64,
                   target_source=target)
    return draft


def test_a_sampled_chain_on_the_cpu_makes_no_tensor_for_its_tokens_and_reuses_its_logits_row(q4_pair, models_dir):
    """The draft's sampled chain as ints hands over its tokens and their head columns as ints (drafters.IdProposal:
    the tensors are made only where something reads them; each cost ~40-70 us right after a target pass), and each
    drafted token's logits land in one row the draft's decoder keeps (LeanDecoder.forward_ids(reuse=True)), with the
    values a new tensor gets."""
    from specdesk.core.drafters import IdProposal
    from specdesk.core.sampling import SamplingConfig, make_generator

    engine = specdesk.load(str(q4_pair[0]), str(_reduced_draft(q4_pair[0], models_dir, 320)), device="cpu",
                           target_quant="q4", drafter="model")
    dr = engine._model_drafter
    ids = engine.encode(PROMPTS[0])
    dr.start(ids[:-1], 200)
    prop = dr.propose(ids, 3, SamplingConfig(temperature=0.8), make_generator(torch.device("cpu"), 3))
    assert isinstance(prop, IdProposal) and "tokens" not in vars(prop) and prop._prob_pos is None
    pos = prop.pos_list()
    assert len(pos) == len(prop) == 3 and [int(dr.head_ids[c]) for c in pos] == prop.id_list()
    assert prop.prob_pos.tolist() == pos and prop.tokens.tolist() == prop.id_list()  # made when read
    assert tuple(prop.probs.shape) == (3, 320)
    dec = dr.seq.decoder
    assert dec._ends is not None  # the head in the layers' call: where the row is kept
    n = dec.length
    a = dec.forward_ids([ids[-1]], reuse=True)
    first = a.clone()
    dec.crop(n)
    b = dec.forward_ids([ids[-1]], reuse=True)
    dec.crop(n)
    c = dec.forward_ids([ids[-1]])
    assert b is a and c is not a and torch.equal(first, c)


@pytest.mark.parametrize("head", ["wide", "reduced"])
def test_sampled_replies_are_the_same_draw_for_draw_through_ints_or_tensors(q4_pair, models_dir, head, march,
                                                                             monkeypatch):
    """At a temperature, the draft's chain as ints (softmax and draw in one call, ModelDrafter._propose_sampled) and
    the verification from the target's logits in one call (verify_sampled_logits) consume the generator as the
    tensor forms do and decide alike: the same seed gives the same reply either way (draft, prompt lookup, and the
    two together; a draft over the whole vocabulary and a distilled one with a reduced head; at a temperature alone
    and with top-k and top-p)."""
    from specdesk.core import acceptance, decode, drafters

    target, draft = q4_pair
    if head == "reduced":
        draft = _reduced_draft(target, models_dir)
    engine = specdesk.load(str(target), str(draft), device="cpu", target_quant="q4")
    assert (engine._model_drafter.head_ids is not None) == (head == "reduced")

    runs = {}
    for by_ids in (True, False):
        monkeypatch.setattr(drafters.ModelDrafter, "ids_path", by_ids)
        monkeypatch.setattr(acceptance, "_plain_cpu", acceptance._plain_cpu if by_ids else (lambda *a: False))
        monkeypatch.setattr(decode, "SampledCheck", acceptance.SampledCheck if by_ids else GeneralCheck)
        runs[by_ids] = [engine.generate(p, max_new_tokens=32, temperature=0.8, seed=s, drafter=d, k=3, **top).token_ids
                        for s, p in enumerate(PROMPTS[:3]) for d in ("model", "ngram", "model+lookup")
                        for top in ({}, {"top_k": 20, "top_p": 0.9})]
    assert runs[True] == runs[False]
    assert len({tuple(r) for r in runs[True]}) >= 3
