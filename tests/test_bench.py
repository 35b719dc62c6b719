"""`specdesk bench`: the suite, the theory, and a real (tiny) run with exactness checked per prompt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from specdesk.commands.bench import speedup_series
from specdesk.core.bench.analysis import Row, analyse, expected_tokens, goals, held_out_best_k
from specdesk.core.bench.runner import Run
from specdesk.core.bench.suite import CATEGORIES, build_suite

ROOT = Path(__file__).resolve().parent.parent


def test_expected_tokens_formula():
    assert expected_tokens(0.0, 4) == 1.0
    assert expected_tokens(1.0, 4) == 5.0
    assert abs(expected_tokens(0.5, 2) - 1.75) < 1e-12  # 1 + 0.5 + 0.25


def test_suite_has_every_category_from_held_out_modules():
    suite = build_suite(2, chat=True)
    assert {p.category for p in suite} == set(CATEGORIES)
    assert {p.category for p in build_suite(2)} == set(CATEGORIES) - {"chat", "chat-free"}
    assert all(p.text for p in suite)
    editing = [p for p in suite if p.category == "editing"]
    assert all("_v2(" in p.text.splitlines()[-1] for p in editing)  # a renamed copy starts at the end


def _run(method, k, prompt, rep, new, decode_s, forwards=None, drafted=0, accepted=0, draft_s=0.0, verify_s=0.0,
         succ=0.0, trials=0.0, ids=(1, 2, 3)):
    return Run(category="completion", prompt=prompt, method=method, kind="specdesk", k=k, temperature=0.0,
               repeat=rep, new_tokens=new, wall_s=decode_s * 1.1, decode_s=decode_s, forwards=forwards or new,
               drafted=drafted, accepted=accepted, draft_s=draft_s, verify_s=verify_s, successes=succ,
               trials=trials, token_ids=ids)


def test_prediction_and_efficiency_from_measured_costs():
    # plain: 10 ms per token. draft k=2: a = 0.5, draft 1 ms/token, verify 12 ms per pass.
    runs = [_run("plain", 0, "p", 0, 100, 1.0)]
    e = expected_tokens(0.5, 2)
    forwards = 57
    runs.append(_run("draft k=2", 2, "p", 0, 100, 0.8, forwards=forwards, drafted=2 * forwards, accepted=43,
                     draft_s=0.002 * forwards, verify_s=0.012 * forwards, succ=50, trials=100))
    row = next(r for r in analyse(runs) if r.method == "draft k=2")
    predicted = e * 0.010 / (2 * 0.001 + 0.012)
    assert abs(row.predicted_speedup - predicted) < 1e-9
    assert abs(row.speedup - 1.25) < 1e-9 and abs(row.efficiency - 1.25 / predicted) < 1e-9
    assert row.identical == "1/1" and abs(row.alpha - 0.5) < 1e-12


def test_held_out_best_k_picks_k_on_the_other_repeats():
    """k=1 and k=2 are equally fast on average, but each wins one repeat by luck: the k picked on one repeat
    is the unlucky one on the other, which is what choosing k in advance gets."""
    runs = []
    # decode seconds for 100 tokens; plain 1.0 s. repeat 0: k=1 lucky; repeat 1: k=2 lucky; auto always 0.8
    times = {0: {"draft k=1": 0.72, "draft k=2": 0.88}, 1: {"draft k=1": 0.88, "draft k=2": 0.72}}
    for rep, by_method in times.items():
        runs.append(_run("plain", 0, "p", rep, 100, 1.0))
        runs.append(_run("draft k=auto", "auto", "p", rep, 100, 0.8))
        for method, t in by_method.items():
            runs.append(_run(method, int(method[-1]), "p", rep, 100, t))
    held = held_out_best_k(runs)
    # repeat 0 held out: k=2 won repeat 1, and on repeat 0 auto/k=2 = 0.88/0.8; the same the other way round
    assert abs(held["completion"] - 0.88 / 0.8) < 1e-9
    goal = next(g for g in goals(analyse(runs), runs) if g.name.startswith("adaptive k vs best"))
    # the goal is judged on the in-sample measure: the median speed-ups (1.25x auto, 1.26x for either k)
    assert goal.measured.startswith("worst 0.99 (") and "other repeats: worst 1.10" in goal.measured and goal.met
    assert held_out_best_k([r for r in runs if r.repeat == 0]) == {}  # one repeat: nothing to hold out


def test_bench_runs_end_to_end_on_a_tiny_pair(tiny_target, tiny_draft, tmp_path):
    out = tmp_path / "bench.json"
    md = tmp_path / "bench.md"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # as stored (float32): transformers' generation runs beside specdesk's only on float models
    r = subprocess.run([sys.executable, "-m", "specdesk", "bench", "--target", str(tiny_target), "--draft",
                        str(tiny_draft), "--target-quant", "none", "--draft-quant", "none", "--quick", "--repeats",
                        "1", "--categories", "editing,prose",
                        "--json", str(out), "--markdown", str(md), "--plot", str(tmp_path / "bench.png")],
                       cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(out.read_text())
    methods = {row["method"] for row in data["rows"]}
    assert {"plain", "draft k=2", "draft k=4", "draft k=auto", "lookup k=4", "hf-assisted k=4",
            "hf-lookup k=4"} <= methods
    for row in data["rows"]:
        if row["temperature"] == 0.0 and row["method"] != "plain":
            n, m = row["identical"].split("/")
            assert n == m, row  # every greedy method reproduces plain decoding exactly, HF's included
    assert any(g["name"].startswith("efficiency") for g in data["goals"])
    assert "| plain |" in md.read_text()
    assert data["meta"]["loaded"] == {"target": "none, float32", "draft": "none, float32"}
    assert "Loaded as: target [none, float32]; draft [none, float32]." in md.read_text()
    from specdesk.hw.cpu import cpu_name

    assert data["meta"]["cpu"].startswith(cpu_name()) and f"CPU: {cpu_name()}" in md.read_text()  # figures name it
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _row(method, kind="specdesk", k="0", speedup=None, steady=None, temperature=0.0):
    return Row(category="editing", temperature=temperature, method=method, kind=kind, k=k, runs=1,
               tokens_per_s=1.0, wall_tokens_per_s=1.0, steady_tokens_per_s=steady, speedup=speedup,
               wall_speedup=None, acceptance_rate=None, alpha=None, mean_accepted_length=None,
               predicted_speedup=None, efficiency=None, identical=None, mean_k=None)


def test_plot_series_take_each_family_at_its_best_k():
    rows = [_row("plain", speedup=1.0, steady=50.0), _row("draft k=2", k="2", speedup=1.5),
            _row("draft k=4", k="4", speedup=1.7), _row("draft k=auto", k="auto", speedup=1.6),
            _row("lookup k=4", k="4", speedup=2.0), _row("lookup k=auto", k="auto", speedup=2.5),
            _row("hf-assisted k=2", "hf-assisted", "2", steady=60.0),
            _row("hf-assisted k=4", "hf-assisted", "4", steady=70.0),
            _row("hf-lookup k=4", "hf-lookup", "4", steady=55.0),
            _row("draft k=8", k="8", speedup=9.0, temperature=0.7)]  # sampled rows are not plotted
    cats, series = speedup_series(rows)
    assert cats == ["editing"]
    got = {name: round(v[0], 6) for name, v in series.items()}
    assert got == {"best fixed k": 1.7, "adaptive k": 1.6, "prompt lookup (best k)": 2.5,
                   "transformers assisted (best k)": 1.4, "transformers lookup": 1.1}


def test_bench_rejects_bad_options():
    r = subprocess.run([sys.executable, "-m", "specdesk", "bench", "--categories", "poetry"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown category" in r.stderr
    r = subprocess.run([sys.executable, "-m", "specdesk", "bench", "--lookup-k", "0"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--lookup-k must be between 1 and 16" in r.stderr
    assert goals([]) == []  # no rows: no goals, no crash


def test_bench_outputs_that_cannot_be_written_fail_before_the_run(tmp_path):
    """A folder, or a place no file can be made, as --json / --markdown / --plot: one line before anything runs
    (they failed after the whole bench, or, for --plot, wrote nothing and said nothing)."""
    for flag, path, needle in (("--json", tmp_path, "is a folder"),
                               ("--markdown", Path("/proc/specdesk-bench.md"), "cannot write"),
                               ("--plot", tmp_path / "missing" / "p.png", "does not exist")):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "specdesk", "bench", "--quick", flag, str(path)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and r.stderr.startswith("specdesk: error: ") and needle in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1 and time.perf_counter() - t0 < 60  # nothing was loaded or run
    assert not Path("/proc/specdesk-bench.md").exists()


def test_transformers_drafts_exactly_k_tokens(tiny_engine, monkeypatch):
    """transformers reads the draft length from the assistant's generation config and ignores generate's
    arguments; the bench must set it there, or every "hf-assisted k=N" runs transformers' default rule."""
    from transformers.generation import candidate_generator as cg

    from specdesk.core.bench.runner import Method, run_hf

    lengths: list[int] = []
    original = cg.AssistedCandidateGenerator.get_candidates

    def recording(self, input_ids, **kw):
        ids, logits = original(self, input_ids, **kw)
        lengths.append(ids.shape[1] - input_ids.shape[1])
        return ids, logits

    monkeypatch.setattr(cg.AssistedCandidateGenerator, "get_candidates", recording)
    cfg = tiny_engine.draft.model.generation_config
    before = (cfg.num_assistant_tokens, cfg.assistant_confidence_threshold)
    ids = tiny_engine.encode("def add(a, b):\n    return")
    for k in (1, 3):
        lengths.clear()
        run = run_hf(tiny_engine, Method(f"hf-assisted k={k}", "hf-assisted", "model", k), ids, 0.0, 24, 0)
        assert run.new_tokens == 24
        # k every step, whatever the draft's confidence (its threshold is off); only the token budget cuts it
        assert lengths and max(lengths) == k and all(n == k for n in lengths[:-k])
    assert (cfg.num_assistant_tokens, cfg.assistant_confidence_threshold) == before  # restored after each call


def test_adaptive_k_against_transformers_defaults_is_reported():
    from specdesk.core.bench.analysis import against_defaults
    from specdesk.core.bench.report import markdown

    rows = [_row("draft k=auto", k="auto", steady=90.0), _row("hf-assisted default", "hf-assisted", "default",
                                                              steady=60.0),
            _row("hf-assisted k=4", "hf-assisted", "4", steady=30.0)]  # fixed-k rows are not the default
    line = against_defaults(rows)
    assert line is not None and "median 1.50x, min 1.50x (editing)" in line
    assert against_defaults(rows[1:]) is None  # no adaptive row: nothing to compare
    assert f"- {line}" in markdown(rows, [], {"also": [line]})


def test_the_cpu_is_named_with_the_flags_its_kernels_split_on():
    from specdesk.hw.cpu import cpu_flags, cpu_name

    info = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\n"
            "flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n")
    assert cpu_name(info) == "Intel(R) Xeon(R) Processor"
    assert cpu_flags(info) == ["avx2", "avx512f", "avx512_bf16", "amx_tile"]
    assert cpu_flags("model name : AMD EPYC\nflags : fpu avx2 avx512f avx512_bf16\n") == ["avx2", "avx512f",
                                                                                          "avx512_bf16"]
    assert cpu_name("") and cpu_flags("") == []  # no /proc/cpuinfo: platform's answer, no flags
