"""k=auto's acceptance over many replies starting from a prior worth LONG_PRIOR_TRIALS judged steps a state (shipped)
against starting from nothing (before: a fresh controller's first few drafted steps were all it knew), side by side in
one process on q4 SmolLM2 with its draft, fixed k=1 beside them; fresh controllers (taught the engine's warm-up lesson,
as the engine makes them) every 2 rounds, so each pair of rounds is a new session's first replies:

    python devscripts/kauto_ab/ab_prior.py GGUF chat|free TEMPERATURE ROUNDS [PROMPTS]

chat: the bench's held-out template prompts; free: its hand-written ones (chat-free); PROMPTS: how many (default 6).
"""

import sys
from pathlib import Path

import specdesk
from specdesk.core.adaptive import AdaptiveK
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite, free_chat_suite

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Controllers, side_by_side, taught  # noqa: E402


class NoPrior(AdaptiveK):
    LONG_PRIOR_TRIALS = 0.0


G, suite, temperature, rounds = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
n = int(sys.argv[5]) if len(sys.argv) > 5 else 6
e = specdesk.load(G, str(Path(__file__).resolve().parents[2] / "resources/models/smollm2-135m-instruct-draft"),
                  drafter="model", device="cpu", target_quant="q4")
e.reuse_cache = False
e.warm_up()
prompts = [prompt_ids(e, p) for p in (chat_suite(n) if suite == "chat" else free_chat_suite(n))]
arms = {"before": NoPrior, "shipped": AdaptiveK}
ctls = Controllers(lambda name: taught(arms[name](), e, temperature))


def run(name: str, ids: list[int], seed: int):
    kw = dict(max_new_tokens=96, temperature=temperature, seed=seed)
    if name == "plain":
        return e.generate(ids, drafter="none", **kw)
    if name == "k=1":
        return e.generate(ids, drafter="model", k=1, **kw)
    return e.generate(ids, drafter="model", k="auto", controller=ctls.take(name), **kw)


side_by_side(rounds, prompts, list(arms), run, lambda: ctls.renew(list(arms)), reference=("k=1",))
