"""EAGLE heads (core/eagle.py, core/distill/eagle.py) on a tiny real target: distilled by ``specdesk distill
--kind eagle``, loaded as the target's draft, greedy output token-identical to the target alone, the run-time
drafter computing exactly what training simulated, and clear refusals where it cannot run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from test_distill import PROMPTS, check_follows_a_q4_target, small_config


@pytest.fixture(scope="module")
def eagle_target(tmp_path_factory) -> Path:
    from conftest import make_llama

    return make_llama(tmp_path_factory.mktemp("eagle") / "target", hidden=64, layers=3, seed=7)


@pytest.fixture(scope="module")
def eagle(eagle_target, tmp_path_factory):
    from specdesk.core.distill.pipeline import distill

    out = tmp_path_factory.mktemp("eagle-out") / "head"
    events = list(distill(small_config(eagle_target, out, kind="eagle", steps=30, eval_every=10, lr=3e-3)))
    return out, events


@pytest.fixture(scope="module")
def engines(eagle, eagle_target):
    import specdesk

    out, _ = eagle
    return (specdesk.load(str(eagle_target), str(out), device="cpu"),
            specdesk.load(str(eagle_target), drafter="none", device="cpu"))


def test_distill_kind_eagle_writes_a_one_layer_head_with_its_fusion_layer(eagle):
    from safetensors import safe_open

    out, events = eagle
    phases = [e.phase for e in events]
    assert "features" in phases and phases.index("features") < phases.index("train") and phases[-1] == "done"
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["specdesk"]["kind"] == "eagle-head" and cfg["num_hidden_layers"] == 1
    with safe_open(out / "model.safetensors", "pt") as f:
        assert tuple(f.get_slice("specdesk_fc.weight").get_shape()) == (64, 128)
    assert sorted(p.name for p in (out / ".distill" / "features").iterdir()) == ["held-00000.pt", "train-00000.pt"]
    losses = [e.loss for e in events if e.phase == "train" and e.loss is not None]
    assert losses[-1] < losses[0], losses  # it learns (the tiny target's random replies leave little to agree on)


def test_features_are_kept_in_shards_that_a_cancelled_run_keeps(eagle_target, tmp_path, monkeypatch):
    """Features go to disk a shard at a time: a run cancelled while computing them keeps the finished shards, the
    resumed run computes only the rest, and what it reads back (memory-mapped) is what the target computes."""
    import threading

    from specdesk.core.distill.data import Sample
    from specdesk.core.distill.eagle import EagleTrainer, target_features
    from specdesk.core.distill.pipeline import data_dtype, distill
    from specdesk.core.distill.workdir import WorkDir
    from specdesk.core.loading import load_model

    monkeypatch.setattr(EagleTrainer, "feature_shard", 16)  # 2 shards of training replies (32), 1 held-out
    out = tmp_path / "head"
    cancel = threading.Event()
    seen = []
    for ev in distill(small_config(eagle_target, out, kind="eagle", steps=4), cancel):
        if ev.phase == "features":
            seen.append(ev.fraction)
            if len(seen) == 2:  # the held-out shard and the first training one are written by now
                cancel.set()
    folder = out / ".distill" / "features"
    assert sorted(p.name for p in folder.iterdir()) == ["held-00000.pt", "train-00000.pt"]
    assert not (out / "config.json").exists()

    events = list(distill(small_config(eagle_target, out, kind="eagle", steps=4, resume=True)))
    fractions = [e.fraction for e in events if e.phase == "features"]
    assert fractions == [1.0], fractions  # only the last shard was computed
    assert sorted(p.name for p in folder.iterdir()) == ["held-00000.pt", "train-00000.pt", "train-00001.pt"]
    assert (out / "config.json").exists()

    target = load_model(str(eagle_target), dtype=data_dtype("cpu"), device="cpu")  # as distill loads it
    cfg = small_config(eagle_target, out, kind="eagle", steps=4, resume=True)
    trainer = EagleTrainer(cfg, target, WorkDir(out), "cpu")
    assert list(trainer.compute_features(target, threading.Event())) == []  # read back, none computed
    for split, data in (("held", trainer.held), ("train", trainer.train)):
        assert len(trainer.features[split]) == len(data)
        # the last 16 replies: one batch as the run computed it (the last shard's)
        want = target_features(target.model, [Sample(s.prompt, s.reply, None, None) for s in data[-16:]])
        for got, w in zip(trainer.features[split][-16:], want):
            assert torch.equal(got, w)


def test_greedy_output_is_the_targets_with_an_eagle_head(engines):
    from specdesk.core.eagle import EagleDrafter

    spec, plain = engines
    assert isinstance(spec._drafter("model"), EagleDrafter)
    drafted = accepted = 0
    for prompt in PROMPTS:
        want = plain.generate(prompt, max_new_tokens=40).token_ids
        for k, tree in ((1, ()), (4, ()), ("auto", ()), (4, (4, 2)), ("auto", (3, 2))):  # a kept tree leaf moves
            got = spec.generate(prompt, max_new_tokens=40, k=k, tree=tree)             # its hidden state too
            assert got.token_ids == want, (prompt, k, tree)
            drafted += got.stats.drafted
            accepted += got.stats.accepted
    assert drafted > 0  # (the tiny target's random replies: acceptance is checked on SmolLM2 by bench)


def test_the_drafter_computes_what_training_simulated(engines):
    """Drafting 3 tokens at run time (target features from its KV-cached passes, the head's lean decoder) gives
    the logits the training-time unrolling gives for the same row from the target's teacher-forced features."""
    from specdesk.core.distill.data import Sample
    from specdesk.core.distill.eagle import target_features, unrolled_logits
    from specdesk.core.sampling import SamplingConfig

    spec, _ = engines
    dr = spec._drafter("model")
    head = spec.draft.model
    for prompt in PROMPTS[:2]:
        ids = spec.encode(prompt)
        L = len(ids)
        spec._runner.prefill(ids[:-1], L + 8)
        dr.start(ids[:-1], L + 8)
        seen = []
        prop = dr.propose(ids, 3, SamplingConfig(), None, keep=lambda j, p, t: seen.append(p) or True)
        d = prop.tokens.tolist()
        feats = target_features(spec.target.model, [Sample(ids[:-1], [ids[-1]], None, None)])[0][:L - 1]
        seq = ids + d
        f = torch.zeros(1, L + 2, feats.shape[-1])
        f[0, :L - 1] = feats.float()
        toks = torch.tensor([seq[1:L + 3]])
        with torch.no_grad():
            outs, _ = unrolled_logits(head, f.to(head.dtype), toks, 3)
        for s, logits in enumerate(outs):
            probs = logits[0, L - 2].softmax(-1)
            assert int(spec.draft.head_ids[probs.argmax()]) == d[s], (prompt, s)
            assert abs(float(probs.max()) - seen[s]) < 2e-3, (prompt, s)  # features kept in float16


def test_sampled_proposals_keep_their_mass_on_the_head(engines):
    spec, plain = engines
    res = spec.generate(PROMPTS[0], max_new_tokens=24, k=3, temperature=0.8, seed=3)
    again = spec.generate(PROMPTS[0], max_new_tokens=24, k=3, temperature=0.8, seed=3)
    assert len(res.token_ids) == 24 and res.token_ids == again.token_ids


def test_where_an_eagle_head_cannot_run_it_says_so(eagle, eagle_target, tmp_path, capsys):
    import specdesk
    from specdesk.cli import main
    from specdesk.core.errors import BadSetting

    out, _ = eagle
    with pytest.raises(BadSetting, match="hidden states"):
        specdesk.load(str(eagle_target), str(out), device="cpu", lean_target=False)
    rc = main(["distill", "--target", str(eagle_target), "--out", str(tmp_path / "x"), "--standalone", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "EAGLE head" in err[0], err


def test_an_eagle_head_started_from_a_draft_drafts_as_that_draft_at_first(eagle_target, tmp_path):
    """--init-from: the head takes the draft's layers, norm and head tokens, and its fusion layer passes only the
    token embedding, so before any training each row j drafts what the draft drafts after t_{j+1}."""
    from safetensors.torch import load_file

    from specdesk.core.distill.draft import HEAD_IDS_KEY, build_draft, build_eagle, save_draft
    from specdesk.core.distill.eagle import unrolled_logits
    from specdesk.core.loading import load_model

    target = load_model(str(eagle_target), device="cpu")
    draft = build_draft(target.model, 2, torch.arange(100, 356))
    with torch.no_grad():
        for p in draft.model.layers.parameters():
            p.add_(torch.randn_like(p) * 0.05)  # not the target's layers: the copy must come from the folder
            p.copy_(p.half().float())  # as the folder stores them
    folder = tmp_path / "draft"
    save_draft(draft, folder, target, head_ids=torch.arange(100, 356), target_sha256="x", target_source=eagle_target)
    head = build_eagle(target.model, load_file(str(folder / "model.safetensors"))[HEAD_IDS_KEY], layers=2,
                       init_from=str(folder))
    ids = target.tokenizer("def f(x): return x + 1")["input_ids"]
    toks = torch.tensor([ids[1:]])
    feats = torch.randn(1, len(ids) - 1, 64)  # ignored by the starting fusion layer
    with torch.no_grad():
        outs, _ = unrolled_logits(head, feats, toks, 2)
        want = draft(input_ids=torch.tensor([ids[1:]])).logits
    assert torch.allclose(outs[0], want.float(), atol=1e-4)
    # step 2 reads the true next token as well: row j's second draft is the draft's prediction one row later
    assert torch.allclose(outs[1][0, :-1], want[0, 1:].float(), atol=1e-4)


def test_the_planner_counts_an_eagle_head_and_its_hidden_states_exactly(eagle, eagle_target, engines):
    """Own parameters (layer, norm, fusion layer, head rows) equal the loaded head's; the KV figures of target and
    head together equal the buffers a generation preallocated (KV, and the two hidden-state buffers)."""
    from specdesk.core.plan.memory import kv_cache_bytes
    from specdesk.core.plan.params import analyze

    out, _ = eagle
    spec, _ = engines
    head = analyze(str(out))
    assert head.params == spec.draft.params and head.hidden_rows == 2
    assert any("EAGLE" in n for n in head.notes)
    ids = spec.encode(PROMPTS[0])
    spec.generate(PROMPTS[0], max_new_tokens=20, k=4)
    cap = len(ids) + 20 + 4 + 2  # what decode preallocates for a fixed k
    target = analyze(str(eagle_target))
    want = kv_cache_bytes(target, cap, "float32") + kv_cache_bytes(head, cap, "float32")
    hidden = 2 * cap * head.hidden_size * 4
    assert spec.kv_reserved_bytes() == want and kv_cache_bytes(head, cap, "float32") > hidden


def test_with_a_q4_target_the_eagle_head_goes_4_bit_and_output_stays_the_targets(eagle, eagle_target):
    """An EAGLE head follows a q4 target as a draft does (4-bit layer, 8-bit head rows, bfloat16 fusion layer): the
    planner's bytes equal the load, and greedy output equals plain decoding of the same q4 target."""
    from specdesk.core.eagle import EagleDrafter

    out, _ = eagle
    spec = check_follows_a_q4_target(eagle_target, out)
    assert isinstance(spec._drafter("model"), EagleDrafter)
