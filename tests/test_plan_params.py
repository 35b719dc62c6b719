"""Parameter counts and model structure for the planner, from config.json alone or from safetensors headers.

The configs in tests/data/configs are the real config.json files of the models people run locally
(written out by hand: nothing is downloaded); every count is checked three ways: our analysis, a
meta-device model built independently here, and the published count.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specdesk.core.errors import BadModel, ModelNotFound
from specdesk.core.plan import analyze, kv_cache_bytes

CONFIGS = Path(__file__).resolve().parent / "data" / "configs"

# Published parameter counts (model cards / safetensors metadata), tied embeddings counted once.
PUBLISHED = {
    "llama-3-8b": 8_030_261_248,
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
    "mistral-7b-v0.1": 7_241_732_096,
    "mistral-7b-instruct-v0.3": 7_248_023_552,
    "qwen2-7b-instruct": 7_615_616_512,
    "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-1.5b": 1_543_714_304,
    "qwen2.5-0.5b": 494_032_768,
    "gemma-2-2b": 2_614_341_888,
    "gemma-2-9b": 9_241_705_984,
    "phi-3-mini-4k-instruct": 3_821_079_552,
}


def config_folder(root: Path, name: str) -> Path:
    """A model folder holding only config.json, as before a download."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(CONFIGS / f"{name}.json", folder / "config.json")
    return folder


@pytest.fixture(scope="module")
def config_only(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("config-only")
    for name in PUBLISHED:
        config_folder(root, name)
    return root


def independent_meta_count(folder: Path) -> int:
    """The meta-device model built here with accelerate (not the planner's code path)."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    model.tie_weights()  # under init_empty_weights transformers 5 leaves the tie to the caller (a real load ties)
    return sum(p.numel() for p in model.parameters())


def test_every_test_config_has_a_published_count():
    assert sorted(p.stem for p in CONFIGS.glob("*.json")) == sorted(PUBLISHED)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_config_only_count_is_exact(config_only, name):
    folder = config_only / name
    a = analyze(folder)
    assert a.source.startswith("config.json")
    assert not a.estimated
    assert a.params == PUBLISHED[name]
    assert a.params == independent_meta_count(folder)


def test_tied_embeddings_counted_once(config_only):
    tied = analyze(config_only / "llama-3.2-1b")
    assert tied.tied_embeddings
    embed = 128256 * 2048
    untied_would_be = PUBLISHED["llama-3.2-1b"] + embed
    assert tied.params != untied_would_be
    # The output projection is tied: nothing named lm_head is quantized, and no linear is the embedding.
    assert not any("lm_head" in lin.name or "embed" in lin.name for lin in tied.linears)


def test_quantized_split_follows_transformers(config_only):
    """bitsandbytes gets every linear of the decoder layers; embeddings, lm_head and norms stay 16-bit."""
    a = analyze(config_only / "llama-3.1-8b")
    assert len(a.linears) == 32 * 7
    assert a.linear_params == 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    assert a.kept_params == 2 * 128256 * 4096 + 4096 * (2 * 32 + 1)  # embed + lm_head + norms
    phi = analyze(config_only / "phi-3-mini-4k-instruct")  # fused qkv_proj and gate_up_proj
    assert {lin.name.split(".")[-2] for lin in phi.linears} == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}


def test_kv_layout_is_gqa_and_sliding_aware(config_only):
    llama = analyze(config_only / "llama-3.1-8b")
    assert (llama.kv.kv_heads, llama.kv.head_dim, len(llama.kv.layers)) == (8, 128, 32)
    assert kv_cache_bytes(llama, 1, "bfloat16") == 128 * 1024  # the well-known 128 KiB per token
    gemma = analyze(config_only / "gemma-2-2b")  # alternating sliding (4096) and global layers
    assert sorted({c for c in gemma.kv.layers}, key=str) == [4095, None]
    per_layer_pos = 2 * 4 * 256 * 2
    assert kv_cache_bytes(gemma, 8192, "bfloat16") == per_layer_pos * (13 * 8192 + 13 * 4095)
    mistral = analyze(config_only / "mistral-7b-v0.1")  # sliding window 4096 on every layer
    assert kv_cache_bytes(mistral, 32768, "bfloat16") == kv_cache_bytes(mistral, 4095, "bfloat16")
    qwen = analyze(config_only / "qwen2.5-7b")  # sliding_window in the config, but use_sliding_window false
    assert not qwen.kv.sliding and qwen.kv.kv_heads == 4


def test_headers_give_the_same_count_as_the_loaded_model(tiny_target):
    from transformers import AutoModelForCausalLM

    a = analyze(tiny_target)
    assert a.source == "safetensors headers"
    model = AutoModelForCausalLM.from_pretrained(tiny_target)
    assert a.params == sum(p.numel() for p in model.parameters())  # tied embeddings once
    assert a.vocab_size == 4096 and a.kv.kv_heads == 2


def test_sharded_checkpoint_read_through_its_index(tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model("llama", vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                               num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    model = AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(tmp_path, max_shard_size="100KB")
    assert (tmp_path / "model.safetensors.index.json").exists() and len(list(tmp_path.glob("*.safetensors"))) > 1
    a = analyze(tmp_path)
    assert a.source == "safetensors headers"
    assert a.params == sum(p.numel() for p in model.parameters())
    # A missing shard (partial download) still plans from config.json, and says so.
    victim = sorted(tmp_path.glob("*.safetensors"))[0]
    victim.unlink()
    b = analyze(tmp_path)
    assert b.params == a.params and b.source.startswith("config.json")
    assert any("planned from config.json" in n for n in b.notes)


def _write_unknown(folder: Path, with_weights: bool) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {"model_type": "nonexistent-arch", "num_hidden_layers": 2, "num_attention_heads": 4,
           "hidden_size": 32, "vocab_size": 100, "max_position_embeddings": 256}
    (folder / "config.json").write_text(json.dumps(cfg))
    if with_weights:
        import torch
        from safetensors.torch import save_file

        tensors = {"embed.weight": torch.zeros(100, 32), "blocks.0.attn.weight": torch.zeros(96, 32),
                   "blocks.0.out.weight": torch.zeros(32, 32), "blocks.0.norm.weight": torch.zeros(32),
                   "blocks.1.attn.weight": torch.zeros(96, 32), "blocks.1.out.weight": torch.zeros(32, 32),
                   "blocks.1.norm.weight": torch.zeros(32)}
        save_file(tensors, str(folder / "model.safetensors"))
    return folder


def test_unknown_architecture_with_headers_is_estimated(tmp_path):
    a = analyze(_write_unknown(tmp_path / "unknown", with_weights=True))
    assert a.estimated and "unknown architecture" in a.source
    assert a.params == 100 * 32 + 2 * (96 * 32 + 32 * 32 + 32)
    assert {lin.name for lin in a.linears} == {"blocks.0.attn.weight", "blocks.0.out.weight",
                                               "blocks.1.attn.weight", "blocks.1.out.weight"}
    assert a.kv.known and len(a.kv.layers) == 2 and a.kv.head_dim == 8


def test_unknown_architecture_without_weights_is_an_error(tmp_path):
    with pytest.raises(BadModel, match="unknown to transformers"):
        analyze(_write_unknown(tmp_path / "unknown-cfg", with_weights=False))


def test_not_a_model_folder(tmp_path):
    with pytest.raises(BadModel, match="no config.json"):
        analyze(tmp_path)
    with pytest.raises(ModelNotFound):
        analyze(tmp_path / "missing")


def test_analysis_is_cached_and_refreshed_on_change(tmp_path):
    folder = config_folder(tmp_path, "qwen2.5-0.5b")
    first = analyze(folder)
    again = analyze(folder)
    assert again is first  # the same object: served from the cache, nothing rebuilt
    cfg = json.loads((folder / "config.json").read_text())
    cfg["num_hidden_layers"] = 12
    (folder / "config.json").write_text(json.dumps(cfg))
    changed = analyze(folder)
    assert changed.params < first.params and len(changed.kv.layers) == 12
