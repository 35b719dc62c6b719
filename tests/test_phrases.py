"""The target's phrase table (core/phrases.py): what it keeps, its lookups against counting by hand, its file, and
drafting from it: greedy output token-identical to the target alone, alone (drafter "phrases") and beside the draft
model where k=auto leaves the model out (the sampled law: test_sampling_exact's phrases case)."""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict

import numpy as np
import pytest

from specdesk.core import phrases
from specdesk.core.errors import BadModel, BadSetting

PROMPT = [1, 2, 3]


def test_it_keeps_contexts_the_replies_nearly_always_continue_alike():
    # after "... 3" the replies went on 10 11 12 six times of seven; 20 followed 10 only once (not kept)
    samples = [(PROMPT, [10, 11, 12])] * 6 + [(PROMPT, [10, 20, 13])]
    t = phrases.build(samples, min_count=6, min_share=0.6)
    assert t.next_token([7, 3]) == 10  # the context (3,) went on 10 all 7 times
    assert t.next_token([5, 1, 2, 3]) == 10
    assert t.continuation([1, 2, 3], 8) == [10, 11, 12]  # then no context after 12 was seen 6 times
    assert t.next_token([3, 10]) == 11  # (3, 10) -> 11 six of seven (0.86 >= 0.6)
    assert phrases.build(samples, min_count=6, min_share=0.9).next_token([3, 10]) is None  # 0.86 < 0.9: dropped
    assert phrases.build(samples, min_count=8).next_token([1, 2, 3]) is None  # seen 7 times, fewer than 8
    assert t.info == {"replies": 7, "tokens": 21, "min_count": 6, "min_share": 0.6}


def test_the_longest_kept_context_decides():
    # (9, 5) -> 6 always, while (5,) alone goes on 7 more often
    samples = [([9], [5, 6])] * 6 + [([8], [5, 7])] * 12
    t = phrases.build(samples, min_count=6, min_share=0.6)
    assert t.next_token([9, 5]) == 6 and t.next_token([8, 5]) == 7 and t.next_token([4, 5]) == 7


def _by_hand(samples, max_n, min_count, min_share):
    counts = [defaultdict(Counter) for _ in range(max_n + 1)]
    for prompt, reply in samples:
        seq = list(prompt[-max_n:]) + list(reply)
        start = len(seq) - len(reply)
        for i in range(start, len(seq)):
            for n in range(1, min(max_n, i) + 1):
                counts[n][tuple(seq[i - n:i])][seq[i]] += 1
    kept = {}
    for n in range(1, max_n + 1):
        for ctx, c in counts[n].items():
            total = sum(c.values())
            tok, top = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[0]  # ties: the smallest token id
            if total >= min_count and top / total >= min_share:
                kept[ctx] = tok
    return kept


def test_its_lookups_are_counting_by_hand():
    rng = random.Random(3)
    samples = []
    for _ in range(300):  # a skewed 12-token language: many contexts, some nearly deterministic
        reply, t = [], rng.randrange(12)
        for _ in range(rng.randrange(1, 30)):
            t = (t * 5 + 1) % 12 if rng.random() < 0.7 else rng.randrange(12)
            reply.append(t)
        samples.append(([rng.randrange(12) for _ in range(rng.randrange(0, 6))], reply))
    for min_count, min_share in ((2, 0.5), (4, 0.6), (1, 0.0)):
        kept = _by_hand(samples, 4, min_count, min_share)
        t = phrases.build(samples, min_count=min_count, min_share=min_share)
        assert len(t) == len(kept)
        checked = 0
        for _ in range(2000):
            tail = [rng.randrange(12) for _ in range(rng.randrange(1, 7))]
            want = next((kept[tuple(tail[-n:])] for n in range(min(4, len(tail)), 0, -1)
                         if tuple(tail[-n:]) in kept), None)
            assert t.next_token(tail) == want, tail
            checked += want is not None
        assert checked > 100


def test_the_file_reads_back_as_written_and_a_bad_one_is_one_clear_error(tmp_path):
    t = phrases.build([(PROMPT, [10, 11, 12])] * 6, min_count=6)
    assert phrases.find(tmp_path) is None  # no table: nothing to load
    t.save(tmp_path / phrases.FILE)
    back = phrases.find(tmp_path)
    assert back.info == t.info and back.max_n == t.max_n
    for a, b in ((back.keys, t.keys), (back.tokens, t.tokens), (back.shares, t.shares)):
        assert np.array_equal(a, b)
    assert back.continuation([0, 1, 2, 3], 5) == [10, 11, 12]
    (tmp_path / phrases.FILE).write_bytes(b"not a table")
    with pytest.raises(BadModel, match="not a readable phrase table"):
        phrases.find(tmp_path)


def _own_replies_table(engine, prompts):
    """A table from the target's own greedy replies to ``prompts`` (what `specdesk distill` counts)."""
    samples = []
    for p in prompts:
        ids = engine.encode(p)
        samples.append((ids, list(engine.generate(ids, drafter="none", max_new_tokens=40).token_ids)))
    return phrases.build(samples * 6, min_count=6)


PROMPTS = ["The quick brown fox", "Once upon a time", "def main():", "In the beginning"]


@pytest.fixture()
def with_phrases(tiny_engine):
    table = _own_replies_table(tiny_engine, PROMPTS)
    assert len(table) > 50
    tiny_engine.phrases = table
    yield tiny_engine
    tiny_engine.phrases = None


def test_drafting_from_the_phrases_keeps_the_output_the_targets(with_phrases):
    import specdesk
    from specdesk.core.errors import BadSetting

    e = with_phrases
    assert "phrases" not in specdesk.load("demo-target", device="cpu").available_drafters()
    with pytest.raises(BadSetting, match="demo-draft has no table of its target's phrases"):  # one clear line
        specdesk.load("demo-target", drafter="phrases", device="cpu")
    for prompt in PROMPTS + ["A prompt it never answered"]:
        want = e.generate(prompt, drafter="none", max_new_tokens=40).token_ids
        for k in (2, 4, "auto"):
            got = e.generate(prompt, drafter="phrases", k=k, max_new_tokens=40)
            assert got.token_ids == want, (prompt, k)
    # on a reply it has counted, the table proposes it: far fewer passes than tokens
    r = e.generate(PROMPTS[0], drafter="phrases", k=4, max_new_tokens=40)
    assert r.stats.target_forwards <= len(r.token_ids) // 2


def test_beside_the_draft_model_the_phrases_fill_steps_k_auto_leaves_the_model_out(with_phrases):
    from specdesk.core.kcontrol import FixedK

    class ModelLeftOut(FixedK):  # k=auto's decision in a stretch where the draft model does not pay
        def __init__(self):
            super().__init__(0)
            self.judged: list[bool] = []

        def free_length(self, available: int, phrases: bool = False) -> int:
            return available

        def observe_verify(self, drafted, verify_s, context_len=0, accepted=None, other_s=0.0, phrases=False):
            self.judged.append(phrases)

    e = with_phrases
    want = e.generate(PROMPTS[1], drafter="none", max_new_tokens=40).token_ids
    ctl = ModelLeftOut()
    got = e.generate(PROMPTS[1], drafter="model+lookup", controller=ctl, max_new_tokens=40)
    assert got.token_ids == want
    assert sum(s.lookup for s in got.steps) >= 3 and got.stats.drafted >= 6  # free steps, the phrases' tokens
    assert ctl.judged and all(ctl.judged)  # judged as the phrases' (their own acceptance table), not lookup's
    e.phrases = None
    plain = e.generate(PROMPTS[1], drafter="model+lookup", controller=ModelLeftOut(), max_new_tokens=40)
    assert plain.token_ids == want and plain.stats.drafted == 0  # no table: plain steps


def test_a_phrases_reply_is_priced_as_a_drafter_that_runs_no_model():
    """The window's payoff monitor judges a "phrases" reply (before, it had no cost model for it and said nothing)."""
    from specdesk.core.payoff import PayoffMonitor

    mon = PayoffMonitor()
    for _ in range(12):
        mon.observe(0, 0, 0.0, 0.004, 100)  # plain steps: the pair's plain cost
    mon.begin("phrases")
    for _ in range(20):
        mon.observe(4, 0, 0.00002, 0.007, 100)  # 4 of the table's tokens a step, none kept
    v = mon.verdict()
    assert v is not None and v.acceptance == 0 and v.slowing and v.draft_ms < 0.1


def test_the_slow_draft_banner_offers_the_models_phrases_where_the_pair_has_them(qtbot):
    from specdesk.qt.health import HealthBanners

    h = HealthBanners()
    qtbot.addWidget(h)
    h.pair_loaded(("model", "model+lookup", "phrases", "ngram", "none"))
    assert [label for label, _ in h._fixes("model+lookup")] == ["Switch to the model's phrases", "Decode plainly"]
    with qtbot.waitSignal(h.use_drafter) as sig:
        dict(h._fixes("model"))["Switch to the model's phrases"]()
    assert sig.args == ["phrases"]
    h.pair_loaded(("model", "model+lookup", "ngram", "none"))  # a draft without a table: prompt lookup, as before
    assert [label for label, _ in h._fixes("model")] == ["Switch to prompt lookup", "Decode plainly"]


def test_drafter_phrases_reads_only_the_table_and_loads_no_draft_model(tiny_engine, tiny_target, tmp_path, monkeypatch):
    """A drafter that runs no model loads none: only the folder's table is read (an 8B target's distilled draft
    would otherwise hold ~0.9 GB for nothing); the planner counts no draft for it either."""
    import specdesk
    from specdesk.core.errors import BadSetting
    from specdesk.core.plan.planner import plan

    folder = tmp_path / "draft"
    folder.mkdir()
    _own_replies_table(tiny_engine, PROMPTS).save(folder / phrases.FILE)
    e = specdesk.load(str(tiny_target), str(folder), drafter="phrases", device="cpu")
    assert e.draft is None and e._model_drafter is None and len(e.phrases) > 50
    assert e.available_drafters() == ("phrases", "ngram", "none") and e.describe()["phrases"]["contexts"] == len(e.phrases)
    for prompt in PROMPTS[:2]:
        want = tiny_engine.generate(prompt, drafter="none", max_new_tokens=40).token_ids
        got = e.generate(prompt, k="auto", max_new_tokens=40)
        assert got.token_ids == want and got.stats.target_forwards < len(want)
    with pytest.raises(BadSetting, match="has no table of its target's phrases"):
        specdesk.load(str(tiny_target), str(tmp_path), drafter="phrases", device="cpu")
    p = plan(str(tiny_target), str(folder), drafter="phrases", device="cpu", budget_bytes=8 << 30, candidate_drafts=[])
    assert p.draft is None and p.drafter == "phrases"
    row = [b for _, label, b in p.rows() if "phrases" in label]
    assert row == [phrases.resident_bytes(folder)] and row[0] > 0  # the table, in host memory, counted
    lookup = plan(str(tiny_target), drafter="ngram", device="cpu", budget_bytes=8 << 30, candidate_drafts=[])
    assert p.total_bytes - lookup.total_bytes == row[0]
    # a measured peak of drafter phrases (as `specdesk generate` records it) is the one its plan shows, not lookup's
    from specdesk.core.plan.history import record_measurement

    monkeypatch.setenv("SPECDESK_DATA_DIR", str(tmp_path / "data"))  # a history of this test's own
    record_measurement(tiny_target, "none", p.context, 111 << 20, "cpu", draft="ngram", dtype=p.dtype)
    record_measurement(tiny_target, "none", p.context, 123 << 20, "cpu", draft="phrases", dtype=p.dtype)
    seen = {d: plan(str(tiny_target), str(folder) if d == "phrases" else None, drafter=d, device="cpu",
                    budget_bytes=8 << 30, recommend=False).measured_bytes for d in ("phrases", "ngram")}
    assert seen == {"phrases": 123 << 20, "ngram": 111 << 20}


def test_the_memory_a_loaded_table_takes_is_what_the_planner_counts(tmp_path):
    """resident_bytes (the planner's figure) against tracemalloc's count of what loading the table allocated."""
    import tracemalloc

    rng = np.random.default_rng(0)
    # 30,000 replies of 12 tokens from a small vocabulary: many contexts, tokens below and above 256
    samples = [([1, 2], rng.integers(0, 3000, 12).tolist()) for _ in range(3000)] * 6
    phrases.build(samples, min_count=6).save(tmp_path / phrases.FILE)
    tracemalloc.start()
    table = phrases.find(tmp_path)
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(table) > 10_000
    assert abs(table.resident_bytes() - traced) < 0.01 * traced
    assert phrases.resident_bytes(tmp_path) == table.resident_bytes()
    assert phrases.resident_bytes(tmp_path / "nowhere") == 0


def test_distill_phrases_only_makes_a_table_the_target_then_drafts_with(tmp_path, capsys, monkeypatch):
    """`specdesk distill --phrases-only`: no draft model, the table of the target's phrases in its replies, kept for
    the target; loading that target without a draft then drafts with it (greedy output still the target's), the
    planner counts it, and drafter ngram (asked for) leaves it out."""
    import specdesk
    from specdesk.cli import main
    from specdesk.core.plan.planner import plan

    from conftest import make_llama

    # remembered folders of this test's own: a draft other tests distilled for a model of these shapes and tokenizer
    # would otherwise be taken as one made for the same model (discovery.own_draft)
    monkeypatch.setenv("SPECDESK_CONFIG_DIR", str(tmp_path / "config"))
    target = make_llama(tmp_path / "fine-tune", hidden=64, layers=2, seed=11)
    out = tmp_path / "phrases"
    with pytest.raises(BadSetting, match="needs a table of this model's phrases.*--phrases-only"):
        specdesk.load(str(target), drafter="phrases", device="cpu")
    assert main(["models", "--drafts-for", str(target)]) == 0
    assert "--phrases-only` counts a table of its phrases" in capsys.readouterr().out  # how to make one
    rc = main(["distill", "--target", str(target), "--out", str(out), "--phrases-only", "--prompt-set", "varied",
               "--prompts", "96", "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 0 and "wrote the table of" in err
    assert not (out / "model.safetensors").exists() and not (out / "config.json").exists()
    table = phrases.find(out)
    kept = phrases.own_table_path(target)
    assert len(table) > 0 and kept.read_bytes() == (out / phrases.FILE).read_bytes()
    assert table.info["replies"] == 96 and "--phrases-only" in (out / "README.md").read_text()
    assert main(["models", "--drafts-for", str(target)]) == 0
    listed = capsys.readouterr().out
    assert f"the model's own phrases: {len(table):,} contexts from 96 of its replies" in listed and str(kept) in listed
    assert main(["models", "--drafts-for", str(target), "--json"]) == 0  # and in the JSON listing, as one entry
    rows = [r for r in json.loads(capsys.readouterr().out) if r.get("format") == "phrases"]
    assert rows == [{"name": "the model's own phrases", "path": str(kept), "format": "phrases", "drafter": "phrases",
                     "contexts": len(table), "replies": 96, "compatible": True, "incompatibility": ""}]
    said: list[str] = []
    e = specdesk.load(str(target), device="cpu", progress=said.append)
    assert e.drafter == "phrases" and e.draft is None and len(e.phrases) == len(table)
    assert any(s.startswith("drafting with the table of this model's phrases") for s in said)
    for prompt in PROMPTS[:2]:
        want = e.generate(prompt, drafter="none", max_new_tokens=40).token_ids
        assert e.generate(prompt, k=4, max_new_tokens=40).token_ids == want
    p = plan(str(target), device="cpu", budget_bytes=8 << 30, candidate_drafts=[])
    assert [b for _, label, b in p.rows() if "phrases" in label] == [table.resident_bytes()]
    assert specdesk.load(str(target), drafter="ngram", device="cpu").phrases is None
    with pytest.raises(BadSetting, match="takes neither --kind eagle nor --init-from"):
        from specdesk.core.distill.pipeline import DistillConfig, distill

        list(distill(DistillConfig(target=str(target), out=tmp_path / "x", phrases_only=True, kind="eagle")))
