"""`specdesk plan` (JSON and text), its one-line errors, the CUDA check script, and peaks recorded by generate."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specdesk.cli import main

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"


@pytest.fixture(autouse=True)
def private_history(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDESK_DATA_DIR", str(tmp_path / "data"))


def plan_json(capsys, *args) -> dict:
    rc = main(["plan", *args, "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def test_json_has_the_documented_keys(capsys):
    d = plan_json(capsys, "--target", "demo-target", "--draft", "demo-draft", "--budget-gib", "2", "--device", "cpu")
    for role in ("target", "draft"):
        assert d[role]["params"] > 0 and d[role]["weight_bytes"] > 0 and d[role]["kv_bytes"] > 0
    assert d["budget_bytes"] == 2 * 2**30 and d["fits"] is True and d["max_context"] == 2048
    assert d["total_bytes"] > d["target"]["weight_bytes"] + d["draft"]["weight_bytes"]
    recs = d["recommendations"]
    assert recs[0]["rank"] == 1 and recs[0]["reason"] and {"ngram", "none"} <= {r["drafter"] for r in recs}


def test_config_only_target_planned_before_download(capsys, tmp_path):
    folder = tmp_path / "Meta-Llama-3.1-8B"
    folder.mkdir()
    shutil.copy(CONFIGS / "llama-3.1-8b.json", folder / "config.json")
    d = plan_json(capsys, "--target", str(folder), "--drafter", "ngram", "--device", "cuda", "--budget-gib", "24",
                  "--target-quant", "nf4", "--double-quant", "--context", "16384")
    assert d["target"]["params"] == 8_030_261_248 and d["draft"] is None
    assert d["target"]["quant"] == "nf4+dq" and d["fits"] is True
    assert d["target"]["source"].startswith("config.json")


def test_text_output_explains_the_breakdown(capsys):
    rc = main(["plan", "--budget-gib", "1", "--device", "cpu", "--context", "1024"])
    out = capsys.readouterr().out
    assert rc == 0
    for needle in ("target demo-target", "draft demo-draft", "KV cache: 1030 positions", "verify logits",
                   "largest context that fits", "configurations that fit, best first", "--target-quant none",
                   "fits:"):
        assert needle in out, needle


def test_not_fitting_is_not_an_error(capsys):
    d = plan_json(capsys, "--budget-gib", "0.1", "--device", "cpu")
    assert d["fits"] is False and d["max_context"] == 0 and d["recommendations"] == []


def _unknown(folder: Path, weights: bool) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "mystery", "num_hidden_layers": 1,
                                                    "num_attention_heads": 2, "hidden_size": 16}))
    if weights:
        import torch
        from safetensors.torch import save_file

        save_file({"emb.weight": torch.zeros(50, 16), "layer.0.proj.weight": torch.zeros(16, 16)},
                  str(folder / "model.safetensors"))
    return folder


def test_unknown_architecture_with_weights_is_marked_estimated(capsys, tmp_path):
    d = plan_json(capsys, "--target", str(_unknown(tmp_path / "m", True)), "--drafter", "none", "--budget-gib", "1",
                  "--device", "cpu", "--context", "128")
    assert d["target"]["estimated"] is True and "unknown architecture" in d["target"]["source"]
    assert d["target"]["params"] == 50 * 16 + 16 * 16


@pytest.mark.parametrize("make,args,needle", [
    (lambda p: p, [], "not a model folder"),
    (lambda p: _unknown(p / "u", False), ["--drafter", "none"], "unknown to transformers"),
    (None, ["--budget-gib=0"], "budget must be positive"),
    (None, ["--budget-gib=-3"], "budget must be positive"),
    (None, ["--context", "0", "--budget-gib", "1"], "context must be a positive"),
    (None, ["--context", "abc"], "invalid int value"),
    (None, ["--drafter", "ngram", "--draft", "demo-draft", "--budget-gib", "1"], "contradict"),
    (None, ["--device", "cuda", "--drafter", "none"], "give the budget with --budget-gib"),
    (None, ["--target", "/no/such/model", "--budget-gib", "1"], "no such model folder"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, make, args, needle):
    argv = ["plan", *args]
    if make is not None:
        argv += ["--target", str(make(tmp_path)), "--budget-gib", "1", "--device", "cpu"]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("specdesk: error: ") and needle in err and err.count("\n") == 1


# ----------------------------------------------------------------------------- devscripts/cuda_check_plan.py

def _check_script():
    spec = importlib.util.spec_from_file_location("cuda_check_plan", ROOT / "devscripts" / "cuda_check_plan.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cuda_check_exits_cleanly_without_cuda():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, str(ROOT / "devscripts" / "cuda_check_plan.py"), "--context", "256"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert "skipped" in r.stdout and "CUDA" in r.stdout


def test_cuda_check_steps_run_on_the_cpu(tiny_target, tiny_draft):
    """The script's measuring code, on the CPU: weights and KV must agree exactly."""
    mod = _check_script()
    args = mod.parse_args(["--target", str(tiny_target), "--draft", str(tiny_draft), "--device", "cpu",
                           "--context", "96", "--new-tokens", "8", "--k", "3"])
    report = mod.run_check(args)
    rows = {r["what"].split(" (")[0]: r for r in report["rows"]}
    assert report["ok"] and report["new_tokens"] == 8
    for what in ("target weights", "target KV at the length reached", "draft weights"):
        assert rows[what]["predicted"] == rows[what]["measured"], what
    assert rows["total"]["tolerance"] is None  # peak RSS on the CPU is reported, not judged


# ----------------------------------------------------------------------------- generate records its peak

def test_generate_records_the_peak_for_the_planner(capsys, tiny_target, tiny_draft):
    from specdesk.core.plan import load_measurements, plan

    rc = main(["generate", "--target", str(tiny_target), "--draft", str(tiny_draft), "--prompt", "def f(x):",
               "--max-new-tokens", "6", "--json", "--device", "cpu"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    records = load_measurements()
    assert len(records) == 1
    m = records[0]
    context = out["stats"]["prompt_tokens"] + 6
    assert m.kind == "cpu_peak_rss" and m.context == context and m.peak_bytes > 50 * 2**20
    assert m.target == str(Path(tiny_target).resolve()) and m.draft == str(Path(tiny_draft).resolve())
    p = plan(str(tiny_target), str(tiny_draft), device="cpu", context=context, budget_bytes=2**33, recommend=False,
             target_quant="auto", draft_quant="auto")  # as generate resolves its defaults
    assert p.measured == m and p.measured_bytes == m.peak_bytes
