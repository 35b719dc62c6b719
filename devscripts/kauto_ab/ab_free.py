"""Prompt lookup beside a draft model (drafter model+lookup, k=auto): a continuation verified where it beats plain
decoding (shipped: AdaptiveK.free_length) against where it beats the step's best, plain decoding or the draft model at
the rate plan() priced it (tried, not kept), with the draft model alone beside them, side by side in one process (which arm runs
first after plain alternates prompt by prompt); per round pooled tokens/s over plain's; fresh controllers every 2
rounds (as a bench's 2 repeats), greedy ones from the engine's warm-up lesson as the engine makes them:

    python devscripts/kauto_ab/ab_free.py TARGET DRAFT chat|code TEMPERATURE ROUNDS [TARGET_QUANT]

chat: the bench's 8 held-out chat prompts; code: the bench's completion, editing and prose prompts, 3 of each.
"""

import sys
from pathlib import Path

import specdesk
from specdesk.core.adaptive import AdaptiveK
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import build_suite, chat_suite

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Controllers, side_by_side, taught  # noqa: E402


class BeatsModel(AdaptiveK):
    """Lookup's continuation only where it beats the step's best: plain decoding or the draft model's priced rate."""

    def free_length(self, available: int) -> int:
        v = self.verify_costs() if self.verify[1].seen else None
        if v is None or not v[0]:
            return available
        o = self.step_overhead
        floor = 1.0 / (v[0] + o)
        if self.speculating and self.best_rate is not None:
            floor = max(floor, self.best_rate)
        best, best_rate, e, run, prior = 0, floor, 1.0, 1.0, 0.8
        for n in range(1, min(available, self.k_max) + 1):
            prior = self.lookup_acc[n].shrunk(prior, self.PSEUDO_TRIALS)
            run *= prior
            e += run
            if e / (v[n] + o) >= best_rate:
                best, best_rate = n, e / (v[n] + o)
        return best


target, draft, kind, temperature, rounds = sys.argv[1:6]
quant = sys.argv[6] if len(sys.argv) > 6 else "none"
temperature, rounds = float(temperature), int(rounds)
e = specdesk.load(target, draft, drafter="model", device="cpu", target_quant=quant)
e.reuse_cache = False
e.warm_up()
suite = chat_suite(8) if kind == "chat" else [p for p in build_suite(3, tokenizer=e.tokenizer)
                                              if p.category in ("completion", "editing", "prose")]
prompts = [prompt_ids(e, p) for p in suite]
arms = {"model": ("model", AdaptiveK), "shipped": ("model+lookup", AdaptiveK), "beats-model": ("model+lookup", BeatsModel)}


def make(name: str) -> AdaptiveK:
    return taught(arms[name][1](), e, temperature)


ctls = Controllers(make, always_reset=True)


def run(name: str, ids: list[int], seed: int):
    kw = dict(max_new_tokens=96, temperature=temperature, seed=seed)
    if name == "plain":
        return e.generate(ids, drafter="none", **kw)
    return e.generate(ids, drafter=arms[name][0], k="auto", controller=ctls.take(name), **kw)


side_by_side(rounds, prompts, list(arms), run, lambda: ctls.renew(list(arms)))
