"""GGUF files as models: small files written here with the gguf package's writer (F32, F16, Q8_0, Q4_0),
converted once into the cache, equal to transformers' own GGUF load, found in LM Studio's and Ollama's
layouts, planned from their headers, checked as drafts, and broken ones refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROMPTS, held_tensors, make_llama, differing_tensors, specdesk_side_by_side
from ggufwrite import CHAT_TEMPLATE, lmstudio_layout, ollama_layout, write_gguf

ROOT = Path(__file__).resolve().parent.parent
QTYPES = ("F32", "F16", "Q8_0", "Q4_0")


def specdesk(*args, env_extra=None, timeout=300):
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "specdesk", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="module")
def gguf_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gguf")


@pytest.fixture(scope="module")
def ggufs(gguf_dir, tiny_target) -> dict[str, Path]:
    """The tiny target in each weight type; the Q8_0 one carries a chat template."""
    return {q: write_gguf(tiny_target, gguf_dir / f"tiny-{q}.gguf", q,
                          chat_template=CHAT_TEMPLATE if q == "Q8_0" else None) for q in QTYPES}


@pytest.fixture(scope="module")
def draft_ggufs(gguf_dir, tiny_draft) -> tuple[Path, Path]:
    """A compatible draft, and one whose tokenizer swaps the tokens of ids 500 and 501."""
    import json as _json

    good = write_gguf(tiny_draft, gguf_dir / "draft-Q8_0.gguf", "Q8_0")
    vocab = _json.loads((tiny_draft / "tokenizer.json").read_text())["model"]["vocab"]
    by_id = {i: t for t, i in vocab.items()}
    odd = write_gguf(tiny_draft, gguf_dir / "odd-draft-Q8_0.gguf", "Q8_0",
                     tokens_override={500: by_id[501], 501: by_id[500]})
    return good, odd


def _state(model) -> dict:
    return {k: v for k, v in model.state_dict().items()}


@pytest.mark.parametrize("qtype", QTYPES)
def test_conversion_equals_transformers_gguf_load(qtype, ggufs, tiny_target):
    """Weights equal (bit for bit) what transformers' GGUF loader produces; F32 equals the original folder;
    the listing's and the planner's parameter counts equal the loaded model's."""
    import torch
    from transformers import AutoModelForCausalLM

    from specdesk.core.discovery import describe_gguf
    from specdesk.core.loading import load_model
    from specdesk.core.plan.params import analyze

    path = ggufs[qtype]
    loaded = load_model(str(path), device="cpu")
    ref = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    ours, theirs = _state(loaded.model), _state(ref)
    assert set(ours) == set(theirs)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    if qtype == "F32":
        original = _state(AutoModelForCausalLM.from_pretrained(tiny_target))
        assert all(torch.equal(ours[k], original[k]) for k in ours)
    entry = describe_gguf(path, str(path), "added")
    assert entry.usable and entry.dtype == qtype and entry.format == "gguf"
    assert entry.params == analyze(str(path)).params == loaded.params
    assert loaded.gguf["file_type"] == qtype and loaded.path == path.resolve()


@pytest.mark.parametrize("quant", ["none", "nf4"])
def test_planned_weight_bytes_equal_the_load_and_target_quant_applies(quant, ggufs):
    """Planned from the header as dequantized (and re-quantized when asked): the bytes of a real load."""
    from specdesk.core.loading import load_model
    from specdesk.core.plan import QuantSpec, analyze, measure_weight_bytes, weight_bytes

    path = ggufs["Q4_0"]
    loaded = load_model(str(path), quant, device="cpu")
    if quant == "nf4":
        assert "Linear4bit" in {type(m).__name__ for m in loaded.model.modules()}
    predicted = weight_bytes(analyze(str(path)), QuantSpec(quant), "float32").total
    assert predicted == measure_weight_bytes(loaded.model)


def test_auto_quantization_is_q4_for_a_4_bit_gguf_on_a_cpu_and_as_stored_otherwise(ggufs, tiny_target, tmp_path):
    """--target-quant auto (the command line's and the app's default): a GGUF file of 4 bits a weight (Q4_0 here) on a
    CPU loads and plans as q4, one of 8 bits (Q8_0) and a float llama folder or file of 100 MB and more as q8 where
    specdesk's kernels build; smaller F32 and F16 files and folders, one of another architecture or already
    quantized, a GPU and a compute dtype asked for stay as stored; the command line plans the 4-bit file as q4 without
    being told."""
    from specdesk.core import kernels
    from specdesk.core.loading import auto_quant, load_model, resolve_quant
    from specdesk.core.plan import plan

    eight = "q8" if kernels.available() else "none"
    assert {q: resolve_quant(str(ggufs[q]), "auto", "cpu") for q in QTYPES} == {
        "F32": "none", "F16": "none", "Q8_0": eight, "Q4_0": "q4"}
    assert auto_quant(ggufs["Q8_0"], "cuda") == "none" and auto_quant(ggufs["Q8_0"], "cpu", "float32") == "none"
    import specdesk.core.loading as loading

    with pytest.MonkeyPatch.context() as mp:  # a float file takes the folder's rule: q8 from 100 MB (here: from 1 byte)
        mp.setattr(loading, "Q8_AUTO_MIN_BYTES", 1)
        assert {q: auto_quant(ggufs[q], "cpu") for q in ("F32", "F16")} == {"F32": eight, "F16": eight}
    assert resolve_quant(str(tiny_target), "auto", "cpu") == "none"  # a toy's pass is not bound by its weights
    # a float llama folder of 100 MB of weights and more (sparse files here: auto reads only config and sizes): q8
    from specdesk.core.loading import Q8_AUTO_MIN_BYTES

    cfg = json.loads((tiny_target / "config.json").read_text())
    for name, change, size, want in (("big", {}, Q8_AUTO_MIN_BYTES, eight),
                                     ("small", {}, Q8_AUTO_MIN_BYTES - 1, "none"),
                                     ("other-arch", {"model_type": "gpt2"}, Q8_AUTO_MIN_BYTES, "none"),
                                     ("quantized", {"quantization_config": {}}, Q8_AUTO_MIN_BYTES, "none"),
                                     ("gelu", {"hidden_act": "gelu"}, Q8_AUTO_MIN_BYTES, "none")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({**cfg, **change}))
        with open(folder / "model.safetensors", "wb") as f:
            f.truncate(size)
        assert auto_quant(folder, "cpu") == want, name
    big = tmp_path / "big"
    assert auto_quant(big, "cuda") == "none" and auto_quant(big, "cpu", "float32") == "none"
    assert auto_quant(ggufs["Q4_0"], "cuda") == "none" and auto_quant(ggufs["Q4_0"], "cpu", "float32") == "none"
    assert resolve_quant(str(ggufs["Q4_0"]), "nf4", "cpu") == "nf4"  # a choice is kept
    assert resolve_quant("no/such-model", "auto", "cpu") == "none"  # the load says what is wrong
    loaded = load_model(str(ggufs["Q4_0"]), "auto", device="cpu")
    assert loaded.quant == "q4" and loaded.dtype == "bfloat16"
    assert load_model(str(ggufs["Q8_0"]), "auto", device="cpu").quant == eight
    common = dict(drafter="none", device="cpu", budget_bytes=2**33, recommend=False)
    auto = plan(str(ggufs["Q4_0"]), target_quant="auto", **common)
    assert auto.target.quant == "q4" and auto.total_bytes == plan(
        str(ggufs["Q4_0"]), target_quant="q4", **common).total_bytes
    r = specdesk("plan", "--target", str(ggufs["Q4_0"]), "--device", "cpu", "--drafter", "none")
    assert r.returncode == 0 and ", q4;" in r.stdout, r.stdout + r.stderr


def test_second_load_reuses_the_conversion_and_a_changed_file_converts_again(gguf_dir, tiny_target):
    from specdesk.core.loading import load_model
    from specdesk.core.models.convert import entry_dir, needed_bytes
    from specdesk.core.models.ggufheader import read_gguf_header

    path = write_gguf(tiny_target, gguf_dir / "changing.gguf", "Q8_0")
    first: list[str] = []
    load_model(str(path), device="cpu", progress=first.append)
    assert any("converting changing.gguf" in m and "100%" in m for m in first), first
    header = read_gguf_header(path)
    old = entry_dir(header)
    written = sum(f.stat().st_size for f in (old / "float32").iterdir())
    assert written <= needed_bytes(header, "float32")  # the free-space check asks for at least what is written
    weights = old / "float32" / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    again: list[str] = []
    load_model(str(path), device="cpu", progress=again.append)
    assert again == [] and weights.stat().st_mtime_ns == stamp  # read from the cache, not converted
    write_gguf(tiny_target, path, "Q4_0")  # the same file, new content
    third: list[str] = []
    m = load_model(str(path), device="cpu", progress=third.append)
    assert any("100%" in msg for msg in third) and m.gguf["file_type"] == "Q4_0"
    assert not old.exists()  # the conversion of the old version is removed


@pytest.mark.parametrize("tied, quant", [(True, "q4"), (False, "q4"), (True, "q8")])
def test_q4_is_stored_as_codes_and_loads_as_quantizing_the_float32_conversion(tied, quant, gguf_dir, tiny_target,
                                                                              models_dir):
    """A q4 load of a GGUF (Q4_1 here; q8: a Q8_0 file) converts it once into its q4 form (packed codes and scales, the
    rest bfloat16), never into a float32 copy; the model it loads holds, bit for bit, what quantizing the float32
    conversion's model gives (every parameter, buffer and joined layer; a tied head from the embeddings, an untied one
    from its own tensor); a second load converts and quantizes nothing."""
    import torch
    from transformers import AutoModelForCausalLM

    from specdesk.core import int4
    from specdesk.core.loading import load_model
    from specdesk.core.models.convert import converted_folder, entry_dir, needed_bytes
    from specdesk.core.models.ggufheader import read_gguf_header
    from specdesk.core.models.q4store import folder_name

    src = tiny_target if tied else make_llama(models_dir / "tiny-untied", seed=3, tie=False)
    path = write_gguf(src, gguf_dir / f"{quant}-tied-{tied}.gguf", "Q4_1" if quant == "q4" else "Q8_0")
    said: list[str] = []
    q4 = load_model(str(path), quant, device="cpu", progress=said.append)
    header = read_gguf_header(path)
    root = entry_dir(header)
    assert any(f"to {quant} (first load only)" in m and "100%" in m for m in said), said
    assert not any("quantizing" in m for m in said) and not (root / "float32").exists()
    assert folder_name(quant).startswith(f"{quant}-") and q4.quant == quant
    stored = sum(f.stat().st_size for f in (root / folder_name(quant)).iterdir())
    assert stored <= needed_bytes(header, folder_name(quant)) < needed_bytes(header, "float32")
    again: list[str] = []
    q4_again = load_model(str(path), quant, device="cpu", progress=again.append)
    assert again == [] and not differing_tensors(held_tensors(q4.model), held_tensors(q4_again.model))

    ref = AutoModelForCausalLM.from_pretrained(converted_folder(path, torch.float32), dtype=torch.float32,
                                               local_files_only=True, attn_implementation="sdpa")
    params = sum(p.numel() for p in ref.parameters())
    int4.quantize_model(ref.eval(), layers=quant)
    eight = (int4.Q8Linear, int4.NativeQ8Linear)
    assert (type(q4.model.model.layers[0].mlp.down_proj) in eight) == (quant == "q8")
    assert q4.params == params and ("lm_head" in dict(q4.model.named_modules())) and tied == (
        q4.model.config.tie_word_embeddings)
    assert [type(m) for m in q4.model.modules()] == [type(m) for m in ref.modules()]
    assert not differing_tensors(held_tensors(q4.model), held_tensors(ref))
    ids = torch.tensor([[1, 5, 9, 200, 31]])
    assert torch.equal(q4.model(ids).logits, ref(ids).logits)


def test_a_q4_conversion_removes_the_forms_it_supersedes(gguf_dir, tiny_target):
    """Before q4 was stored as q4, a q4 load kept a float32 conversion of the file (4-8x it: ~32 GB for an 8B
    Q4_K_M), and a new q4 layout would leave the old one behind: the first q4 conversion removes both and says how
    much it freed; the other kernel's current form and other dtypes' conversions stay, and a float32 conversion made
    after it (a load with --target-quant none) is not removed by later q4 loads."""
    import torch

    from specdesk.core.loading import load_model
    from specdesk.core.models import q4store
    from specdesk.core.models.convert import converted_folder, entry_dir
    from specdesk.core.models.ggufheader import read_gguf_header

    path = write_gguf(tiny_target, gguf_dir / "superseded.gguf", "Q4_1")
    root = entry_dir(read_gguf_header(path))
    version = torch.__version__.split("+")[0]
    width = torch.backends.cpu.get_cpu_capability().lower()
    old = ["float32", f"q4-own-{q4store.LAYOUT - 1}", f"q4-torch-0.1.0-{width}-{q4store.LAYOUT}",
           f"q4-torch-{version}-{q4store.LAYOUT}"]  # torch's form as named before the vector width was in it
    kept = ["bfloat16", f"q4-own-{q4store.LAYOUT}", f"q4-torch-{version}-{width}-{q4store.LAYOUT}"]
    kept.remove(q4store.folder_name())  # this machine's form is the one the load writes
    for name in old + kept:
        (root / name).mkdir(parents=True)
        (root / name / "model.safetensors").write_bytes(b"\0" * 3 * 2**20)
    said: list[str] = []
    load_model(str(path), "q4", device="cpu", progress=said.append)
    assert [name for name in old if (root / name).exists()] == []
    assert all((root / name / "model.safetensors").exists() for name in kept)
    freed = [m for m in said if m.startswith("removed the ")]
    assert len(freed) == 4 and all("superseded.gguf" in m and "3.0 MiB freed" in m for m in freed), said
    wide = converted_folder(path, torch.float32)  # a later --target-quant none load
    again: list[str] = []
    load_model(str(path), "q4", device="cpu", progress=again.append)
    assert (wide / "config.json").exists() and again == []


def test_a_conversion_parses_the_file_once_and_leaves_gguf_as_it_was(gguf_dir, tiny_target, monkeypatch):
    """transformers parses the metadata in each call and builds gguf's tensor-name table per module: within one
    conversion each happens once (SmolLM2: 26 -> 12.5 s), and gguf's own functions are back afterwards, a failed
    conversion included."""
    import gguf

    from specdesk.core.errors import BadModel
    from specdesk.core.loading import load_model
    from specdesk.core.models.convert import config_folder

    reads: list[str] = []
    tables: list[tuple] = []
    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map

    class CountingReader(reader):
        def __init__(self, path, *args, **kw):
            reads.append(os.path.basename(path))
            super().__init__(path, *args, **kw)

    def counting_map(*args):
        tables.append(args)
        return name_map(*args)

    monkeypatch.setattr(gguf, "GGUFReader", CountingReader)
    monkeypatch.setattr(gguf, "get_tensor_name_map", counting_map)
    path = write_gguf(tiny_target, gguf_dir / "counted.gguf", "Q8_0")
    bad = write_gguf(tiny_target, gguf_dir / "bad-arch.gguf", "F32", arch="bitnet-x")
    reads.clear()
    tables.clear()  # the writer's own
    load_model(str(path), device="cpu")
    assert reads == ["counted.gguf"]  # config and tokenizer from one parse (two without)
    assert len(tables) == 1  # one table for the model's modules (one per module without)
    assert gguf.GGUFReader is CountingReader and gguf.get_tensor_name_map is counting_map
    reads.clear()
    cfg = config_folder(write_gguf(tiny_target, gguf_dir / "planned.gguf", "F16"))  # planning's first read, alone
    assert reads == ["planned.gguf"] and (cfg / "config.json").exists()
    assert gguf.GGUFReader is CountingReader
    with pytest.raises(BadModel):
        load_model(str(bad), device="cpu")
    assert gguf.GGUFReader is CountingReader and gguf.get_tensor_name_map is counting_map


def test_greedy_output_equals_transformers_generate_on_the_gguf(ggufs, draft_ggufs):
    """Plain, prompt lookup and a GGUF draft (k=3 and auto): token-identical to transformers' generate."""
    import torch
    from transformers import AutoModelForCausalLM

    import specdesk

    path = ggufs["Q4_0"]
    ref = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    engine = specdesk.load(str(path), str(draft_ggufs[0]), device="cpu")
    for prompt in PROMPTS[:2]:
        ids = engine.encode(prompt)
        with torch.inference_mode():
            out = ref.generate(torch.tensor([ids]), max_new_tokens=24, min_new_tokens=24, do_sample=False,
                               eos_token_id=None, pad_token_id=0)
        expected = out[0, len(ids):].tolist()
        for drafter, k in (("none", 4), ("ngram", 4), ("model", 3), ("model", "auto")):
            got = engine.generate(ids, max_new_tokens=24, k=k, drafter=drafter)
            # EOS may end ours early; the reference ran on regardless, so compare the common prefix
            assert got.token_ids == expected[:len(got.token_ids)], (drafter, k, prompt)
            assert len(got.token_ids) == 24 or got.stop_reason == "eos"


def test_gguf_drafts_are_checked_like_any_other(ggufs, draft_ggufs):
    import specdesk
    from specdesk.core.discovery import describe_gguf, drafts_for
    from specdesk.core.errors import IncompatibleDraft

    good, odd = draft_ggufs
    target = ggufs["Q8_0"]
    entries = [describe_gguf(p, str(p), "added") for p in (good, odd)]
    rows = {c.entry.path: c for c in drafts_for(str(target), entries)}
    assert rows[str(good)].compatible
    assert not rows[str(odd)].compatible and "token id 500" in rows[str(odd)].reason
    with pytest.raises(IncompatibleDraft, match=r"incompatible draft: token id 500 is .* in tiny-Q8_0.gguf but .* in "
                                                r"odd-draft-Q8_0.gguf"):
        specdesk.load(str(target), str(odd), device="cpu")


def test_models_lists_lmstudio_ollama_and_llamacpp_files(ggufs, gguf_dir, tiny_target, tmp_path):
    home = tmp_path / "home"
    lms = lmstudio_layout(home, ggufs["Q8_0"])
    shutil.copy(ggufs["F16"], lms.parent / "mmproj-tiny-F16.gguf")  # a projector: not a model
    (lms.parent / "README.md").write_text("not a model")
    write_gguf(tiny_target, lms.parent.parent / "odd-GGUF" / "odd.gguf", "F32", arch="bitnet-x")
    cut = lms.parent.parent / "cut-GGUF" / "cut.gguf"
    cut.parent.mkdir()
    cut.write_bytes(ggufs["Q4_0"].read_bytes()[:-1000])  # an interrupted download
    ollama = tmp_path / "ollama"
    ollama_layout(ollama, ggufs["Q4_0"], "tiny", "q4", projector=ggufs["F16"])
    older = home / ".cache" / "lm-studio" / "models" / "acme" / "tiny-F32" / "tiny-F32.gguf"  # LM Studio < 0.3
    older.parent.mkdir(parents=True)
    shutil.copy(ggufs["F32"], older)
    llamacpp = tmp_path / "llamacpp"
    llamacpp.mkdir()
    shutil.copy(ggufs["F16"], llamacpp / "acme_tiny-GGUF_tiny-F16.gguf")
    env = {"HOME": str(home), "OLLAMA_MODELS": str(ollama), "LLAMA_CACHE": str(llamacpp),
           "SPECDESK_CONFIG_DIR": str(tmp_path / "cfg"), "HF_HUB_CACHE": str(tmp_path / "no-hub")}
    # side by side: the listing, the planner on the Ollama model (from its header alone), and a generation with it
    r, plan, gen = specdesk_side_by_side(
        ["models", "--json"],
        ["plan", "--target", "ollama:tiny:q4", "--json", "--budget-gib", "1", "--device", "cpu"],
        ["generate", "--target", "ollama:tiny:q4", "--prompt", "x = 1", "--max-new-tokens", "4", "--json"],
        env_extra=env)
    assert r.returncode == 0, r.stderr
    rows = {e["name"]: e for e in json.loads(r.stdout)}
    lm = rows[str(lms)]
    assert lm["source"] == "lmstudio" and lm["usable"] and lm["format"] == "gguf"
    assert (lm["architecture"], lm["dtype"], lm["context_length"], lm["chat_template"]) == ("llama", "Q8_0", 1024, True)
    tl = rows["ollama:tiny:q4"]
    assert tl["source"] == "ollama" and tl["usable"] and tl["dtype"] == "Q4_0" and tl["params"] == lm["params"]
    assert rows[str(llamacpp / "acme_tiny-GGUF_tiny-F16.gguf")]["source"] == "llama.cpp"
    assert rows[str(older)]["source"] == "lmstudio" and rows[str(older)]["dtype"] == "F32"
    assert not any("mmproj" in name for name in rows)
    odd = rows[str(lms.parent.parent / "odd-GGUF" / "odd.gguf")]
    assert not odd["usable"] and "architecture 'bitnet-x' cannot be loaded from GGUF by transformers" in odd["reason"]
    assert not rows[str(cut)]["usable"] and "truncated" in rows[str(cut)]["reason"]
    from specdesk.core.models.gguf import inspect_gguf

    assert lm["params"] == inspect_gguf(ggufs["Q8_0"]).params
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["target"]["params"] == lm["params"]
    assert gen.returncode == 0, gen.stderr
    assert len(json.loads(gen.stdout)["token_ids"]) == 4


def test_generate_applies_the_chat_template(ggufs, tmp_path, capsys):
    from specdesk.core.sessionlog import read_log
    from specdesk.core.loading import load_tokenizer
    from specdesk.core.models.convert import tokenizer_folder

    path = ggufs["Q8_0"]
    tok = load_tokenizer(tokenizer_folder(path))
    log = tmp_path / "chat.jsonl"
    base = ("generate", "--target", str(path), "--drafter", "ngram", "--max-new-tokens", "3", "--json")
    r = specdesk(*base, "--prompt", "def f(x):", "--system", "Be brief.", "--log", str(log))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    expected = tok.apply_chat_template([{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "def f(x):"}], add_generation_prompt=True,
                                       tokenize=True)
    expected = expected["input_ids"] if hasattr(expected, "keys") else expected
    assert out["chat_template"] is True and out["stats"]["prompt_tokens"] == len(expected)
    gen = read_log(log).generations[0].info
    assert gen["chat_template"] is True and gen["system"] == "Be brief." and gen["prompt_tokens"] == len(expected)
    # the other cases in this process (the converted model is cached: no second conversion)
    from specdesk.cli import main

    assert main([*base, "--prompt", "def f(x):", "--raw"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["chat_template"] is False and out["stats"]["prompt_tokens"] == len(tok("def f(x):")["input_ids"])
    assert main(["generate", "--target", str(ggufs["F32"]), "--drafter", "none", "--prompt", "x", "--system", "hi"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "specdesk: error: tiny-F32.gguf has no chat template, so it takes no system message"]


def _broken(kind: str, tmp: Path, tiny_target: Path, ggufs: dict) -> Path:
    if kind in ("truncated safetensors", "empty safetensors", "no tokenizer"):
        folder = tmp / kind.replace(" ", "-")
        shutil.copytree(tiny_target, folder)
        weights = folder / "model.safetensors"
        if kind == "truncated safetensors":
            weights.write_bytes(weights.read_bytes()[:-4096])
        elif kind == "empty safetensors":
            weights.write_bytes(b"")
        else:
            for f in ("tokenizer.json", "tokenizer_config.json"):
                (folder / f).unlink()
        return folder
    if kind == "truncated gguf":
        cut = tmp / "cut.gguf"
        cut.write_bytes(ggufs["Q8_0"].read_bytes()[:-5000])
        return cut
    if kind == "split gguf":
        return write_gguf(tiny_target, tmp / "tiny-00001-of-00002.gguf", "F16",
                          extra={"split.no": 0, "split.count": 2})
    return write_gguf(tiny_target, tmp / "bitnet.gguf", "F32", arch="bitnet-x")


BROKEN = [
    ("truncated safetensors", "truncated"),
    ("empty safetensors", "empty"),
    ("truncated gguf", "truncated"),
    ("split gguf", "split into 2 parts"),
    ("unsupported architecture", "architecture 'bitnet-x'"),
    ("no tokenizer", "no tokenizer"),
]


def test_broken_files_are_one_line_exit_2(tmp_path, tiny_target, ggufs):
    """Each in its own process (so nothing a library prints once per process hides), run side by side."""
    targets = [_broken(kind, tmp_path, tiny_target, ggufs) for kind, _ in BROKEN]
    done = specdesk_side_by_side(*(["generate", "--target", str(t), "--drafter", "none", "--prompt", "x"]
                                   for t in targets))
    for (kind, needle), r in zip(BROKEN, done):
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and not r.stdout, (kind, r.stderr)
        assert lines[0].startswith("specdesk: error: ") and needle in lines[0], (kind, lines[0])


def test_a_conversion_the_disk_cannot_hold_is_refused_before_writing(ggufs, tmp_path, monkeypatch, capsys):
    """The disk is made to look nearly full (the standard library's reading, not our code, is replaced): the
    first load refuses in one line naming the need and the free space, and writes nothing into the cache."""
    from specdesk.cli import main

    cache = tmp_path / "cache"
    monkeypatch.setenv("SPECDESK_CACHE_DIR", str(cache))
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=2 * 2**20))
    assert main(["generate", "--target", str(ggufs["F16"]), "--drafter", "none", "--prompt", "x"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specdesk: error: not enough disk space to convert tiny-F16.gguf")
    assert "2.0 MiB is free" in lines[0] and "SPECDESK_CACHE_DIR" in lines[0]
    assert not cache.exists() or not any(p.is_file() for p in cache.rglob("*"))
    monkeypatch.setattr(shutil, "disk_usage", real)  # with the real free space the same load converts
    assert main(["generate", "--target", str(ggufs["F16"]), "--drafter", "none", "--prompt", "x",
                 "--max-new-tokens", "2"]) == 0
    assert any(p.name.endswith(".safetensors") for p in cache.rglob("*"))
