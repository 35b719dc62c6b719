"""The draft's table of the target's phrases (core/phrases.py), side by side in one process on q4 SmolLM2 with its
bundled draft: drafter model+lookup with the table (its phrases where k=auto leaves the model out: shipped) and
without it (before), and beside them prompt lookup (ngram) and drafter phrases (lookup, then the table), all k=auto;
fresh controllers every 2 rounds:

    python devscripts/kauto_ab/ab_phrases.py GGUF chat|free TEMPERATURE ROUNDS [PROMPTS]
"""

import sys
from pathlib import Path

import specdesk
from specdesk.core.adaptive import AdaptiveK
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite, free_chat_suite

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Controllers, side_by_side, taught  # noqa: E402

G, suite, temperature, rounds = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
n = int(sys.argv[5]) if len(sys.argv) > 5 else 8
e = specdesk.load(G, str(Path(__file__).resolve().parents[2] / "resources/models/smollm2-135m-instruct-draft"),
                  device="cpu", target_quant="q4")
e.reuse_cache = False
e.warm_up()
table = e.phrases
prompts = [prompt_ids(e, p) for p in (chat_suite(n) if suite == "chat" else free_chat_suite(n))]
arms = ["before", "shipped"]
refs = ["lookup", "phrases"]
ctls = Controllers(lambda name: taught(AdaptiveK(), e, temperature))


def run(name: str, ids: list[int], seed: int):
    kw = dict(max_new_tokens=96, temperature=temperature, seed=seed)
    if name == "plain":
        return e.generate(ids, drafter="none", **kw)
    drafter = {"before": "model+lookup", "shipped": "model+lookup", "lookup": "ngram", "phrases": "phrases"}[name]
    e.phrases = None if name == "before" else table
    try:
        return e.generate(ids, drafter=drafter, k="auto", controller=ctls.take(name), **kw)
    finally:
        e.phrases = table


side_by_side(rounds, prompts, arms, run, lambda: ctls.renew(arms + refs), reference=refs)
