"""k=auto dropping a first drafted token not worth its verification (shipped: AdaptiveK._worth_verifying, greedy only)
against the same controller that verifies every first token it drafted (before), side by side in one process with
fixed k=1 beside them: the bench's 8 held-out chat prompts and its 8 hand-written ones (chat-free), 96 tokens,
greedy; per round pooled tokens/s over plain's; fresh controllers every 2 rounds (as a bench's 2 repeats), taught by
the engine's warm-up lesson as the engine makes them; the same seed per prompt for every arm:

    python devscripts/kauto_ab/ab_gate.py TARGET DRAFT ROUNDS [TARGET_QUANT] [DRAFTER] [SUITE] [ARMS]

DRAFTER: model (default) or model+lookup; SUITE: both (default), chat or free; ARMS: comma-separated (default
before,shipped; "shipped2", a second shipped controller, measures what two identical arms differ by).
"""

import sys
from pathlib import Path

from specdesk.core.adaptive import AdaptiveK

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Controllers, arm_runner, engine_and_prompts, side_by_side, taught  # noqa: E402


class Before(AdaptiveK):
    def _worth_verifying(self, rate, c, acc, v) -> bool:
        return True


target, draft, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
quant = sys.argv[4] if len(sys.argv) > 4 else "auto"
drafter = sys.argv[5] if len(sys.argv) > 5 else "model"
suite = sys.argv[6] if len(sys.argv) > 6 else "both"
e, prompts = engine_and_prompts(target, draft, quant, suite)
arms = {"before": Before, "shipped": AdaptiveK, "shipped2": AdaptiveK}
arms = {name: arms[name] for name in (sys.argv[7] if len(sys.argv) > 7 else "before,shipped").split(",")}
dropped = {"n": 0, "steps": 0}


def make(name: str) -> AdaptiveK:
    return taught(arms[name](), e, 0.0)


ctls = Controllers(make)
run = arm_runner(e, ctls, 0.0, drafter)


def counted(name, ids, seed):
    r = run(name, ids, seed)
    if name == "shipped":  # a draft forward takes 0.4 ms and more here; a plain step's proposal, microseconds
        dropped["n"] += sum(1 for s in r.steps if s.drafted == 0 and s.draft_s > 2e-4)
        dropped["steps"] += len(r.steps)
    return r


side_by_side(rounds, prompts, list(arms), counted, lambda: ctls.renew(list(arms)), reference=["k=1"])
print("shipped: steps with a draft run and nothing verified %d of %d" % (dropped["n"], dropped["steps"]))
