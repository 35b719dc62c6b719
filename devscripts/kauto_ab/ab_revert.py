"""k=auto's acceptance moving back toward the reply's own while it decodes plainly (shipped: AdaptiveK._revert, half of
the way in REVERT_HALF_LIFE = 8 plain steps, doubling with each plain stretch of a reply) against the same controller
that kept whatever the last drafted steps left (before: a plain stretch ended only at a probe; probes start over at
any drafted step) and a faster return (4 steps), side by side in one process with
fixed k=1 beside them: the bench's 8 held-out chat prompts and its 8 hand-written ones (chat-free), 96 tokens; per
round pooled tokens/s over plain's; fresh controllers every 2 rounds (as a bench's 2 repeats), greedy ones from the
engine's warm-up lesson as the engine makes them; the same seed per prompt for every arm:

    python devscripts/kauto_ab/ab_revert.py TARGET DRAFT TEMPERATURE ROUNDS [TARGET_QUANT] [DRAFTER] [SUITE] [ARMS]

DRAFTER: model (default) or model+lookup; SUITE: both (default), chat or free; ARMS: comma-separated (default
before,shipped,revert4).
"""

import sys
from pathlib import Path

from specdesk.core.adaptive import AdaptiveK

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Controllers, arm_runner, engine_and_prompts, side_by_side, taught  # noqa: E402


class Before(AdaptiveK):
    REVERT_HALF_LIFE = REVERT_MAX = 1e12  # a_j never moves while decoding plainly
    PROBE_RESET_RUN = 1


class Faster(AdaptiveK):
    REVERT_HALF_LIFE = 4.0


target, draft, temperature, rounds = sys.argv[1:5]
quant = sys.argv[5] if len(sys.argv) > 5 else "auto"
drafter = sys.argv[6] if len(sys.argv) > 6 else "model"
suite = sys.argv[7] if len(sys.argv) > 7 else "both"
temperature, rounds = float(temperature), int(rounds)
e, prompts = engine_and_prompts(target, draft, quant, suite)
arms = {"before": Before, "shipped": AdaptiveK, "revert4": Faster}
if len(sys.argv) > 8:
    arms = {name: arms[name] for name in sys.argv[8].split(",")}


def make(name: str) -> AdaptiveK:
    return taught(arms[name](), e, temperature)


ctls = Controllers(make)
side_by_side(rounds, prompts, list(arms), arm_runner(e, ctls, temperature, drafter),
             lambda: ctls.renew(list(arms)), reference=["k=1"])
