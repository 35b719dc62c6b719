"""k=auto's probes spaced by their measured cost (shipped: AdaptiveK.probe_floor, at most PROBE_BUDGET of plain decoding's
time) against a probe every 32-256 plain steps whatever it costs (before), side by side in one process on q4 SmolLM2
with its draft, 96 tokens, fixed k=1 beside them; per round pooled tokens/s over plain's; fresh controllers every 2
rounds (as a bench's 2 repeats), greedy ones from the engine's warm-up lesson as the engine makes them:

    python devscripts/kauto_ab/ab_probes.py GGUF chat|free TEMPERATURE ROUNDS [DRAFTER]

chat: the bench's 8 held-out template prompts; free: its 24 hand-written ones (chat-free). DRAFTER: model (default)
or model+lookup.
"""

import sys
from pathlib import Path

import specdesk
from specdesk.core.adaptive import AdaptiveK
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite, free_chat_suite

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Controllers, side_by_side, taught  # noqa: E402


class Every32(AdaptiveK):
    """Probes every probe_min .. probe_max plain steps, whatever they cost."""

    PROBE_BUDGET = float("inf")


G, suite, temperature, rounds = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
drafter = sys.argv[5] if len(sys.argv) > 5 else "model"
e = specdesk.load(G, str(Path(__file__).resolve().parents[2] / "resources/models/smollm2-135m-instruct-draft"),
                  drafter="model", device="cpu", target_quant="q4")
e.reuse_cache = False
e.warm_up()
prompts = [prompt_ids(e, p) for p in (chat_suite(8) if suite == "chat" else free_chat_suite(24))]
arms = {"before": Every32, "shipped": AdaptiveK}


def make(name: str) -> AdaptiveK:
    return taught(arms[name](), e, temperature)


ctls = Controllers(make)
floors: list[int] = []


def run(name: str, ids: list[int], seed: int):
    kw = dict(max_new_tokens=96, temperature=temperature, seed=seed)
    if name == "plain":
        return e.generate(ids, drafter="none", **kw)
    if name == "k=1":
        return e.generate(ids, drafter="model", k=1, **kw)
    ctl = ctls.take(name)
    r = e.generate(ids, drafter=drafter, k="auto", controller=ctl, **kw)
    if name == "shipped":
        floors.append(ctl.probe_floor())
    return r


side_by_side(rounds, prompts, list(arms), run, lambda: ctls.renew(list(arms)), reference=("k=1",))
print("shipped's probe floor after each reply: min", min(floors), "median", sorted(floors)[len(floors) // 2],
      "max", max(floors))
