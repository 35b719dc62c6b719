"""k=auto's pass-size costs, the old rule (raise each size to the largest below it) against the new one (a size takes
the lowest figure at or above it, AdaptiveK._monotone), side by side in one process: each arm its own lesson and
controllers, both k=auto with the draft model and with draft+lookup, plus plain decoding and k=3 per prompt; per
round tokens/s over plain's, then the means. What docs/draft-notebook.md's "A pass size priced above a larger one" figures came
from (2-core AMD EPYC):

    python devscripts/kauto_ab/ab_mono.py demo 6                  # demo pair: completion, editing, prose prompts
    python devscripts/kauto_ab/ab_mono.py PATH/SmolLM2-135M-Instruct.Q4_1.gguf 10   # the bench's 8 chat prompts
"""

import sys, statistics as st, specdesk
from specdesk.core import adaptive
from specdesk.core.bench.suite import build_suite
from specdesk.core.bench.runner import prompt_ids
A = adaptive.AdaptiveK
new_mono, new_costs = A._monotone, A.verify_costs
def old_mono(self, seen):
    return None if not seen else [self.verify_cost(m, seen) for m in range(1, self.k_max + 2)]
def old_costs(self):
    seen = self._seen(); out, top = [], 0.0
    for m in range(1, self.k_max + 2):
        top = max(top, self.verify_cost(m, seen) or 0.0); out.append(top)
    return out
def arm(name):
    A._monotone, A.verify_costs = (new_mono, new_costs) if name == "new" else (old_mono, old_costs)
which = sys.argv[1]; rounds = int(sys.argv[2])
if which == "demo":
    e = specdesk.load("demo-target", "demo-draft", drafter="model", device="cpu")
    prompts = [p.text for p in build_suite(3, tokenizer=e.tokenizer) if p.category in ("editing", "completion", "prose")]
else:
    e = specdesk.load(which, "resources/models/smollm2-135m-instruct-draft", drafter="model", device="cpu", target_quant="q4")
    from specdesk.core.bench.suite import chat_suite
    prompts = [prompt_ids(e, p) for p in chat_suite(8)]
costs = {}
for name in ("old", "new"):
    arm(name); e.warm_up(); costs[name] = e._costs
ctls = {"old": {}, "new": {}}
allr = {}
for rnd in range(rounds):
    tot = {}
    for ids in prompts:
        r = e.generate(ids, drafter="none", max_new_tokens=96)
        t = tot.setdefault("plain", [0, 0.0]); t[0] += r.stats.new_tokens; t[1] += r.stats.decode_seconds
        for name in (["old", "new"] if rnd % 2 == 0 else ["new", "old"]):
            arm(name); e._costs, e._adaptive = costs[name], ctls[name]
            for drafter in ("model", "model+lookup"):
                r = e.generate(ids, drafter=drafter, k="auto", max_new_tokens=96)
                t = tot.setdefault(f"{name}/{drafter}", [0, 0.0]); t[0] += r.stats.new_tokens; t[1] += r.stats.decode_seconds
        arm("new")
        r = e.generate(ids, drafter="model", k=3, max_new_tokens=96)
        t = tot.setdefault("k=3", [0, 0.0]); t[0] += r.stats.new_tokens; t[1] += r.stats.decode_seconds
    plain = tot["plain"][0] / tot["plain"][1]
    row = {k: v[0] / v[1] / plain for k, v in tot.items() if k != "plain"}
    for k, v in row.items(): allr.setdefault(k, []).append(v)
    print("round", rnd, {k: "%.3f" % v for k, v in row.items()}, flush=True)
print({k: "mean %.3f" % st.mean(v) for k, v in allr.items()})
