"""A target with no draft, side by side in one process (twenty-third sitting): prompt lookup (drafter ngram, what
specdesk drafted with before) against drafter phrases with the table `specdesk distill --phrases-only` made (lookup,
then the table), both k=auto, fresh controllers every 2 rounds; q4 SmolLM2 standing in for a model without a draft:

    python devscripts/kauto_ab/ab_phrases_only.py GGUF TABLE_FOLDER chat|free TEMPERATURE ROUNDS [PROMPTS]
"""

import sys
from pathlib import Path

import specdesk
from specdesk.core import phrases
from specdesk.core.adaptive import AdaptiveK
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite, free_chat_suite

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Controllers, side_by_side, taught  # noqa: E402

G, folder, suite, temperature, rounds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
n = int(sys.argv[6]) if len(sys.argv) > 6 else 8
e = specdesk.load(G, drafter="ngram", device="cpu", target_quant="q4")
e.phrases = phrases.find(Path(folder))
e.reuse_cache = False
e.warm_up()
prompts = [prompt_ids(e, p) for p in (chat_suite(n) if suite == "chat" else free_chat_suite(n))]
arms = ["lookup", "phrases"]
# as the engine makes them: with no draft model warm_up teaches no costs, so controllers start untaught
ctls = Controllers(lambda name: taught(AdaptiveK(), e, temperature) if e._costs is not None else AdaptiveK())


def run(name: str, ids: list[int], seed: int):
    kw = dict(max_new_tokens=96, temperature=temperature, seed=seed)
    if name == "plain":
        return e.generate(ids, drafter="none", **kw)
    return e.generate(ids, drafter="ngram" if name == "lookup" else "phrases", k="auto", controller=ctls.take(name),
                      **kw)


side_by_side(rounds, prompts, arms, run, lambda: ctls.renew(arms))
