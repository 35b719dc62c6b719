"""``specdesk distill`` on a tiny real target: data, training, resume, the draft folder, loading it as the target's
draft (greedy output token-identical), the standalone export, discovery and the planner, the sampled law with a
reduced head."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from conftest import make_llama

PROMPTS = ["def f(x):", "import os\n", "class A:\n    def __init__(self):", "for i in range(3):"]


def small_config(target: Path, out: Path, **kw):
    from specdesk.core.distill.pipeline import DistillConfig

    base = dict(target=str(target), out=out, steps=12, device="cpu", train_prompts=32, held_out_prompts=16,
                max_new_tokens=16, answer_batch=16, layers=1, head_vocab=512, batch=4, eval_every=6)
    base.update(kw)
    return DistillConfig(**base)


@pytest.fixture(scope="module")
def distill_target(tmp_path_factory) -> Path:
    return make_llama(tmp_path_factory.mktemp("distill") / "target", hidden=64, layers=3, seed=5)


@pytest.fixture(scope="module")
def distilled(distill_target, tmp_path_factory):
    from specdesk.core.distill.pipeline import distill

    out = tmp_path_factory.mktemp("distill-out") / "draft"
    events = list(distill(small_config(distill_target, out)))
    return out, events


def test_distill_writes_a_small_borrowing_folder_with_its_card(distilled, distill_target):
    from specdesk.core.distill.pipeline import file_sha256

    out, events = distilled
    phases = [e.phase for e in events]
    assert phases[0] == "load" and "data" in phases and "train" in phases and phases[-1] == "done"
    train = [e for e in events if e.phase == "train"]
    assert train[-1].step == 12 and train[-1].agreement is not None and 0 <= train[-1].agreement <= 1
    assert [e.step for e in train] == sorted(e.step for e in train)
    cfg = json.loads((out / "config.json").read_text())
    sd = cfg["specdesk"]
    assert sd["borrows"] == ["model.embed_tokens.weight", "lm_head.weight"] and sd["head_vocab"] == 512
    assert sd["target"]["sha256"] == file_sha256(distill_target) and cfg["num_hidden_layers"] == 1
    from safetensors import safe_open

    with safe_open(out / "model.safetensors", "pt") as f:
        names = set(f.keys())
        assert f.get_tensor("specdesk.head_ids").numel() == 512
    assert "model.embed_tokens.weight" not in names and "lm_head.weight" not in names
    assert (out / "tokenizer.json").exists()
    card = (out / "README.md").read_text()
    assert sd["target"]["sha256"] in card and "12 steps" in card and "Agreement" in card
    made = json.loads((out / "distill.json").read_text())
    curve = made["curve"]
    assert curve[0][0] == 0 and curve[-1][0] == 12  # the learning curve starts before training
    from specdesk.core import phrases  # the table of the target's phrases, counted in the same training replies

    table = phrases.find(out)
    assert table.info["replies"] == made["train_replies"] and table.info["tokens"] == made["train_tokens"]
    assert f"`{phrases.FILE}`" in card and f"{made['train_replies']:,} training replies" in card
    from specdesk.core.userdirs import _umask

    for name in ("model.safetensors", phrases.FILE, "config.json", "README.md"):  # shared or served like any file
        assert (out / name).stat().st_mode & 0o777 == 0o666 & ~_umask(), name


def test_resume_goes_on_from_the_checkpoint(distill_target, tmp_path):
    from specdesk.core.distill.pipeline import distill
    from specdesk.core.errors import BadSetting

    out = tmp_path / "d"
    list(distill(small_config(distill_target, out, steps=4, train_prompts=16)))
    data_files = sorted(p.name for p in (out / ".distill" / "data").iterdir())
    with pytest.raises(BadSetting, match="--resume"):
        list(distill(small_config(distill_target, out, steps=6, train_prompts=16)))
    events = list(distill(small_config(distill_target, out, steps=6, train_prompts=16, resume=True)))
    assert not [e for e in events if e.phase == "data"]  # the data is kept
    steps = [e.step for e in events if e.phase == "train"]
    assert steps[0] == 5 and steps[-1] == 6
    assert sorted(p.name for p in (out / ".distill" / "data").iterdir()) == data_files
    with pytest.raises(BadSetting, match="differ"):
        list(distill(small_config(distill_target, out, steps=8, train_prompts=32, head_vocab=256, resume=True)))
    # more training prompts extend the data: the answered shard is kept as it is, one more batch is answered
    before = (out / ".distill" / "data" / "train-00000.pt").read_bytes()
    events = list(distill(small_config(distill_target, out, steps=8, train_prompts=32, resume=True)))
    assert [e for e in events if e.phase == "data"][-1].message.startswith("target answered 16 of 16")
    assert (out / ".distill" / "data" / "train-00000.pt").read_bytes() == before
    assert (out / ".distill" / "data" / "train-00001.pt").exists() and events[-1].step == 8
    with pytest.raises(BadSetting, match="fewer"):
        list(distill(small_config(distill_target, out, steps=9, train_prompts=16, resume=True)))
    # a run begun with other templates (another specdesk) cannot be extended: its list would not go on
    settings = out / ".distill" / "settings.json"
    saved = json.loads(settings.read_text())
    assert len(saved["prompt_set"]) == 16
    settings.write_text(json.dumps({**saved, "prompt_set": "0" * 16}))
    with pytest.raises(BadSetting, match="prompt templates"):
        list(distill(small_config(distill_target, out, steps=9, train_prompts=48, resume=True)))
    events = list(distill(small_config(distill_target, out, steps=9, train_prompts=32, resume=True)))
    assert events[-1].step == 9  # the same prompts: resumes


def test_a_draft_goes_on_from_a_distilled_draft_with_new_prompts(distilled, distill_target, tmp_path):
    """--init-from with a plain draft: it starts as that draft (same held-out agreement at step 0, same head
    tokens), the target answers only prompts past --skip-prompts, and the card and distill.json name the draft
    it came from."""
    from safetensors import safe_open

    from specdesk.core.distill.pipeline import distill
    from specdesk.core.distill.prompts import chat_prompts
    from specdesk.core.distill.workdir import WorkDir
    from specdesk.core.errors import BadSetting

    first, _ = distilled
    before = json.loads((first / "distill.json").read_text())
    out = tmp_path / "more"
    events = list(distill(small_config(distill_target, out, steps=6, train_prompts=16, skip_prompts=32,
                                       init_from=str(first))))
    after = json.loads((out / "distill.json").read_text())
    assert after["curve"][0][2] == round(before["agreement"], 4)  # step 0 drafts exactly as the draft it starts from
    with safe_open(first / "model.safetensors", "pt") as a, safe_open(out / "model.safetensors", "pt") as b:
        assert torch.equal(a.get_tensor("specdesk.head_ids"), b.get_tensor("specdesk.head_ids"))
    answered = [s.prompt for name in WorkDir(out).train_shards() for s in WorkDir(out).load_shard(name)]
    assert len(answered) == 16 and events[-1].step == 6
    from specdesk.core.distill.data import chat_ids
    from specdesk.core.loading import load_model

    tok = load_model(str(distill_target), device="cpu").tokenizer
    seeded = [tuple(chat_ids(tok, m)) for m in chat_prompts(48, prompt_set="varied")]  # the default set's
    assert {tuple(p) for p in answered} == set(seeded[32:])  # the 16 after the first 32, none of those
    assert after["init_from"] == first.name and after["skip_prompts"] == 32
    assert after["previous"]["steps"] == before["steps"] and "curve" not in after["previous"]
    assert f"initialised from the draft in `{first.name}`" in (out / "README.md").read_text()
    from specdesk.core import phrases  # its phrase table counts both runs' replies

    assert phrases.find(out).info["replies"] == after["train_replies"] + before["train_replies"] == 16 + 32
    with pytest.raises(BadSetting, match="skip_prompts"):  # a resume must keep the prompt list
        list(distill(small_config(distill_target, out, steps=8, train_prompts=16, skip_prompts=0,
                                  init_from=str(first), resume=True)))
    with pytest.raises(BadSetting, match="prompts"):  # and its prompt set
        list(distill(small_config(distill_target, out, steps=8, train_prompts=16, skip_prompts=32,
                                  init_from=str(first), resume=True, prompts="templates")))

    with pytest.raises(BadSetting, match="unknown prompt set 'chats'"):  # refused before the target loads
        list(distill(small_config(distill_target, tmp_path / "bogus", prompts="chats")))
    assert not (tmp_path / "bogus").exists()

    # the default set is varied: the target answers its seeded list, held-out prompts from its held-out subjects
    assert json.loads((first / "distill.json").read_text())["prompt_set"] == "varied"
    assert 'the prompt set "varied"' in (first / "README.md").read_text()
    first_work = WorkDir(first)
    assert [tuple(s.prompt) for s in first_work.load_shard("held-out")] == [
        tuple(chat_ids(tok, m)) for m in chat_prompts(16, held_out=True, prompt_set="varied")]
    # --prompt-set templates: that set's seeded list; resumed with no set named, a run goes on with the one it began
    # with (a templates run made before varied became the default is resumed, not refused)
    templates = tmp_path / "templates"
    list(distill(small_config(distill_target, templates, steps=2, train_prompts=16, init_from=str(first),
                              prompts="templates")))
    list(distill(small_config(distill_target, templates, steps=3, train_prompts=24, init_from=str(first),
                              resume=True)))
    work = WorkDir(templates)
    answered = [tuple(s.prompt) for name in work.train_shards() for s in work.load_shard(name)]
    want = [tuple(chat_ids(tok, m)) for m in chat_prompts(24, prompt_set="templates")]
    assert answered == want and want[:16] != seeded[:16]
    assert json.loads((templates / "distill.json").read_text())["prompt_set"] == "templates"
    from specdesk.core.distill.prompts import fingerprint

    assert fingerprint() == "024aa286d7c2eb4b" != fingerprint("varied")  # the templates' list is the one it was


@pytest.fixture(scope="module")
def engines(distilled, distill_target):
    import specdesk

    out, _ = distilled
    return (specdesk.load(str(distill_target), str(out), device="cpu"),
            specdesk.load(str(distill_target), drafter="none", device="cpu"))


def test_the_engine_loads_it_as_the_targets_draft_and_greedy_output_is_the_targets(engines):
    spec, plain = engines
    d = spec.draft
    assert d.borrowed == ("model.embed_tokens.weight",) and d.head_ids.numel() == 512
    # the embedding is the target's own tensor, not a copy
    assert d.model.get_input_embeddings().weight.data_ptr() == spec.target.model.get_input_embeddings().weight.data_ptr()
    assert d.params < 100_000 and spec.describe()["draft"]["borrowed_from_target"] == ["model.embed_tokens.weight"]
    assert d.tokenizer is spec.target.tokenizer  # its tokenizer files are the target's, byte for byte: not read again
    drafted = 0
    for prompt in PROMPTS:
        want = plain.generate(prompt, max_new_tokens=40).token_ids
        for k, tree in ((1, ()), (4, ()), ("auto", ()), (4, (4, 2)), ("auto", (3, 2, 2))):  # trees: head positions
            got = spec.generate(prompt, max_new_tokens=40, k=k, tree=tree)             # mapped to token ids too
            assert got.token_ids == want, (prompt, k, tree)
            drafted += got.stats.drafted
        assert spec.generate(prompt, max_new_tokens=40, k="auto", drafter="phrases").token_ids == want
    assert drafted > 0
    assert spec.describe()["phrases"]["contexts"] == len(spec.phrases) and "phrases" in spec.available_drafters()


def test_a_draft_whose_tokenizer_files_differ_reads_its_own(distilled, distill_target, tmp_path):
    import shutil

    import specdesk
    from specdesk.core.loading import same_tokenizer_files

    out, _ = distilled
    assert same_tokenizer_files(out, distill_target) and not same_tokenizer_files(out, tmp_path)
    other = tmp_path / "draft"
    shutil.copytree(out, other)
    cfg = json.loads((other / "tokenizer_config.json").read_text())
    (other / "tokenizer_config.json").write_text(json.dumps({**cfg, "model_max_length": 77}))
    assert not same_tokenizer_files(other, distill_target)
    spec = specdesk.load(str(distill_target), str(other), device="cpu")
    assert spec.draft.tokenizer is not spec.target.tokenizer and spec.draft.tokenizer.model_max_length == 77
    shutil.copy(other / "tokenizer.json", other / "tokenizer.model")  # a file the target's folder lacks
    (other / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert not same_tokenizer_files(other, distill_target)


def check_follows_a_q4_target(target, out):
    """Loads ``out`` (a distilled draft or EAGLE head) on ``target`` quantized q4 and checks what a follower of a q4
    target must be: 4-bit layers, an 8-bit head, the planner's bytes equal to the load, greedy output equal to plain
    decoding of the same q4 target at k = 1, 4 and auto with drafts made. Returns the engine."""
    import specdesk
    from specdesk.core import int4
    from specdesk.core.plan.planner import plan

    spec = specdesk.load(str(target), str(out), device="cpu", target_quant="q4")
    plain = specdesk.load(str(target), drafter="none", device="cpu", target_quant="q4")
    d = spec.draft
    assert d.quant == "q4" and isinstance(d.model.lm_head, int4.Q8Linear)
    assert isinstance(d.model.model.layers[0].mlp.down_proj, int4.Int4Linear)
    p = plan(str(target), str(out), target_quant="q4", device="cpu", context=256, recommend=False,
             budget_bytes=2**30)
    assert sum(r.bytes for r in p.draft.rows[:2]) == d.weight_bytes
    drafted = 0
    for prompt in PROMPTS:
        want = plain.generate(prompt, max_new_tokens=40).token_ids
        for k in (1, 4, "auto"):
            got = spec.generate(prompt, max_new_tokens=40, k=k)
            assert got.token_ids == want, (prompt, k)
            drafted += got.stats.drafted
    assert drafted > 0
    return spec


def test_with_a_q4_target_the_draft_goes_4_bit_and_output_stays_the_targets(distilled, distill_target):
    """A distilled draft follows a q4 target (core/int4.py): 4-bit layers, an 8-bit reduced head, the planner's bytes
    equal to the load, and greedy output equal to plain decoding of the same q4 target."""
    out, _ = distilled
    spec = check_follows_a_q4_target(distill_target, out)
    assert (spec.draft.model.get_input_embeddings().weight.data_ptr()
            == spec.target.model.get_input_embeddings().weight.data_ptr())
    # what the app's draft quantization box says auto means (loading.resolve_draft_quant): what the load did
    from specdesk.core.loading import resolve_draft_quant

    assert resolve_draft_quant(str(out), "auto", "q4", "cpu") == (spec.draft.quant, True) == ("q4", True)
    assert resolve_draft_quant(str(out), "int8", "none", "cpu") == ("none", True)  # a float target's: its dtype
    assert resolve_draft_quant("demo-draft", "auto", "q4", "cpu") == ("none", False)  # any other: its own auto


def test_sampled_proposals_put_no_mass_outside_the_head(engines):
    from specdesk.core.sampling import SamplingConfig

    spec, _ = engines
    dr = spec._drafter("model")
    ids = spec.encode("def f(x):")
    dr.start(ids[:-1], 64)
    g = torch.Generator().manual_seed(0)
    prop = dr.propose(ids, 3, SamplingConfig(temperature=0.8), g)
    head = set(spec.draft.head_ids.tolist())
    # the head's own columns (every other token has probability 0), and where each proposed token sits in them
    assert torch.equal(prop.prob_ids, spec.draft.head_ids)
    assert prop.probs.shape == (3, len(head)) and torch.equal(prop.prob_ids[prop.prob_pos], prop.tokens)
    assert torch.allclose(prop.probs.sum(-1), torch.ones(3)) and set(prop.tokens.tolist()) <= head
    assert (prop.probs.gather(1, prop.prob_pos[:, None]) > 0).all()
    res = spec.generate("def f(x):", max_new_tokens=24, k=3, temperature=0.8, seed=3)
    assert len(res.token_ids) == 24


@pytest.mark.parametrize("k", [1, 2, 3])
def test_a_reduced_head_keeps_the_target_law_exactly(k):
    """The draft's law is 0 outside its head's tokens (FR-Spec): verify_sampled still gives the target's law."""
    from test_verify_exact import CONFIGS, V, completed_law, make_world, target_law

    head = torch.tensor([0, 1, 3])
    for cfg in CONFIGS[:2]:
        target, draft = make_world(seed=40 + k, cfg=cfg, depth=k)
        for prefix, p in draft.items():
            q = torch.zeros(V, dtype=torch.float64)
            q[head] = p[head]
            draft[prefix] = q / q.sum()
        want = target_law(target, k + 1)
        got = completed_law(target, draft, k)
        assert max(abs(got.get(s, 0.0) - p) for s, p in want.items()) < 1e-12


def test_standalone_export_is_an_ordinary_model(distilled, distill_target, tmp_path):
    import specdesk

    out, _ = distilled
    from specdesk.cli import main

    assert main(["distill", "--standalone", str(out), "--target", str(distill_target), "--out", str(tmp_path / "sa")]) == 0
    cfg = json.loads((tmp_path / "sa" / "config.json").read_text())
    assert "specdesk" not in cfg and cfg["num_hidden_layers"] == 1
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "sa" / "model.safetensors").stat().st_mode & 0o777 == 0o666 & ~umask  # not safetensors' 0600
    # vLLM cannot load the borrowing draft: export vllm names a standalone copy and says how to write it
    from specdesk.core.plan.vllm import export_vllm

    cmd, _, _ = export_vllm(str(distill_target), str(out), budget_bytes_per_gpu=24 * 2**30)
    named = cmd.speculative_config["model"]
    assert named.endswith(f"{out.name}-standalone") and named != str(out)
    assert any("borrows its target's embeddings" in n and "specdesk distill --standalone" in n for n in cmd.notes)
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(tmp_path / "sa")
    assert m.get_input_embeddings().weight.shape[0] == 4096
    spec = specdesk.load(str(distill_target), str(tmp_path / "sa"), device="cpu")
    plain = specdesk.load(str(distill_target), drafter="none", device="cpu")
    assert spec.generate(PROMPTS[0], max_new_tokens=24, k=4).token_ids == \
        plain.generate(PROMPTS[0], max_new_tokens=24).token_ids


def test_cli_errors_are_one_line(distilled, distill_target, tmp_path, capsys):
    from types import SimpleNamespace

    from specdesk.cli import main

    out, _ = distilled

    def run(*args):
        capsys.readouterr()
        rc = main(list(args))
        return SimpleNamespace(returncode=rc, stderr=capsys.readouterr().err)

    r = run("distill", "--target", str(distill_target), "--out", str(out), "--steps", "3")
    assert r.returncode == 2 and r.stderr.startswith("specdesk: error: ") and "--resume" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = run("generate", "--target", str(out), "--prompt", "x", "--max-new-tokens", "2")
    assert r.returncode == 2 and "borrows" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run("distill", "--target", str(distill_target), "--out", str(tmp_path / "x"), "--steps", "0")
    assert r.returncode == 2 and "--steps" in r.stderr
    # a bad setting for a target that has a draft of its own: the error is the only line (the "drafting with" note
    # came first before)
    r = run("generate", "--target", str(distill_target), "--prompt", "x", "--k", "-1")
    assert r.returncode == 2 and r.stderr.startswith("specdesk: error: k must be") and r.stderr.count("\n") == 1
    r = run("distill", "--target", str(distill_target), "--out", str(tmp_path / "x"), "--prompts", "0")
    assert r.returncode == 2 and "--prompts must be at least 1" in r.stderr
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    r = run("distill", "--target", str(distill_target), "--out", str(a_file), "--steps", "3")
    assert r.returncode == 2 and "is a file" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_listed_first_for_its_target_and_planned_without_the_shared_tensors(distilled, distill_target, tmp_path):
    from specdesk.core.discovery import describe_folder, drafts_for
    from specdesk.core.plan.planner import plan

    out, _ = distilled
    other = make_llama(tmp_path / "other-draft", hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64, seed=9)
    entries = [describe_folder(other, str(other), "added"), describe_folder(out, str(out), "added")]
    cands = drafts_for(str(distill_target), entries)
    assert [Path(c.entry.name) for c in cands if c.compatible] == [out, other]  # the distilled one first
    assert cands[0].reason == "distilled for this model"
    assert entries[1].params < entries[0].params  # its own tensors only
    demo = [c for c in drafts_for("demo-target", entries[1:])]
    assert not demo[0].compatible and "hidden size 64" in demo[0].reason
    p = plan(str(distill_target), str(out), device="cpu", budget_bytes=2**33, recommend=False)
    own = sum(t.numel() for n, t in _own_tensors(out).items())
    assert p.draft.params == own  # layers, norm and the head's 512 rows; not the target's embeddings
    from specdesk.core import phrases

    table = [b for _, label, b in p.rows() if "phrases" in label]  # the folder's table, loaded with the draft
    assert table == [phrases.find(out).resident_bytes()] and table[0] > 0
    gpu = plan(str(distill_target), str(out), device="cuda", budget_bytes=2**33, recommend=False)
    assert not [r for r in gpu.rows() if "phrases" in r[1]] and any("host memory" in n for n in gpu.notes)


def test_its_target_loaded_without_a_draft_takes_it(distilled, distill_target, tiny_target):
    """`specdesk distill` remembers its folder; a load of that target with no draft then drafts with it (as with a
    bundled draft), saying so, and drafter ngram leaves it out. A model of the same vocabulary, width and tokenizer
    but another number of layers (the suite's tiny target: 2 layers, this target 3) is not taken for the same model."""
    import specdesk
    from specdesk.core import userdirs
    from specdesk.core.discovery import distilled_for, own_draft

    out, _ = distilled
    made = [Path(f) for f in userdirs.added_folders() if Path(f).is_dir() and distilled_for(f, distill_target)]
    assert out in made  # other tests of this module distil for the same target too: the newest is taken
    newest = max(made, key=lambda f: f.stat().st_mtime)
    assert own_draft(str(distill_target)) == str(newest)
    said: list[str] = []
    e = specdesk.load(str(distill_target), device="cpu", progress=said.append)
    assert e.draft is not None and Path(e.draft.path) == newest and e.drafter.startswith("model")
    assert f"drafting with {newest.name}, distilled for this model" in said
    assert specdesk.load(str(distill_target), drafter="ngram", device="cpu").draft is None
    assert own_draft(str(tiny_target)) is None


def _own_tensors(out: Path) -> dict:
    from safetensors.torch import load_file

    t = load_file(str(out / "model.safetensors"))
    head_ids = t.pop("specdesk.head_ids")
    hidden = t["model.norm.weight"].numel()
    t["lm_head.weight"] = torch.zeros(head_ids.numel(), hidden)
    return t


def test_a_draft_quantization_asked_for_a_distilled_draft_is_not_applied_and_says_so(distilled, distill_target):
    """A distilled draft follows its target (its tensors are the target's dtype, or 4-bit with a q4 target): an nf4
    asked for it is not applied, the load says so, and the planner counts what is loaded, not nf4."""
    import specdesk
    from specdesk.core.plan.planner import plan

    out, _ = distilled
    said: list[str] = []
    spec = specdesk.load(str(distill_target), str(out), device="cpu", draft_quant="nf4", progress=said.append)
    assert spec.draft.quant == "none"
    assert any("draft quantization nf4 not applied" in m for m in said)
    kw = dict(device="cpu", context=256, recommend=False, budget_bytes=2**30)
    asked = plan(str(distill_target), str(out), draft_quant="nf4", **kw)
    assert asked.total_bytes == plan(str(distill_target), str(out), **kw).total_bytes
    assert sum(r.bytes for r in asked.draft.rows[:2]) == spec.draft.weight_bytes
    recs = plan(str(distill_target), str(out), draft_quant="nf4", device="cpu", context=256,
                budget_bytes=2**30, max_recommendations=100).recommendations  # every row: other drafts are listed too
    # the draft follows its target (none beside none, q4 beside the CPU's q8 and q4 targets), never the nf4 asked for
    from specdesk.core.loading import follower_quant

    drafted = [r for r in recs if r.drafter == "model"]
    assert drafted and all(r.draft_quant == follower_quant(r.target_quant) for r in drafted)
    assert {r.target_quant for r in drafted} == {"none", "q8", "q4"}


def test_a_run_stopped_before_it_made_anything_can_start_afresh(distill_target, tmp_path):
    """Cancelled while the target loaded, a run leaves only its settings: a new run (other settings) may start there,
    and --resume on it says there is nothing to resume rather than going on quietly."""
    from specdesk.core.distill.pipeline import distill
    from specdesk.core.distill.workdir import WorkDir

    out = tmp_path / "d"
    (out / ".distill").mkdir(parents=True)
    (out / ".distill" / "settings.json").write_text('{"kind": "eagle", "prompts": "self"}')
    assert not WorkDir(out).exists()
    events = list(distill(small_config(distill_target, out, steps=2, train_prompts=16)))
    assert events[-1].phase == "done" and WorkDir(out).exists()
    fresh = tmp_path / "fresh"
    events = list(distill(small_config(distill_target, fresh, steps=2, train_prompts=16, resume=True)))
    assert events[0].message == f"nothing to resume in {fresh}: a new run starts" and events[-1].phase == "done"
