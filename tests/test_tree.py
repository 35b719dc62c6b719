"""Greedy sibling trees (core/tree.py): the layout and the walk analytically, the tree pass against each path run
alone, the kept leaf's cache, and greedy parity with trees on real tiny models and the demo pair."""

from __future__ import annotations

import pytest
import torch

import specdesk
from specdesk.core.errors import BadSetting
from specdesk.core.settings import GenerationSettings
from specdesk.core.target import TargetRunner
from specdesk.core.tree import layout, parse_widths, verify_greedy_tree
from tests.conftest import PROMPTS

CHAIN = [10, 11, 12]


def small_tree():
    # depth 1: chain 10, leaves 20, 21; depth 2: chain 11, leaf 30; depth 3: chain 12
    return layout(torch.tensor([7]), torch.tensor(CHAIN), (torch.tensor([20, 21]), torch.tensor([30])))


def test_layout_lets_each_row_see_only_its_ancestors():
    t = small_tree()
    assert t.tokens.tolist() == [7, 10, 11, 12, 20, 21, 30]
    assert t.depths.tolist() == [0, 1, 2, 3, 1, 1, 2]
    assert t.leaf_depth == [1, 1, 2] and t.leaf_tokens == [20, 21, 30]
    seen = [set(torch.nonzero(row).flatten().tolist()) for row in t.allowed]
    assert seen[:4] == [{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}]  # the chain: causal
    assert seen[4:] == [{0, 4}, {0, 5}, {0, 1, 6}]  # leaves: the last token, the chain above them, themselves


@pytest.mark.parametrize("argmax,want", [
    ([10, 11, 12, 77, 0, 0, 0], (3, 3, [10, 11, 12, 77], None)),  # the whole chain, then the bonus
    ([10, 30, 0, 0, 0, 0, 55], (1, 2, [10, 30, 55], 6)),  # depth 2 disagrees with the chain, agrees with its leaf
    ([21, 0, 0, 0, 0, 44, 0], (0, 1, [21, 44], 5)),  # depth 1's second leaf
    ([30, 0, 0, 0, 0, 0, 0], (0, 0, [30], None)),  # 30 is a leaf of depth 2, not 1: a plain correction
    ([10, 11, 99, 0, 0, 0, 0], (2, 2, [10, 11, 99], None)),  # depth 3 has no leaves
])
def test_the_greedy_walk(argmax, want):
    assert verify_greedy_tree(argmax, CHAIN, small_tree()) == want


def test_widths_are_validated_where_settings_are_made():
    assert parse_widths("4,2,1,1") == (4, 2) and parse_widths("none") == () and parse_widths([1]) == ()
    assert GenerationSettings(tree="3,2").tree == (3, 2) and GenerationSettings().tree == ()
    for bad in ("0", "9", "4,x", "-1"):
        with pytest.raises(BadSetting, match="tree widths"):
            GenerationSettings(tree=bad)


@pytest.fixture(scope="module")
def tiny_model(tiny_target):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_target).eval()


def full_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0, -1]


def test_each_tree_row_gets_the_logits_of_its_own_path_and_a_kept_leaf_its_cache(tiny_model):
    """GQA target (4 query heads, 2 KV heads): the tree mask goes through the grouped attention path."""
    prefix = list(range(5, 25))
    runner = TargetRunner(tiny_model, tiny_model.config.vocab_size)
    runner.prefill(prefix[:-1], 64)
    assert runner.takes_trees
    t = layout(torch.tensor(prefix[-1:]), torch.tensor(CHAIN), (torch.tensor([20, 21]), torch.tensor([30])))
    logits = runner.verify_tree(t)  # (7, V)
    paths = [prefix, prefix + [10], prefix + [10, 11], prefix + [10, 11, 12],
             prefix + [20], prefix + [21], prefix + [10, 30]]
    for row, path in enumerate(paths):
        torch.testing.assert_close(logits[row], full_logits(tiny_model, path), atol=1e-4, rtol=1e-4)
    # keep d_1 = 10 and the depth-2 leaf 30 (row 6): the cache then holds prefix + [10, 30] in order
    runner.settle_tree(len(t.depths), kept=1, leaf_row=6)
    assert runner.cache_len == len(prefix) + 2
    nxt = runner.verify(torch.tensor([3]))  # the bonus token, fed as the next step's last token
    torch.testing.assert_close(nxt[0], full_logits(tiny_model, prefix + [10, 30, 3]), atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def demo():
    return specdesk.load("demo-target", "demo-draft", device="cpu")


@pytest.mark.parametrize("drafter", ["model", "model+lookup"])
def test_greedy_output_with_trees_is_the_targets_and_leaves_are_kept(demo, drafter):
    plain = {p: demo.generate(p, max_new_tokens=32, k=0).token_ids for p in PROMPTS}
    for k in (1, 4, "auto"):
        forwards = {}
        for tree in ((), (4, 2), (8,)):  # (deeper trees: the tiny GQA pair below)
            forwards[tree] = 0
            for p in PROMPTS:
                got = demo.generate(p, max_new_tokens=32, k=k, tree=tree, drafter=drafter)
                assert got.token_ids == plain[p], (drafter, k, tree, p)
                forwards[tree] += got.stats.target_forwards
        if k != "auto":  # (k=auto's choices follow measured costs: not the same from run to run)
            # a kept leaf adds a token to its pass, so fewer passes for the same text
            assert forwards[(4, 2)] < forwards[()] and forwards[(8,)] < forwards[()], (drafter, k, forwards)


def test_trees_keep_parity_on_a_tiny_gqa_pair(tiny_engine):
    from tests.test_parity import reference

    for p in PROMPTS:
        want = reference(tiny_engine.target.model, tiny_engine.encode(p))
        for k, tree in ((2, (4, 2)), (4, (3, 3, 2, 2)), ("auto", (4, 2))):
            got = tiny_engine.generate(p, max_new_tokens=40, k=k, tree=tree)
            assert got.token_ids == want[: len(got.token_ids)], (p, k, tree)


def test_sampled_decoding_and_the_transformers_path_draft_a_chain(demo, tiny_target, tiny_draft):
    a = demo.generate(PROMPTS[0], max_new_tokens=32, k=4, temperature=0.8, seed=11)
    b = demo.generate(PROMPTS[0], max_new_tokens=32, k=4, temperature=0.8, seed=11, tree=(4, 2))
    assert a.token_ids == b.token_ids and a.stats.target_forwards == b.stats.target_forwards
    slow = specdesk.load(str(tiny_target), str(tiny_draft), device="cpu", lean_target=False)
    want = slow.generate(PROMPTS[1], max_new_tokens=24, k=0).token_ids
    assert slow.generate(PROMPTS[1], max_new_tokens=24, k=4, tree=(4, 2)).token_ids == want
    assert not slow._runner.takes_trees and demo._runner.takes_trees  # after a generation: the sequence is built


def test_the_planner_counts_a_trees_leaves_as_the_engine_reserves_them(tiny_engine, tiny_target, tiny_draft):
    """A tree of (4, 2) adds 4 positions per verify pass: both KV buffers reserve them, and the plan counts them."""
    from specdesk.core.plan import plan
    from specdesk.core.plan.memory import capacity, kv_cache_bytes
    from specdesk.core.plan.params import analyze

    result = tiny_engine.generate(PROMPTS[0], max_new_tokens=24, k=3, tree=(4, 2))
    cap = capacity(result.stats.prompt_tokens + 24, 3, 4)
    t, d = analyze(tiny_target), analyze(tiny_draft)
    assert tiny_engine.kv_reserved_bytes() == kv_cache_bytes(t, cap, "float32") + kv_cache_bytes(d, cap, "float32")
    common = dict(device="cpu", context=result.stats.prompt_tokens + 24, k=3, budget_bytes=1 << 34, recommend=False,
                  use_history=False)
    chain = plan(str(tiny_target), str(tiny_draft), **common)
    tree = plan(str(tiny_target), str(tiny_draft), tree="4,2", **common)
    assert tree.target.kv_positions == tree.draft.kv_positions == cap and chain.target.kv_positions == cap - 4
    assert tree.target.kv_bytes > chain.target.kv_bytes and tree.target.logits_bytes > chain.target.logits_bytes
    assert any("draft tree 4,2" in n for n in tree.notes)
    ngram = plan(str(tiny_target), drafter="ngram", tree="4,2", **common)  # prompt lookup drafts no tree
    assert not any("draft tree" in n for n in ngram.notes)
