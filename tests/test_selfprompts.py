"""``specdesk distill --prompt-set self``: the target writes the prompts it answers (distill/selfprompts.py). On the
real SmolLM2-135M-Instruct (a tiny random model never ends a user's message), and on the tiny target for the errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import make_llama
from test_gguf_smollm2 import smollm2_gguf  # noqa: F401 - the cached-download fixture


@pytest.fixture(scope="module")
def smollm2_target(smollm2_gguf):  # noqa: F811
    """The target as `specdesk distill` loads it to write prompts on this CPU: bfloat16 where matmuls are fast in it
    (AMX), else float32 (bfloat16 on an AVX2-only CPU took 142 s for this file's batches, float32 ~50)."""
    from specdesk.core.distill.pipeline import data_dtype
    from specdesk.core.loading import load_model

    return load_model(str(smollm2_gguf), dtype=data_dtype("cpu"), device="cpu")


def test_the_user_prefix_is_the_template_up_to_a_users_message(smollm2_target):
    from specdesk.core.distill.data import chat_ids
    from specdesk.core.distill.selfprompts import user_prefix

    tok = smollm2_target.tokenizer
    prefix = user_prefix(tok)
    assert tok.decode(prefix).endswith("<|im_start|>user\n") and "<|im_start|>system" in tok.decode(prefix)
    assert chat_ids(tok, "Hello there")[:len(prefix)] == prefix  # what the answering step puts before a message


def test_the_target_writes_distinct_ended_messages_resumably(smollm2_target, tmp_path):
    from specdesk.core.distill import selfprompts
    from specdesk.core.distill.prompts import FREE_PROMPTS
    from specdesk.core.errors import BadSetting

    t = smollm2_target
    whole, split = tmp_path / "whole.json", tmp_path / "split.json"
    # batches of 4 (distill's are 64): the same code, a few seconds a batch on 2 cores
    seen = list(selfprompts.write(t.model, t.tokenizer, whole, 6, seed=3, eos_ids=t.eos_ids, batch=4))
    assert seen[0] == (0, 6) and seen[-1] == (6, 6) and [k for k, _ in seen] == sorted(k for k, _ in seen)
    state = selfprompts.load(whole)
    msgs = state["prompts"]
    assert len(msgs) >= 6 and len({" ".join(m.casefold().split()) for m in msgs}) == len(msgs)
    assert all(len(m.split()) >= selfprompts.MIN_WORDS and "<|im" not in m for m in msgs)
    assert not set(msgs) & set(FREE_PROMPTS)
    letters = sum(c.isalpha() for m in msgs for c in m) / sum(len(m) for m in msgs)
    assert letters > 0.6  # prose, not token soup
    assert state["batches"] >= 2
    # stopped after its first batch and resumed: the same messages in the same order
    for _ in selfprompts.write(t.model, t.tokenizer, split, 1, seed=3, eos_ids=t.eos_ids, batch=4):
        pass
    assert selfprompts.load(split)["batches"] == 1
    list(selfprompts.write(t.model, t.tokenizer, split, 6, seed=3, eos_ids=t.eos_ids, batch=4))
    assert selfprompts.load(split)["prompts"] == msgs
    with pytest.raises(BadSetting, match="other settings"):  # another seed
        list(selfprompts.write(t.model, t.tokenizer, split, 16, seed=4, eos_ids=t.eos_ids, batch=4))
    with pytest.raises(BadSetting, match="other settings"):  # another batch size draws other messages
        list(selfprompts.write(t.model, t.tokenizer, split, 16, seed=3, eos_ids=t.eos_ids, batch=8))
    assert selfprompts.VERSION == selfprompts.version(selfprompts.BATCH)  # distill's fingerprint: its own batch


def test_distill_answers_the_prompts_the_target_wrote(smollm2_gguf, tmp_path, monkeypatch):  # noqa: F811
    from specdesk.core.distill import selfprompts
    from specdesk.core.distill.data import chat_ids
    from specdesk.core.distill.pipeline import DistillConfig, distill
    from specdesk.core.distill.prompts import fingerprint
    from specdesk.core.distill.workdir import WorkDir

    monkeypatch.setattr(selfprompts, "BATCH", 8)  # its writer in batches of 8, not 64: seconds on 2 cores

    out = tmp_path / "self-draft"
    cfg = DistillConfig(target=str(smollm2_gguf), out=out, steps=3, device="cpu", train_prompts=4,
                        held_out_prompts=2, max_new_tokens=12, answer_batch=8, layers=1, head_vocab=512, batch=4,
                        eval_every=3, prompts="self")
    events = list(distill(cfg))
    assert any(e.phase == "prompts" and "wrote" in e.message for e in events) and events[-1].phase == "done"
    work = WorkDir(out)
    written = selfprompts.load(work.root / selfprompts.FILE)["prompts"]
    tok = selfprompts_tokenizer(out)
    held = [s.prompt for s in work.load_shard("held-out")]
    train = [s.prompt for name in work.train_shards() for s in work.load_shard(name)]
    assert held == [chat_ids(tok, m) for m in written[:2]]  # held out: the first written
    assert train == [chat_ids(tok, m) for m in written[2:6]] and not set(map(tuple, held)) & set(map(tuple, train))
    assert json.loads(work.settings_path.read_text())["prompt_set"] == fingerprint("self") != fingerprint("varied")
    card = (out / "README.md").read_text()
    assert "the target wrote itself" in card and "distill.json" not in card
    assert json.loads((out / "distill.json").read_text())["prompt_set"] == "self"
    assert (out / "phrases.safetensors").exists()


def selfprompts_tokenizer(folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def test_a_target_without_a_chat_template_is_one_clear_error(tmp_path, capsys):
    from specdesk.cli import main

    target = make_llama(tmp_path / "plain", hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64)
    rc = main(["distill", "--target", str(target), "--out", str(tmp_path / "d"), "--prompt-set", "self",
               "--steps", "1", "--device", "cpu"])
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert rc != 0 and last.startswith("specdesk: error: --prompt-set self needs a target with a chat template")
    assert "Traceback" not in err and not (tmp_path / "d" / ".distill").exists()  # the same --out can be used again
