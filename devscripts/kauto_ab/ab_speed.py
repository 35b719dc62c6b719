"""k=auto's speed factor (AdaptiveK.SPEED_RATE) on against held at 1, side by side in one process on SmolLM2 q4 with
its draft (the bench's 8 chat prompts, 96 tokens): per round tokens/s over plain's for each arm's k=auto with the draft
model and with draft+lookup, then the means. docs/draft-notebook.md's quiet-machine figures ("k=auto follows the machine's
speed", 12 rounds, 2-core AMD EPYC):

    python devscripts/kauto_ab/ab_speed.py PATH/SmolLM2-135M-Instruct.Q4_1.gguf 12
"""

import sys, statistics as st, specdesk
from specdesk.core import adaptive
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite
G = sys.argv[1]; rounds = int(sys.argv[2])
e = specdesk.load(G, "resources/models/smollm2-135m-instruct-draft", drafter="model", device="cpu", target_quant="q4")
rate = adaptive.AdaptiveK.SPEED_RATE
adaptive.AdaptiveK.SPEED_RATE = 0.0
e.warm_up(); costs = {"fixed": e._costs}
adaptive.AdaptiveK.SPEED_RATE = rate
e.warm_up(); costs["speed"] = e._costs
ctls = {"fixed": {}, "speed": {}}
prompts = [prompt_ids(e, p) for p in chat_suite(8)]
allr = {}
for rnd in range(rounds):
    tot = {}
    arms = ["fixed", "speed"] if rnd % 2 == 0 else ["speed", "fixed"]
    for ids in prompts:
        r = e.generate(ids, drafter="none", max_new_tokens=96)
        t = tot.setdefault("plain", [0, 0.0, 0]); t[0] += r.stats.new_tokens; t[1] += r.stats.decode_seconds
        for arm in arms:
            adaptive.AdaptiveK.SPEED_RATE = rate if arm == "speed" else 0.0
            e._costs, e._adaptive = costs[arm], ctls[arm]
            for drafter in ("model", "model+lookup"):
                r = e.generate(ids, drafter=drafter, k="auto", max_new_tokens=96)
                t = tot.setdefault((arm, drafter), [0, 0.0, 0]); t[0] += r.stats.new_tokens; t[1] += r.stats.decode_seconds; t[2] += r.stats.drafted
    adaptive.AdaptiveK.SPEED_RATE = rate
    plain = tot["plain"][0] / tot["plain"][1]
    row = {f"{a}/{d}": v[0] / v[1] / plain for (a, d), v in ((k, v) for k, v in tot.items() if k != "plain")}
    for k, v in row.items(): allr.setdefault(k, []).append(v)
    print("round", rnd, "plain %.1f" % plain, {k: "%.3f" % v for k, v in row.items()}, flush=True)
print({k: "mean %.3f median %.3f" % (st.mean(v), st.median(v)) for k, v in allr.items()})
