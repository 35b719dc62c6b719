"""`specdesk export vllm` and `specdesk plan --gpus`: the vLLM command, its speculative config, the parallel split
(from config.json alone), vLLM's limits, and k from the pair's session logs."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from specdesk.cli import main
from specdesk.core.events import DoneEvent, GenerationStats, StepEvent
from specdesk.core.plan import analyze
from specdesk.core.plan.bestk import best_k
from specdesk.core.plan.parallel import choose_parallel
from specdesk.core.plan.vllm import export_vllm
from specdesk.core.sessionlog import SessionLogWriter

CONFIGS = Path(__file__).resolve().parent / "data" / "configs"
GiB = 2**30
# SpeculativeConfig's fields in vLLM 0.32.0 (vllm/config/speculative.py) that specdesk may write
VLLM_SPEC_KEYS = {"method", "model", "num_speculative_tokens", "draft_tensor_parallel_size", "quantization",
                  "max_model_len", "prompt_lookup_max", "prompt_lookup_min"}


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("vllm-pair")
    out = []
    for name in ("llama-3.1-8b", "llama-3.2-1b"):
        (root / name).mkdir()
        shutil.copy(CONFIGS / f"{name}.json", root / name / "config.json")
        out.append(root / name)
    return out[0], out[1]


def _spec(cmd) -> dict:
    argv = list(cmd.argv)
    return json.loads(argv[argv.index("--speculative-config") + 1])


def test_demo_pair_command(tmp_path):
    cmd, p, par = export_vllm("demo-target", budget_bytes_per_gpu=24 * GiB, logs_dir=tmp_path)
    assert cmd.argv[:3] == ("vllm", "serve", p.target.path)
    spec = _spec(cmd)
    assert set(spec) <= VLLM_SPEC_KEYS
    assert spec["method"] == "draft_model" and Path(spec["model"]).name == "demo-draft"
    assert spec["num_speculative_tokens"] == 4 and "no session logs" in cmd.k_source
    assert spec["draft_tensor_parallel_size"] == 1 and par.tensor_parallel == 1
    assert "--quantization" not in cmd.argv and "--per-request-spec-decode-metrics" in cmd.argv
    assert cmd.shell().startswith("vllm serve ") and "\\\n    --speculative-config '" in cmd.shell()


def test_quantization_parallelism_and_limits_from_config_only(llama, tmp_path):
    target, draft = llama
    cmd, p, par = export_vllm(str(target), str(draft), target_quant="int8", gpus=4, budget_bytes_per_gpu=12 * GiB,
                              context=8192, logs_dir=tmp_path)
    argv = list(cmd.argv)
    assert argv[argv.index("--quantization") + 1] == "bitsandbytes"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "4" and "--pipeline-parallel-size" not in argv
    assert argv[argv.index("--max-model-len") + 1] == "8192"
    assert any("NF4" in x and "int8" in x for x in cmd.limits)
    assert any("1 or the target's (4)" in x for x in cmd.limits)
    # every GPU holds a quarter of the target's weights and KV cache (8 KV heads >= TP 4); the draft sits on GPU 0
    s0, s1 = par.shares[0], par.shares[1]
    assert s1.target_weights == pytest.approx(p.target.weight_bytes / 4, abs=1)
    assert s1.target_kv == pytest.approx(p.target.kv_bytes / 4, abs=1)
    assert s0.draft_weights == p.draft.weight_bytes and s1.draft_weights == 0
    # six GPUs: 32 heads split by 2, the rest as three pipeline stages; n-gram drafting
    cmd6, p6, par6 = export_vllm(str(target), drafter="ngram", gpus=6, budget_bytes_per_gpu=12 * GiB,
                                 logs_dir=tmp_path, k=5)
    assert (par6.tensor_parallel, par6.pipeline_parallel) == (2, 3)
    assert _spec(cmd6) == {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4,
                           "prompt_lookup_min": 2}
    # sixteen GPUs: more than the 8 KV heads, so each GPU keeps one head's replica (1/8 of the cache, not 1/16)
    _, p16, par16 = export_vllm(str(target), drafter="none", gpus=16, budget_bytes_per_gpu=12 * GiB,
                                logs_dir=tmp_path)
    assert par16.tensor_parallel == 16
    assert par16.shares[3].target_kv == pytest.approx(p16.target.kv_bytes / 8, abs=1)


def test_prequantized_bitsandbytes_gets_pipeline_parallelism_only(llama):
    a = dataclasses.replace(analyze(llama[0]), prequantized="bitsandbytes")
    tp, pp, notes = choose_parallel(a, 4)
    assert (tp, pp) == (1, 4) and "pipeline parallelism only" in notes[0]


def _log_generation(w: SessionLogWriter, k, tokens: int, seconds: float, drafter: str = "model") -> None:
    w.begin("x", {"k": k}, drafter, 1)
    w.event(StepEvent(index=0, token_ids=(1,) * tokens, drafted=3, accepted=2, k=3 if k == "auto" else k,
                      draft_s=0, verify_s=0, step_s=seconds, elapsed_s=seconds, context_len=tokens + 1))
    w.event(DoneEvent(token_ids=(1,) * tokens, text="", stop_reason="max_new_tokens",
                      stats=GenerationStats(prompt_tokens=1, new_tokens=tokens, decode_seconds=seconds)))


def test_k_comes_from_the_pairs_session_logs(tmp_path):
    import specdesk.core.loading as loading

    models = loading.bundled_models_dir()
    info = {"target": {"path": str(models / "demo-target")}, "draft": {"path": str(models / "demo-draft")}}
    with SessionLogWriter(tmp_path / "a.jsonl", info) as w:
        _log_generation(w, 2, 100, 1.0)   # 100 tok/s
        _log_generation(w, 5, 150, 1.0)   # 150 tok/s: the best
        _log_generation(w, 5, 30, 1.0)    # (k=5 overall: 180 / 2 s = 90 tok/s... see below)
        _log_generation(w, 7, 10, 0.01)   # too few tokens to rank
        _log_generation(w, 3, 500, 1.0, drafter="ngram")  # another drafter: not this pair's
    with SessionLogWriter(tmp_path / "other.jsonl", {"target": {"path": "/elsewhere"}, "draft": None}) as w:
        _log_generation(w, 6, 1000, 1.0)
    b = best_k(models / "demo-target", "model", models / "demo-draft", tmp_path)
    assert b.tokens_per_second == {2: 100.0, 5: 90.0}
    assert b.k == 2 and "k=2" in b.source
    cmd, _, _ = export_vllm("demo-target", budget_bytes_per_gpu=24 * GiB, logs_dir=tmp_path)
    assert _spec(cmd)["num_speculative_tokens"] == 2 and cmd.k_source == b.source
    # only adaptive runs: their mean k
    auto = tmp_path / "auto"
    with SessionLogWriter(auto / "b.jsonl", info) as w:
        _log_generation(w, "auto", 50, 1.0)
    assert best_k(models / "demo-target", "model", models / "demo-draft", auto).k == 3


def test_cli_export_and_plan_gpus(llama, capsys):
    target, draft = llama
    assert main(["export", "vllm", "--target", str(target), "--draft", str(draft), "--gpus", "2", "--budget-gib",
                 "10", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tensor_parallel_size"] == 2 and out["parallel"]["gpus"] == 2
    assert set(out["speculative_config"]) <= VLLM_SPEC_KEYS
    assert main(["export", "vllm", "--target", str(target), "--drafter", "ngram", "--budget-gib", "24"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("vllm serve ") and '"method": "ngram"' in text and "vLLM 0.32.0" in text
    assert main(["plan", "--target", str(target), "--draft", str(draft), "--target-quant", "nf4", "--device", "cuda",
                 "--budget-gib", "8", "--gpus", "2", "--context", "8192"]) == 0
    text = capsys.readouterr().out
    assert "tensor parallel 2" in text and "GPU 1:" in text
    assert main(["export", "vllm", "--target", str(target), "--gpus", "0", "--budget-gib", "8"]) == 2
    assert "--gpus" in capsys.readouterr().err


def test_a_pair_drafting_with_the_targets_phrases_serves_with_vllms_prompt_lookup(tmp_path):
    """vLLM has no table of the target's phrases: the command drafts with its ngram method and says why."""
    from specdesk.core import phrases

    draft = Path(shutil.copytree(Path(__file__).resolve().parent.parent / "resources/models/demo-draft",
                                 tmp_path / "draft-with-table"))
    phrases.build([([1, 2], [5, 6, 7, 8] * 4)] * 8).save(draft / phrases.FILE)
    cmd, p, _ = export_vllm("demo-target", str(draft), drafter="phrases", budget_bytes_per_gpu=24 * GiB,
                            logs_dir=tmp_path)
    assert p.drafter == "phrases" and p.draft is None
    assert _spec(cmd)["method"] == "ngram" and any("no table of the target's phrases" in n for n in cmd.notes)
