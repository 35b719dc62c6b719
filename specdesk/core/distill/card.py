"""The model card (README.md) of a distilled draft: what it drafts for, how it was made, what it measured."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path


_KINDS = {"templates": "coding, rewriting, explaining, lists, questions",
          "varied": "the prompt set \"varied\": coding, rewriting, explaining, lists, questions, advice, comparisons, "
                    "short writing, fixes, recommendations, sums, decisions, descriptions, why-questions, "
                    "definitions, plans, programming concepts, commands, role-play",
          "self": "the prompt set \"self\": a user's messages as the target writes them when its chat template "
                  "starts one, sampled at temperature 0.8"}


def _source(prompt_set: str) -> str:
    """Where the card's prompts came from, and what they ask, up to the parenthesis' first semicolon."""
    if prompt_set == "self":
        return f"the target wrote itself\n  (`specdesk/core/distill/selfprompts.py`: {_KINDS['self']}"
    return f"written from templates in\n  `specdesk/core/distill/prompts.py` ({_KINDS[prompt_set]}"


def _held_out(prompt_set: str) -> str:
    if prompt_set == "self":
        return "the first prompts the target wrote (no training prompt repeats one)"
    return "subjects no training prompt uses"


def write_card(out: Path, cfg, trainer, *, target_name: str, target_source: Path, target_sha256: str, cpu: str,
               torch_threads: int) -> None:
    out = Path(out)
    own = (out / "model.safetensors").stat().st_size if (out / "model.safetensors").exists() else 0
    head = trainer.head_ids.numel() if trainer.head_ids is not None else "all"
    curve = "\n".join(f"| {s} | {t / 60:.1f} | {a:.3f} | {p:.2f} |" for s, t, a, p in trainer.curve)
    per_pos = ", ".join(f"{p:.2f}" for p in trainer.per_position)
    held_greedy = sum(1 for s in trainer.held)
    temps = Counter(s.temperature for s in trainer.train)
    sampled = ", ".join(f"{n} at temperature {t:g}" for t, n in sorted(temps.items()) if t > 0) or "none sampled"
    init_from = getattr(cfg, "init_from", None)
    prompt_set = getattr(cfg, "prompts", None) or "templates"
    previous = _previous(init_from)
    start = "initialised from the target's first layers"
    if init_from:
        start = (f"initialised from the draft in `{Path(init_from).name}`"
                 f"{' (made by: `' + previous['command'] + '`)' if previous.get('command') else ''} and trained on")
        start += (f" replies to prompts {cfg.skip_prompts + 1} onwards" if cfg.skip_prompts else " further replies")
    text = f"""---
library_name: transformers
tags: [speculative-decoding, draft-model, specdesk]
base_model_relation: distilled
---

# Draft for {target_name} (distilled by specdesk)

A speculative-decoding draft for **{target_name}** (`{Path(target_source).name}`, sha256 `{target_sha256}`).
It has {cfg.layers} Llama decoder layer(s) of the target's shape, {start},
and **borrows the target's input embeddings and output head at load time** (the head restricted to the {head}
tokens most frequent in the target's replies; the draft proposes no other token, which keeps decoding exact).
This folder holds only the draft's own weights ({own / 1e6:.1f} MB, float16); `config.json` says what is borrowed
under its `specdesk` key. specdesk loads it as the draft of that target:

    specdesk generate --target {target_source} --draft {out.name} --prompt "..."

For engines that cannot borrow (vLLM, transformers), write an ordinary model folder (embeddings copied in, the
whole head):

    specdesk distill --standalone {out.name} --target {target_source} --out {out.name}-standalone

## How it was made

    {cfg.command or "(from the Python API)"}

- Data: the target's own replies to {len(trainer.train)} chat prompts {_source(prompt_set)}; replies {sampled},
  the rest greedy), at most {cfg.max_new_tokens} new tokens each: {trainer.train_tokens} reply
  tokens, with the target's top-{cfg.topk} distribution at every position. Held out: {held_greedy} prompts,
  {_held_out(prompt_set)} (greedy replies, {trainer.held_tokens} tokens). Seed {cfg.seed}.
- Loss: forward KL to the target's top-{cfg.topk} distribution (restricted to the head's tokens), on reply
  positions only; AdamW, lr {cfg.lr}, {cfg.batch} replies per step, cosine decay.
- Training: {trainer.step} steps, {trainer.elapsed / 60:.1f} minutes of training on {cpu} ({torch_threads} torch
  threads), not counting the target's answering the prompts.

## Measured (held-out prompts, teacher-forced on the target's greedy replies)

- Agreement (the draft's top token is the target's): **{trainer.last_agreement:.3f}**
- Greedy tokens per target pass at k=4 (exact for these replies, from the runs of agreement): **{trainer.tokens_per_pass:.2f}**
- Acceptance at draft positions 1..4 (given the earlier ones accepted): {per_pos}

| step | training minutes | agreement | tokens per pass (k=4) |
|---:|---:|---:|---:|
{curve}

{_phrases_section(out)}See specdesk's README for speeds measured with `specdesk bench`.
"""
    (out / "README.md").write_text(text, encoding="utf-8")
    (out / "distill.json").write_text(json.dumps({
        "target": target_name, "target_file": Path(target_source).name, "target_sha256": target_sha256,
        "command": cfg.command, "steps": trainer.step, "training_seconds": round(trainer.elapsed, 1),
        "train_replies": len(trainer.train), "train_tokens": trainer.train_tokens, "held_out_replies": held_greedy,
        "held_out_tokens": trainer.held_tokens, "agreement": trainer.last_agreement,
        "tokens_per_pass_k4": trainer.tokens_per_pass, "per_position_acceptance_k4": trainer.per_position,
        "curve": [list(c) for c in trainer.curve], "cpu": cpu, "prompt_set": prompt_set,
        **({"init_from": Path(init_from).name, "skip_prompts": cfg.skip_prompts, "previous": previous}
           if init_from else {})}, indent=2), encoding="utf-8")


def _phrases_section(out: Path) -> str:
    """The card's words on the folder's table of the target's phrases (core/phrases.py), if it has one."""
    from specdesk.core import phrases

    table = phrases.find(out)
    if table is None:
        return ""
    i = table.info
    return f"""## The target's phrases

`{phrases.FILE}` ({(out / phrases.FILE).stat().st_size / 1e6:.1f} MB): the {len(table):,} contexts of 1 to
{table.max_n} tokens after which the target's {int(i.get("replies", 0)):,} training replies ({int(i.get("tokens", 0)):,} tokens)
went on with the same token at least {float(i.get("min_share", 0)):.0%} of the time (seen {i.get("min_count")}+ times).
specdesk proposes those continuations without running any model: drafter `phrases` (prompt lookup, then these), and
beside the draft model where k=auto leaves the model out.

"""


def _previous(init_from: str | None) -> dict:
    """What the --init-from draft's distill.json says of how it was made (its curve left out), or {}."""
    from specdesk.core.userdirs import read_json_dict

    old = read_json_dict(Path(init_from) / "distill.json") if init_from else {}
    return {k: v for k, v in old.items() if k != "curve"}
