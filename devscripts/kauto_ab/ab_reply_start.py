"""A new reply's acceptance: from the draft's over many replies (AdaptiveK.reset_acceptance now) against a quarter of the
last reply's (before), side by side in one process (which arm runs first after plain alternates prompt by prompt) on SmolLM2 q4 with its draft: the bench's 8 chat prompts in the
bench's order, 96 tokens; per round tokens/s over plain's for each arm's k=auto with the draft model and with
draft+lookup, and fixed k=2; fresh controllers (from the same warm-up lesson) every 2 rounds, as a bench's 2 repeats.

    python devscripts/kauto_ab/ab_reply_start.py PATH/SmolLM2-135M-Instruct.Q4_1.gguf 20

or the same two controllers replayed on a trace of devscripts/kauto_sim.py (no timing noise of this host; 12 seeds,
the prompts twice, a step's first drafted token priced FIRST ms above the next ones; verify costs in ms by size):

    python devscripts/kauto_ab/ab_reply_start.py --sim TRACE.pt VERIFY_MS DRAFT_MS FIRST_MS
"""

import statistics as st
import sys

import specdesk
from specdesk.core.adaptive import AdaptiveK
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite


class Before(AdaptiveK):
    def reset_acceptance(self, keep: float = 0.25) -> None:
        text = [self.by_hint[h] for h in (self.HINT_AGREE, self.HINT_DEPART)]
        text += self.by_confidence[self.HINT_AGREE] + self.by_confidence[self.HINT_DEPART]
        for a in [a for table in self.acc_by_state for a in table] + text + self.lookup_acc:
            a.w *= keep
            a.s *= keep
        self.state = 0
        self._since_draft = 0


def simulate(trace: str, verify_ms: str, draft_ms: str, first_ms: str) -> None:
    import random
    from pathlib import Path

    import torch
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import kauto_sim

    traces = torch.load(trace, weights_only=False)["traces"]
    ms = [float(x) for x in verify_ms.split(",")]
    costs = {"draft": float(draft_ms) / 1e3, "verify": {m + 1: ms[min(m, len(ms) - 1)] / 1e3 for m in range(13)}}
    rows: dict = {}
    for seed in range(12):
        for name, make in (("k=0", 0), ("k=1", 1), ("k=2", 2), ("k=3", 3), ("before", Before), ("now", AdaptiveK)):
            rows.setdefault(name, []).append(
                kauto_sim.replay(traces * 2, costs, make, random.Random(seed), 0.08, float(first_ms) / 1e3)[0])
    mean = {k: st.fmean(v) for k, v in rows.items()}
    print("speed over plain:", {k: round(mean["k=0"] / v, 3) for k, v in mean.items()})


if sys.argv[1] == "--sim":
    simulate(*sys.argv[2:6])
    sys.exit()
G = sys.argv[1]
rounds = int(sys.argv[2])
e = specdesk.load(G, "resources/models/smollm2-135m-instruct-draft", drafter="model", device="cpu", target_quant="q4")
e.reuse_cache = False
e.warm_up()
prompts = [prompt_ids(e, p) for p in chat_suite(8)]
arms = {"before": Before, "now": AdaptiveK}
ctls: dict = {}
allr: dict = {}
for rnd in range(rounds):
    if rnd % 2 == 0:
        for arm, cls in arms.items():
            ctls[arm] = {}
            for drafter in ("model", "model+lookup"):
                c = ctls[arm][(drafter, "greedy")] = cls()
                c.learn_costs_from(e._costs, draft=True)
    tot: dict = {}
    for pi, ids in enumerate(prompts):
        order = list(arms) if (rnd + pi) % 2 == 0 else list(arms)[::-1]  # each arm first after plain half the time
        runs = [("plain", None)] + [(a, None) for a in order] + [("k=2", None)]
        for name, _ in runs:
            if name == "plain":
                rs = {"plain": e.generate(ids, drafter="none", max_new_tokens=96)}
            elif name == "k=2":
                rs = {"k=2": e.generate(ids, drafter="model", k=2, max_new_tokens=96)}
            else:
                e._adaptive = ctls[name]
                rs = {f"{name}/{d}": e.generate(ids, drafter=d, k="auto", max_new_tokens=96)
                      for d in ("model", "model+lookup")}
            for key, r in rs.items():
                t = tot.setdefault(key, [0, 0.0])
                t[0] += r.stats.new_tokens
                t[1] += r.stats.decode_seconds
    plain = tot["plain"][0] / tot["plain"][1]
    row = {k: v[0] / v[1] / plain for k, v in tot.items() if k != "plain"}
    for k, v in row.items():
        allr.setdefault(k, []).append(v)
    print("round", rnd, "plain %.1f" % plain, {k: "%.3f" % v for k, v in row.items()}, flush=True)
print({k: "mean %.3f median %.3f" % (st.mean(v), st.median(v)) for k, v in allr.items()})
