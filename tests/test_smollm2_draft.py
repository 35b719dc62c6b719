"""The draft specdesk distilled for SmolLM2-135M-Instruct (resources/models/smollm2-135m-instruct-draft) on the real
target: offered first for it, small, loaded on the target's embeddings, greedy output identical to the target's."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import DEMO, held_tensors, differing_tensors, specdesk_side_by_side
from test_gguf_smollm2 import SHA256, smollm2_gguf  # noqa: F401 - the cached-download fixture

DRAFT = DEMO / "smollm2-135m-instruct-draft"


def test_the_shipped_draft_is_small_and_names_its_target():
    cfg = json.loads((DRAFT / "config.json").read_text())
    assert cfg["specdesk"]["target"]["sha256"] == SHA256
    on_disk = sum(p.stat().st_size for p in DRAFT.iterdir() if p.is_file())
    assert on_disk <= 30 * 10**6
    card = (DRAFT / "README.md").read_text()
    assert SHA256 in card and "specdesk distill" in card


def test_offered_first_and_greedy_output_is_the_targets(smollm2_gguf):  # noqa: F811
    import specdesk
    from specdesk.core.discovery import describe_folder, drafts_for

    entries = [describe_folder(DEMO / "demo-draft", "demo-draft", "bundled"),
               describe_folder(DRAFT, str(DRAFT), "bundled")]
    cands = drafts_for(str(smollm2_gguf), entries)
    assert cands[0].compatible and cands[0].entry.path == str(DRAFT)
    said: list[str] = []
    spec = specdesk.load(str(smollm2_gguf), device="cpu", progress=said.append)  # no draft: the API finds its own
    assert spec.draft.path == DRAFT and spec.drafter == "model+lookup"
    assert "drafting with smollm2-135m-instruct-draft, distilled for this model" in said
    assert spec.describe()["draft"]["distilled_for_target"]  # the app's load notice says so
    from specdesk.core.discovery import distilled_for

    assert not distilled_for(DEMO / "demo-draft", smollm2_gguf) and not distilled_for(DRAFT, DEMO / "demo-target")
    assert spec.draft.model.get_input_embeddings().weight is spec.target.model.get_input_embeddings().weight
    assert spec.draft.weight_bytes < 0.15 * spec.target.weight_bytes
    ids, _ = spec.prompt_ids("Explain what a hash table is in two sentences.")
    plain = spec.generate(ids, max_new_tokens=32, drafter="none")
    fast = spec.generate(ids, max_new_tokens=32, k=4)
    assert fast.token_ids == plain.token_ids and fast.stats.accepted > 0


def test_the_command_line_drafts_with_it_when_no_draft_is_given(smollm2_gguf, tiny_target):  # noqa: F811
    """`specdesk generate` (and serve) with no --draft take the bundled draft distilled for this very target (the
    card's sha256), say so on stderr, and leave it out when told; any other target (here a tiny folder) finds none."""
    import torch

    from specdesk.core.discovery import own_draft
    from specdesk.core.models.convert import converted_folder

    assert own_draft(str(smollm2_gguf)) == str(DRAFT)
    assert own_draft(str(tiny_target)) is None and own_draft("demo-target") is None
    converted_folder(smollm2_gguf, torch.float32)  # once here (cached if another test did), not in both processes
    extras = ((), ("--drafter", "ngram"), ("--drafter", "phrases"))
    done = specdesk_side_by_side(*(["generate", "--target", str(smollm2_gguf), "--prompt", "Hi", "--max-new-tokens",
                                    "4", "--json", *extra] for extra in extras))
    runs = {}
    for extra, r in zip(extras, done):
        assert r.returncode == 0, r.stderr
        runs[extra] = (json.loads(r.stdout)["drafter"], "drafting with smollm2-135m-instruct-draft" in r.stderr)
    assert runs == {(): ("model+lookup", True), ("--drafter", "ngram"): ("ngram", False),
                    ("--drafter", "phrases"): ("phrases", False)}
    assert "drafting with the table of this model's phrases in smollm2-135m-instruct-draft" in done[2].stderr


def test_the_app_started_with_the_target_loads_its_draft(smollm2_gguf, tiny_target, tiny_draft):  # noqa: F811
    """`specdesk --target T` (and `specdesk screenshot --target T`) start with the draft distilled for T, as
    `generate` and `serve` do; an explicit --draft, the demo pair and a target without one are as before."""
    from specdesk.qt.app import startup_request

    req = startup_request(str(smollm2_gguf), None, None)
    assert (req.target, req.draft, req.drafter) == (str(smollm2_gguf), str(DRAFT), None)  # drafter: the pair's default
    assert startup_request(str(tiny_target), None, None).draft is None
    assert startup_request(str(tiny_target), str(tiny_draft), None).drafter == "model"
    assert startup_request(str(smollm2_gguf), str(tiny_draft), None).draft == str(tiny_draft)
    demo = startup_request(None, None, None)
    assert (demo.target, demo.draft, demo.drafter) == ("demo-target", "demo-draft", "model")
    assert startup_request("/no/such/model.gguf", None, None).draft is None  # the load reports the bad path


def test_the_q4_target_loads_from_its_codes_as_quantizing_its_float32_form_would(smollm2_gguf):  # noqa: F811
    """The real GGUF as q4: stored once as codes (150 MB here against the float32 conversion's 517), loaded without
    quantizing, and every tensor it holds (606, the joined layers' too) bit for bit what int4.quantize_model makes of
    the float32 conversion's model."""
    import torch
    from transformers import AutoModelForCausalLM

    from specdesk.core import int4
    from specdesk.core.loading import load_model
    from specdesk.core.models.convert import converted_folder
    from specdesk.core.models.q4store import folder_name

    said: list[str] = []
    q4 = load_model(str(smollm2_gguf), "q4", device="cpu", progress=said.append)
    assert not any("quantizing" in m for m in said)
    f32 = converted_folder(smollm2_gguf, torch.float32)
    ref = AutoModelForCausalLM.from_pretrained(f32, dtype=torch.float32, local_files_only=True,
                                               attn_implementation="sdpa")
    int4.quantize_model(ref.eval())
    held = held_tensors(q4.model)
    assert len(held) == 606 and not differing_tensors(held, held_tensors(ref))
    assert q4.params == 134_515_008
    size = {f.name: sum(p.stat().st_size for p in f.iterdir()) for f in (f32, f32.parent / folder_name())}
    assert size[folder_name()] < 0.3 * size["float32"]


def test_planned_with_it_as_it_loads(smollm2_gguf):  # noqa: F811
    """`specdesk plan` with no draft plans what `specdesk generate` loads: the bundled draft (and its table), saying
    so; drafter phrases its table alone, counted and named; drafter ngram neither."""
    from specdesk.core import phrases
    from specdesk.core.plan.planner import plan

    common = dict(device="cpu", budget_bytes=8 << 30, recommend=False, use_history=False)
    table = phrases.resident_bytes(DRAFT)

    def rows(p):
        return [b for _, label, b in p.rows() if "phrases" in label]

    p = plan(str(smollm2_gguf), **common)
    assert p.drafter == "model" and p.draft is not None and p.draft.name == DRAFT.name
    assert any(n.startswith("drafting with smollm2-135m-instruct-draft, distilled for this model") for n in p.notes)
    assert rows(p) == [table] and table > 0
    only = plan(str(smollm2_gguf), drafter="phrases", **common)
    assert (only.drafter, only.draft, rows(only)) == ("phrases", None, [table])
    assert any(n.startswith("drafting with the table of this model's phrases in smollm2") for n in only.notes)
    lookup = plan(str(smollm2_gguf), drafter="ngram", **common)
    assert (lookup.drafter, lookup.draft, rows(lookup)) == ("ngram", None, [])
    assert not any("drafting with" in n for n in lookup.notes)


def test_the_same_model_in_another_file_takes_it_too(smollm2_gguf, tmp_path):  # noqa: F811
    """SmolLM2 as a Hugging Face folder (bfloat16: another file of the same model) has no draft of its own; the bundled
    one, distilled for the GGUF, fits it (the same vocabulary, width, layers and tokenizer): listed right after drafts made for
    exactly it, taken when no draft is given (saying for which file it was made), greedy output the folder's own. The
    same shapes with another tokenizer do not take it."""
    import os
    import shutil

    import torch

    import specdesk
    from specdesk.core.discovery import drafts_for, own_draft
    from specdesk.core.models.convert import converted_folder

    from conftest import swapped_token_copy

    folder = converted_folder(smollm2_gguf, torch.bfloat16)
    assert own_draft(str(folder)) == str(DRAFT)
    first = drafts_for(str(folder))[0]
    assert first.entry.name == str(DRAFT) and first.compatible
    assert first.reason == "distilled for SmolLM2-135M-Instruct.Q4_1.gguf: the same shapes and tokenizer"
    said: list[str] = []
    e = specdesk.load(str(folder), device="cpu", progress=said.append)
    assert e.draft is not None and Path(e.draft.path) == DRAFT and e.drafter == "model+lookup"
    assert any("distilled for SmolLM2-135M-Instruct.Q4_1.gguf: the same shapes and tokenizer" in s for s in said)
    d = e.describe()["draft"]
    assert not d["distilled_for_target"] and d["distilled_for"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    ids, _ = e.prompt_ids("Give three tips for writing clear emails.")
    plain = e.generate(ids, max_new_tokens=24, drafter="none")
    fast = e.generate(ids, max_new_tokens=24, k=2, drafter="model")
    assert fast.token_ids == plain.token_ids and fast.stats.accepted > 0
    other = tmp_path / "other-tokenizer"  # the same config and weights, two token ids swapped
    light = tmp_path / "light"
    light.mkdir()
    for f in folder.iterdir():
        if f.name != "model.safetensors" and f.is_file():
            shutil.copy(f, light / f.name)
    swapped_token_copy(light, other)
    os.symlink(folder / "model.safetensors", other / "model.safetensors")
    assert own_draft(str(other)) is None
