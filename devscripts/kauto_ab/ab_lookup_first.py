"""The default drafter's two lookup settings, side by side in one process (devscripts/kauto_ab/harness.py): drafter
model+lookup at k=auto as shipped (prompt lookup's continuation taken from 2 tokens on, matched on the context's last
2-4 tokens) against a continuation taken only from 3 tokens on (min3) and one matched on the last 3-4 tokens only
(ngram3); q4 SmolLM2 with its draft on the bench's 8 chat prompts, 96 tokens; fresh controllers every 2 rounds (as a
bench's 2 repeats), greedy ones from the engine's warm-up lesson as the engine makes them:

    python devscripts/kauto_ab/ab_lookup_first.py PATH/SmolLM2-135M-Instruct.Q4_1.gguf TEMPERATURE ROUNDS
"""

import sys
from pathlib import Path

import specdesk
from specdesk.core.adaptive import AdaptiveK
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite
from specdesk.core.drafters import LookupFirstDrafter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Controllers, side_by_side, taught  # noqa: E402

G, temperature, rounds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
e = specdesk.load(G, "resources/models/smollm2-135m-instruct-draft", device="cpu", target_quant="q4")
e.reuse_cache = False
e.warm_up()
prompts = [prompt_ids(e, p) for p in chat_suite(8)]
arms = {"shipped": (2, (4, 2)), "min3": (3, (4, 2)), "ngram3": (2, (4, 3))}  # (min_tokens, (ngram max, min))
defaults = LookupFirstDrafter.__init__.__defaults__


def make(name: str) -> AdaptiveK:
    return taught(AdaptiveK(), e, temperature)


ctls = Controllers(make)


def run(name: str, ids: list[int], seed: int):
    kw = dict(max_new_tokens=96, temperature=temperature, seed=seed)
    if name == "plain":
        return e.generate(ids, drafter="none", **kw)
    min_tokens, e.ngram = arms[name]
    LookupFirstDrafter.__init__.__defaults__ = (min_tokens,)
    try:
        return e.generate(ids, drafter="model+lookup", k="auto", controller=ctls.take(name), **kw)
    finally:
        LookupFirstDrafter.__init__.__defaults__ = defaults
        e.ngram = arms["shipped"][1]


side_by_side(rounds, prompts, list(arms), run, lambda: ctls.renew(list(arms)))
