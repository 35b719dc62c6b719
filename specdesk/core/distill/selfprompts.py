"""Prompts the target writes itself (Magpie, Xu et al. 2024): given its chat template up to where a user's message
begins, an instruct model writes a user's message, the kind of request it was tuned to answer.

No list of ours decides what the draft learns: a fine-tune on code writes code questions, a model tuned on
another language writes in it. Sampled at temperature 0.8 (at 1.0 a third of SmolLM2-135M-Instruct's messages
drifted into word salad; at 0.8 almost all were plain requests: "I'm planning a trip to Paris with my family. Can
you help me plan a budget-friendly trip...?"). A message counts when the target ended it with an end token within
:data:`MAX_TOKENS`, has :data:`MIN_WORDS` words or more, and is new (compared case- and space-folded); the
bench's prompts (hand-written and held-out template prompts) are never kept, so they stay held out.

The messages are written in seeded batches and saved after each one (``<out>/.distill/self-prompts.json``), so a
stopped run resumes where it stopped, and a resumed run that wants more goes on with the same sequence.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import torch

from specdesk.core.errors import BadSetting

TEMPERATURE = 0.8
MAX_TOKENS = 64  # a message the target has not ended by then is dropped (it rambles)
MIN_WORDS = 3
BATCH = 64
FILE = "self-prompts.json"


def version(batch: int) -> str:
    """The writer's settings: a resumed run whose writer differs cannot extend its list (a batch's draws depend
    on its size, so the size is one of them)."""
    return f"magpie t={TEMPERATURE} max={MAX_TOKENS} min_words={MIN_WORDS} batch={batch} v1"


VERSION = version(BATCH)  # `specdesk distill`'s writer (the pipeline's fingerprint of the "self" prompt set)


def user_prefix(tokenizer) -> list[int]:
    """The token ids of the chat template up to where a user's first message begins (the system turn included)."""
    if not getattr(tokenizer, "chat_template", None):
        raise BadSetting("--prompt-set self needs a target with a chat template: it writes a user's message where "
                         "its template starts one (this target has none; use --prompt-set varied)")
    mark = "\x00SPECDESK-USER-MESSAGE\x00"
    text = tokenizer.apply_chat_template([{"role": "user", "content": mark}], tokenize=False,
                                         add_generation_prompt=False)
    if mark not in text:
        raise BadSetting("--prompt-set self: this target's chat template does not show a user's message as written")
    return [int(i) for i in tokenizer(text.split(mark)[0], add_special_tokens=False)["input_ids"]]


def _key(text: str) -> str:
    return " ".join(text.casefold().split())


def clean(tokenizer, ids: list[int], ends: frozenset[int]) -> str | None:
    """A written message as its text, or None where it does not count (not ended, too short)."""
    if not ids or ids[-1] not in ends:
        return None
    text = tokenizer.decode(ids[:-1], skip_special_tokens=True).strip()
    if len(text.split()) < MIN_WORDS:
        return None
    return text


def _reserved() -> set[str]:
    """The bench's prompts (chat-free's hand-written ones, chat's held-out template prompts): never kept."""
    from specdesk.core.distill.prompts import FREE_PROMPTS, TEMPLATE_SETS, all_prompts

    out = {_key(p) for p in FREE_PROMPTS}
    for name in TEMPLATE_SETS:
        out |= {_key(p) for p in all_prompts(name, held_out=True)}
    return out


def _end_ids(tokenizer, eos_ids: frozenset[int]) -> frozenset[int]:
    """The ids that end a user's message: the model's end tokens and the template's end-of-turn token."""
    vocab = tokenizer.get_vocab()
    return frozenset(eos_ids) | {int(vocab[name]) for name in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "</s>")
                                 if name in vocab}


def load(path: Path) -> dict:
    """The saved state: {"version", "seed", "batches" written so far, "prompts" kept in order}."""
    return json.loads(Path(path).read_text())


def write(model, tokenizer, path: Path, need: int, *, seed: int, eos_ids: frozenset[int],
          batch: int | None = None) -> Iterator[tuple[int, int]]:
    """Write messages until ``path`` holds ``need`` (or the target stops writing new ones): yields (kept, need) after
    each batch. Batch i draws from a generator seeded by (seed, i), so the list is one sequence however the run is
    split. ``batch``: messages drawn at once (None: BATCH). A file from another seed or writer is refused
    (BadSetting)."""
    from specdesk.core.distill import batchgen

    path, batch = Path(path), BATCH if batch is None else batch
    state = {"version": version(batch), "seed": seed, "batches": 0, "prompts": []}
    if path.exists():
        state = load(path)
        if state.get("seed") != seed or state.get("version") != version(batch):
            raise BadSetting(f"{path} was written with other settings (seed {state.get('seed')}, "
                             f"{state.get('version')}); use another --out")
    prefix = user_prefix(tokenizer)
    ends = _end_ids(tokenizer, eos_ids)
    seen = _reserved() | {_key(p) for p in state["prompts"]}
    pad = min(eos_ids) if eos_ids else 0
    # a target that has run out of new messages stops the writing: at most 4x the batches the list should need
    give_up = state["batches"] + 4 * max(1, (need - len(state["prompts"])) // batch + 1) + 4
    yield len(state["prompts"]), need
    while len(state["prompts"]) < need and state["batches"] < give_up:
        g = torch.Generator().manual_seed(seed * 1_000_003 + state["batches"])
        if batchgen.supported(model):
            res = batchgen.generate(model, [prefix] * batch, max_new_tokens=MAX_TOKENS, eos_ids=ends, pad=pad,
                                    topk=1, temperature=TEMPERATURE, generator=g)
        else:  # any other architecture: Hugging Face's generate
            from specdesk.core.distill.data import _generate

            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=g)))
            res = _generate(model, [prefix] * batch, max_new_tokens=MAX_TOKENS, eos_ids=ends, pad=pad, topk=1,
                            temperature=TEMPERATURE)
        for ids, _, _ in res:
            text = clean(tokenizer, ids, ends)
            if text is not None and _key(text) not in seen:
                seen.add(_key(text))
                state["prompts"].append(text)
        state["batches"] += 1
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=0, ensure_ascii=False))
        os.replace(tmp, path)
        yield min(len(state["prompts"]), need), need
