"""`specdesk bench`'s chat category (held-out chat prompts through the chat template) and the figures issue 16
asks of it: per-position acceptance, tokens per target pass, k=auto against the best fixed k."""

from __future__ import annotations

import json
import shutil

import pytest

from specdesk.core.bench.analysis import analyse, summaries
from specdesk.core.bench.runner import Run, position_counts
from specdesk.core.events import StepEvent

TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def chatty(tmp_path_factory, tiny_target):
    """The tiny target with a chat template."""
    dest = tmp_path_factory.mktemp("bench-chat") / "chatty"
    shutil.copytree(tiny_target, dest)
    cfg = json.loads((dest / "tokenizer_config.json").read_text())
    cfg["chat_template"] = TEMPLATE
    (dest / "tokenizer_config.json").write_text(json.dumps(cfg))
    return dest


@pytest.fixture(scope="module")
def reduced_draft(chatty, tmp_path_factory):
    """A distilled-draft folder for ``chatty`` whose head covers 512 tokens (1000..1511), untrained."""
    import torch

    import specdesk
    from specdesk.core.distill.draft import build_draft, save_draft

    target = specdesk.load(str(chatty), drafter="none", device="cpu").target
    head = torch.arange(1000, 1512)
    out = tmp_path_factory.mktemp("bench-chat") / "reduced-draft"
    save_draft(build_draft(target.model, 1, head), out, target, head_ids=head, target_sha256="0" * 64,
               target_source=chatty)
    return out


def test_chat_prompts_are_held_out_and_go_through_the_chat_template(chatty, tiny_draft):
    import specdesk
    from specdesk.core.bench.runner import prompt_ids
    from specdesk.core.bench.suite import build_suite
    from specdesk.core.distill.prompts import FREE_PROMPTS, TEMPLATE_SETS, all_prompts, chat_prompts

    chat = [p for p in build_suite(3, chat=True) if p.category == "chat"]
    assert len(chat) == 3 and len({p.name for p in chat}) == 3 and all(p.chat for p in chat)
    training = set(chat_prompts(640, held_out=False))
    assert not {p.text for p in chat} & training  # never a prompt the distiller trained on
    assert [p.text for p in chat] == chat_prompts(3, held_out=True, seed=0)
    assert not any(p.category == "chat" for p in build_suite(3))  # only when asked for
    free = [p for p in build_suite(3, chat=True) if p.category == "chat-free"]
    assert [p.text for p in free] == FREE_PROMPTS[:3] and all(p.chat for p in free)
    # hand-written prompts in forms no template writes: no prompt either set can write, training or held-out, is one
    # (every one enumerated: drawing 100,000 of each with chat_prompts took 200 s of the suite); the set "self" has no
    # templates: the prompts its targets write leave these out (test_selfprompts)
    for prompt_set in TEMPLATE_SETS:
        train, held = all_prompts(prompt_set), all_prompts(prompt_set, held_out=True)
        assert len(train) > 15_000 and not train & held and not (train | held) & set(FREE_PROMPTS)
        assert set(chat_prompts(500, prompt_set=prompt_set)) <= train  # what the distiller draws from
        assert set(chat_prompts(100, held_out=True, prompt_set=prompt_set)) <= held

    engine = specdesk.load(str(chatty), str(tiny_draft), device="cpu")
    ids = prompt_ids(engine, chat[0])
    text = engine.tokenizer.decode(ids)
    assert text == f"<|user|>{chat[0].text}\n<|assistant|>"  # the template's own markers around the message
    assert ids != engine.encode(chat[0].text)


def _steps(pairs):
    return [StepEvent(index=i, token_ids=tuple(range(a + 1)), drafted=d, accepted=a, k=d, draft_s=0.0, verify_s=0.0,
                      step_s=0.0, elapsed_s=0.0, context_len=10 + i) for i, (d, a) in enumerate(pairs)]


def _run(method, k, steps, decode_s, temperature=0.0):
    reached, accepted = position_counts(steps)
    new = sum(len(s.token_ids) for s in steps)
    return Run(category="chat", prompt="p", method=method, kind="specdesk", k=k, temperature=temperature, repeat=0,
               new_tokens=new, wall_s=decode_s, decode_s=decode_s, forwards=len(steps),
               drafted=sum(s.drafted for s in steps), accepted=sum(s.accepted for s in steps),
               position_reached=reached, position_accepted=accepted)


def test_per_position_acceptance_from_known_steps():
    # (drafted, accepted) per step. Position i is reached when drafted >= i and the i-1 before it were accepted:
    # reached 5, 4, 2, 1 times; accepted 4, 3, 1, 1 times.
    steps = _steps([(4, 4), (4, 2), (4, 0), (4, 1), (2, 2)])
    reached, accepted = position_counts(steps)
    assert (reached, accepted) == ([5, 4, 2, 1], [4, 3, 1, 1])
    assert sum(accepted) == sum(s.accepted for s in steps)  # every accepted token sits at one position

    plain = _run("plain", 0, _steps([(0, 0)] * 20), 2.0)
    k4 = _run("draft k=4", 4, steps, 1.0)  # 14 tokens in 5 passes
    k4_more = _run("draft k=4", 4, _steps([(3, 0)]), 0.1)
    k4_more.prompt = "q"
    plain_q = _run("plain", 0, _steps([(0, 0)] * 20), 2.0)
    plain_q.prompt = "q"
    row = next(r for r in analyse([plain, k4]) if r.method == "draft k=4")
    assert row.position_acceptance == [0.8, 0.75, 0.5, 1.0]
    assert row.mean_accepted_length == 14 / 5
    pooled = next(r for r in analyse([plain, k4, plain_q, k4_more]) if r.method == "draft k=4")
    assert pooled.position_acceptance == [4 / 6, 0.75, 0.5, 1.0]
    alone = next(r for r in analyse([plain_q, k4_more]) if r.method == "draft k=4")
    assert alone.position_acceptance == [0.0, None, None]  # drafted 3, the first rejected: 2 and 3 never reached
    assert next(r for r in analyse([plain]) if r.method == "plain").position_acceptance is None


def test_summary_takes_the_best_fixed_k_and_compares_k_auto_with_it():
    steps = _steps([(2, 2), (2, 1)])  # 5 tokens in 2 passes
    runs = [_run("plain", 0, _steps([(0, 0)] * 5), 1.0),
            _run("draft k=2", 2, steps, 0.5),  # 2.0x
            _run("draft k=4", 4, _steps([(4, 0)] * 5), 0.8),  # 1.25x
            _run("draft k=auto", "auto", steps, 0.625),  # 1.6x: 0.8 of the best fixed k
            _run("lookup k=4", 4, _steps([(4, 0)] * 5), 0.9),
            _run("plain", 0, _steps([(0, 0)] * 5), 1.0, temperature=0.7),
            _run("draft k=2", 2, steps, 0.8, temperature=0.7)]
    (s,) = summaries(analyse(runs))
    assert (s.category, s.best_k, s.best_k_speedup, s.best_k_tokens_per_pass) == ("chat", "draft k=2", 2.0, 2.5)
    assert abs(s.auto_vs_best_k - 0.8) < 1e-12 and abs(s.lookup_speedup - 1 / 0.9) < 1e-12
    assert (s.sampled_temperature, s.sampled, s.sampled_speedup) == (0.7, "draft k=2", 1.25)
    assert s.best_k_position_acceptance == [1.0, 0.5] and s.best_k_acceptance == 0.75


def test_bench_chat_category_reports_the_chat_figures(chatty, reduced_draft, tiny_draft, tiny_target, tmp_path,
                                                      capsys):
    from specdesk.cli import main

    out, md = tmp_path / "chat.json", tmp_path / "chat.md"
    assert main(["bench", "--target", str(chatty), "--draft", str(reduced_draft), "--quick", "--repeats", "1",
                 "--categories", "chat", "--json", str(out), "--markdown", str(md)]) == 0
    # transformers reads a reduced head's positions as token ids (and its sampling fails): left out, said so
    assert "skipping transformers' assisted generation" in capsys.readouterr().err
    data = json.loads(out.read_text())
    assert {p.split(":")[0] for p in data["meta"]["prompts"]} == {"chat"}
    assert not [m for m in data["meta"]["methods"] if m.startswith("hf-assisted")] and "hf-lookup k=4" in \
        data["meta"]["methods"]
    (s,) = data["summary"]
    assert s["category"] == "chat" and s["best_k"] in ("draft k=2", "draft k=4")
    assert s["auto_vs_best_k"] > 0 and s["lookup_speedup"] > 0 and s["sampled_temperature"] == 0.7
    assert s["best_k_tokens_per_pass"] >= 1.0 and len(s["best_k_position_acceptance"]) == int(s["best_k"][-1])
    rows = {(r["method"], r["temperature"]): r for r in data["rows"]}
    assert rows[("draft k=4", 0.0)]["identical"] == "1/1"  # through the template, still exact
    assert len(rows[("draft k=4", 0.0)]["position_acceptance"]) == 4
    text = md.read_text()
    assert "## Summary" in text and "| chat |" in text and "## chat, temperature 0.7" in text
    assert "by position |" in text

    # a target without a chat template: the chat category is skipped in one line, and alone it leaves nothing
    assert main(["bench", "--target", str(tiny_target), "--draft", str(tiny_draft), "--quick",
                 "--categories", "chat"]) == 2
    err = capsys.readouterr().err
    assert "skipping the chat category" in err and "has no chat template" in err


def test_per_category_is_checked_in_one_line(capsys):
    from specdesk.cli import main

    rc = main(["bench", "--per-category", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == ["specdesk: error: --per-category must be between 1 and 64"]
