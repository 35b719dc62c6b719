"""The batched generator that writes a draft's training data (core/distill/batchgen.py): each row of a left-padded
batch is what the target writes for that prompt alone, its labels are the target's distributions, sampling draws
from the target's law; and the shard plan that answers prompts again when more replies are wanted than prompts."""

from __future__ import annotations

import pytest
import torch

from conftest import make_llama


@pytest.fixture(scope="module")
def gqa_target(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    path = make_llama(tmp_path_factory.mktemp("batchgen") / "t", hidden=64, layers=3, heads=4, kv_heads=2, seed=11)
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


PROMPTS = [[5, 17, 90, 4, 33], [7, 7, 300], [1000, 12, 9, 55, 81, 2, 640, 19], [42]]


def test_each_row_of_a_padded_batch_is_the_prompt_answered_alone_by_generate(gqa_target):
    from specdesk.core.distill import batchgen

    assert batchgen.supported(gqa_target)
    # an end token the model actually writes, so that rows stop at different lengths
    probe = gqa_target.generate(torch.tensor([PROMPTS[0]]), max_new_tokens=12, do_sample=False, eos_token_id=None,
                                pad_token_id=0)[0, len(PROMPTS[0]):].tolist()
    eos = probe[5]
    got = batchgen.generate(gqa_target, PROMPTS, max_new_tokens=12, eos_ids=frozenset({eos}), pad=0, topk=8)
    lengths = set()
    for prompt, (reply, top_ids, top_logp) in zip(PROMPTS, got):
        alone = gqa_target.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, eos_token_id=eos,
                                    pad_token_id=0, output_logits=True, return_dict_in_generate=True)
        want = alone.sequences[0, len(prompt):].tolist()
        want = want[:next((j + 1 for j, t in enumerate(want) if t == eos), len(want))]
        assert reply == want
        lengths.add(len(reply))
        lp = torch.stack(alone.logits, 1)[0, :len(want)].log_softmax(-1)  # (n, V): the target's own law
        vals, idx = lp.topk(8, dim=-1)
        assert top_ids.shape == (len(want), 8) and top_ids.dtype == torch.int32 and top_logp.dtype == torch.float16
        assert torch.equal(top_ids.long(), idx)
        assert torch.allclose(top_logp.float(), vals, atol=2e-3)
    assert got[0][0] == probe[:6] and len(lengths) > 1  # row 0 stopped at the end token, the others elsewhere


def test_sampled_first_tokens_follow_the_target_law_at_the_temperature(gqa_target):
    from specdesk.core.distill import batchgen

    prompt, rows, temp = [5, 17, 90], 4000, 0.8
    got = batchgen.generate(gqa_target, [prompt] * rows, max_new_tokens=1, eos_ids=frozenset(), pad=0, topk=4,
                            temperature=temp, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        p = (gqa_target(torch.tensor([prompt])).logits[0, -1] / temp).softmax(-1)
    counts = torch.bincount(torch.tensor([r[0][0] for r in got]), minlength=p.numel()).double()
    top = p.topk(4).indices
    for t in top.tolist():
        se = (rows * p[t] * (1 - p[t])).sqrt()
        assert abs(counts[t] - rows * p[t]) < 4.5 * se + 1
    assert counts.sum() == rows and len(set(r[0][0] for r in got)) > 1


def test_more_replies_than_prompts_answers_them_again_sampled():
    from specdesk.core.distill.pipeline import training_jobs

    prompts = [f"p{i}" for i in range(10)]
    jobs = training_jobs(prompts, 25, batch=4, sampled_every=2)
    assert sum(len(p) for _, p, _ in jobs) == 25
    assert len({name for name, _, _ in jobs}) == len(jobs)
    first = [j for j in jobs[:3]]  # round 0: 10 prompts in 3 shards, every 2nd at 0.7
    assert [t for _, _, t in first] == [0.0, 0.7, 0.0] and sum(len(p) for _, p, _ in first) == 10
    assert [p for _, ps, _ in jobs[3:6] for p in ps] == prompts and {t for _, _, t in jobs[3:6]} == {0.7}
    assert [p for _, ps, _ in jobs[6:] for p in ps] == prompts[:5] and {t for _, _, t in jobs[6:]} == {1.0}
    assert training_jobs(prompts, 6, batch=4, sampled_every=2) == [("train-00000", prompts[:4], 0.0),
                                                                   ("train-00001", prompts[4:6], 0.7)]


def test_generate_answers_a_model_batchgen_cannot_run_the_same_way(gqa_target):
    from specdesk.core.distill import batchgen, data

    # the fallback for other architectures, held to the batched loop on a model both can run
    want = batchgen.generate(gqa_target, PROMPTS, max_new_tokens=10, eos_ids=frozenset(), pad=0, topk=8)
    got = data._generate(gqa_target, PROMPTS, max_new_tokens=10, eos_ids=frozenset(), pad=0, topk=8, temperature=0.0)
    for (reply, ids, lp), (reply2, ids2, lp2) in zip(want, got):
        assert reply == reply2 and len(reply) == 10 and torch.equal(ids, ids2)
        assert torch.allclose(lp.float(), lp2.float(), atol=2e-3, rtol=1e-3)  # both rounded to float16: one ulp
