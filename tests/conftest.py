"""Shared fixtures: tiny real models built on disk (no downloads), and the real Qt platform offscreen."""

from __future__ import annotations

import atexit
import functools
import gc
import json
import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# OpenMP threads that spin long while they wait made torch several times slower whenever another process shared the
# 2 cores (seen here: the sampling tests stalled for minutes beside one niced job), and threads that never spin
# (OMP_WAIT_POLICY=PASSIVE, used before) made the suite's compute 12-18% slower on a quiet 2-core AMD Zen 3 (the
# tree and sampling tests 94-101 s against 79-86; writing prompts with SmolLM2 in float32 1.6x slower): a short spin
# (libgomp's default is 300,000 rounds) before sleeping. Set before torch (and its OpenMP runtime) loads; subprocesses
# inherit it.
os.environ.setdefault("GOMP_SPINCOUNT", "20000")
# Generations record their memory peaks (specdesk.core.plan.history): keep the suite's out of the user's data dir.
if "SPECDESK_DATA_DIR" not in os.environ:
    os.environ["SPECDESK_DATA_DIR"] = tempfile.mkdtemp(prefix="specdesk-test-data-")
    atexit.register(shutil.rmtree, os.environ["SPECDESK_DATA_DIR"], True)
# Windows save their size, splitters and settings (specdesk.core.userdirs): never into the user's config dir.
if "SPECDESK_CONFIG_DIR" not in os.environ:
    os.environ["SPECDESK_CONFIG_DIR"] = tempfile.mkdtemp(prefix="specdesk-test-config-")
    atexit.register(shutil.rmtree, os.environ["SPECDESK_CONFIG_DIR"], True)
# GGUF files the tests load are converted into a cache of the suite's own, not the user's.
if "SPECDESK_CACHE_DIR" not in os.environ:
    os.environ["SPECDESK_CACHE_DIR"] = tempfile.mkdtemp(prefix="specdesk-test-cache-")
    atexit.register(shutil.rmtree, os.environ["SPECDESK_CACHE_DIR"], True)

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "resources" / "models"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def specdesk_side_by_side(*runs: list[str], timeout: float = 300, env_extra: dict | None = None):
    """``python -m specdesk ARGS`` for each ARGS at once, one thread each (each process spends seconds importing
    and loading: on 2 cores two of them take about the time of one). Returns subprocess.CompletedProcess in order."""
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env_extra or {})}
    procs = [subprocess.Popen([sys.executable, "-m", "specdesk", *args], cwd=ROOT, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for args in runs]
    done = []
    for args, p in zip(runs, procs):
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        done.append(subprocess.CompletedProcess(args, p.returncode, out, err))
    return done


def copy_demo_tokenizer(dest: Path) -> None:
    for name in TOKENIZER_FILES:
        shutil.copy(DEMO / "demo-target" / name, dest / name)


def swapped_token_copy(model: Path, dest: Path, a: int = 500, b: int = 501) -> Path:
    """A copy of ``model`` whose tokenizer swaps the ids of two tokens: an incompatible draft."""
    shutil.copytree(model, dest)
    data = json.loads((dest / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    by_id = {i: t for t, i in vocab.items()}
    vocab[by_id[a]], vocab[by_id[b]] = b, a
    (dest / "tokenizer.json").write_text(json.dumps(data))
    return dest


def make_llama(dest: Path, *, hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
               intermediate: int = 128, seed: int = 0, vocab_rows: int = 4096, init_std: float = 0.2,
               arch: str = "llama", tokenizer: str = "demo", eos: int | None = 0, tie: bool = True, **extra) -> Path:
    """A small randomly initialised causal LM saved as a Hugging Face folder with the demo tokenizer.

    ``init_std`` is larger than usual so random models have peaked next-token distributions (near-ties
    in argmax would make greedy parity hinge on last-bit rounding, which is not what the tests are about).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    dest.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    cfg = AutoConfig.for_model(arch, vocab_size=vocab_rows, hidden_size=hidden, num_hidden_layers=layers,
                               num_attention_heads=heads, num_key_value_heads=kv_heads,
                               intermediate_size=intermediate, max_position_embeddings=1024,
                               initializer_range=init_std, tie_word_embeddings=tie,
                               bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, **extra)
    model = AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(dest)
    GenerationConfig(eos_token_id=eos, bos_token_id=eos, pad_token_id=eos).save_pretrained(dest)
    if tokenizer == "demo":
        copy_demo_tokenizer(dest)
    return dest


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def tiny_target(models_dir) -> Path:
    return make_llama(models_dir / "tiny-target", hidden=64, layers=2, seed=1)


@pytest.fixture(scope="session")
def tiny_draft(models_dir) -> Path:
    return make_llama(models_dir / "tiny-draft", hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64, seed=2)


@pytest.fixture(scope="session")
def tiny_target_copy(models_dir, tiny_target) -> Path:
    dest = models_dir / "tiny-target-copy"
    shutil.copytree(tiny_target, dest)
    return dest


@pytest.fixture(scope="session")
def tiny_engine(tiny_target, tiny_draft):
    import specdesk

    return specdesk.load(str(tiny_target), str(tiny_draft), device="cpu")


PROMPTS = [
    "def fibonacci(n):\n    ",
    "import os\nimport sys\n\nclass Config:\n    def __init__(self, path):\n        self.path = path\n",
    "for i in range(10):\n    print(i)\nfor i in range(10):\n    print(",
    "# A docstring follows\n",
]


@functools.lru_cache(maxsize=None)
def _uses_qt(module_file: str) -> bool:
    text = Path(module_file).read_text(errors="replace")
    return any(word in text for word in ("PySide6", "specdesk.qt", "qtbot", "qapp"))


@pytest.fixture(autouse=True)
def _collect_garbage_on_the_main_thread(request):
    """Collect each Qt test's garbage here, on the main thread: left for later, Qt objects of a GUI test were
    collected by whichever thread next triggered a collection (a model-loading worker thread), which can crash
    Qt (one segfault seen in a clean-clone CI run, inside the screenshot test's loader thread). Only after tests in
    modules that use Qt: with the suite's models loaded a full collection takes ~0.2 s, ~2 minutes of the suite
    when it ran after every test."""
    yield
    if _uses_qt(str(request.node.fspath)):
        gc.collect()


def held_tensors(model) -> dict:
    """Every tensor a model holds, by name: parameters, buffers (the rotary frequencies too) and the q/k/v and
    gate/up layers that int4.quantize_model joins (not submodules), to compare two loads bit for bit."""
    from specdesk.core import int4

    out = dict([*model.named_parameters(), *model.named_buffers()])
    for name, module in model.named_modules():
        joined = int4.fused(module)
        if joined is not None:
            out[f"{name}.<joined>.packed"], out[f"{name}.<joined>.scales"] = joined.packed, joined.scales_zeros
    return out


def differing_tensors(a: dict, b: dict) -> list[str]:
    """The names whose tensors differ in dtype, shape or any bit (or that only one side has)."""
    import torch

    return sorted((a.keys() ^ b.keys()) | {k for k in a.keys() & b.keys() if a[k].dtype != b[k].dtype
                                            or a[k].shape != b[k].shape or not torch.equal(a[k], b[k])})
