"""Sampling's own work in rows.c (now) against torch's forms with the draft's rows widened to the vocabulary (before),
side by side in one process on SmolLM2 q4 with its draft: the bench's 8 chat prompts, 96 tokens, temperature 0.7;
per round and arm pooled tokens/s of plain decoding, draft k=1, k=2 and k=auto, and each arm's speed-ups over its own
plain decoding (which pays sampling too); which arm goes first alternates prompt by prompt.

    python devscripts/kauto_ab/ab_sampled.py PATH/SmolLM2-135M-Instruct.Q4_1.gguf 12
"""

import statistics as st
import sys

import torch

import specdesk
from specdesk.core import drafters, kernels
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite

FAST = {name: getattr(kernels, name) for name in ("softmax", "sample_rows", "residual")}
propose = drafters.ModelDrafter.propose


def widened(self, *a, **kw):
    p = propose(self, *a, **kw)
    if p.prob_ids is not None:  # as before: every row widened to the vocabulary, no columns passed on
        full = torch.zeros(p.probs.shape[0], self.target_vocab, dtype=p.probs.dtype)
        p.probs, p.prob_ids, p.prob_pos = full.index_copy_(1, p.prob_ids, p.probs), None, None
    return p


def arm(name: str) -> None:
    for f, fn in FAST.items():
        setattr(kernels, f, fn if name == "now" else (lambda *a, **kw: None))
    drafters.ModelDrafter.propose = propose if name == "now" else widened


G = sys.argv[1]
rounds = int(sys.argv[2])
e = specdesk.load(G, "resources/models/smollm2-135m-instruct-draft", drafter="model", device="cpu", target_quant="q4")
e.reuse_cache = False
e.warm_up()
prompts = [prompt_ids(e, p) for p in chat_suite(8)]
methods = {"plain": dict(drafter="none"), "k=1": dict(drafter="model", k=1), "k=2": dict(drafter="model", k=2),
           "k=auto": dict(drafter="model", k="auto")}
allr: dict = {}
for rnd in range(rounds):
    tot: dict = {}
    for pi, ids in enumerate(prompts):
        for a in (("before", "now") if (rnd + pi) % 2 == 0 else ("now", "before")):
            arm(a)
            for m, kw in methods.items():
                r = e.generate(ids, max_new_tokens=96, temperature=0.7, seed=1000 * rnd + pi, **kw)
                t = tot.setdefault((a, m), [0, 0.0])
                t[0] += r.stats.new_tokens
                t[1] += r.stats.decode_seconds
    arm("now")
    row = {}
    for a in ("before", "now"):
        plain = tot[(a, "plain")][0] / tot[(a, "plain")][1]
        row[f"{a}/plain tok/s"] = plain
        for m in ("k=1", "k=2", "k=auto"):
            row[f"{a}/{m}"] = tot[(a, m)][0] / tot[(a, m)][1] / plain
    for k, v in row.items():
        allr.setdefault(k, []).append(v)
    print("round", rnd, {k: round(v, 3) for k, v in row.items()}, flush=True)
print({k: "mean %.3f median %.3f" % (st.mean(v), st.median(v)) for k, v in allr.items()})
