"""k=auto after a plain stretch: drafting judged by a table of its own (Fresh: steps drafted with no drafted step
before them, after plain steps or at a new reply; tried, not kept) against the after-a-rejection table that k=auto
reads there (shipped), side by side in one process on q4 SmolLM2 with its draft, the draft model alone: the bench's 8
chat prompts in its order, 96 tokens; per round pooled tokens/s over plain's for each arm's k=auto and fixed k=1, k=2;
fresh controllers every 2 rounds (as a bench's 2 repeats), greedy ones from the engine's warm-up lesson as the engine
makes them; the same seed per prompt for every arm:

    python devscripts/kauto_ab/ab_fresh.py PATH/SmolLM2-135M-Instruct.Q4_1.gguf TEMPERATURE ROUNDS

(docs/ab-fresh-state-s13-amd-*.log ran with the arms named before = shipped, fresh = Fresh.)
"""

import statistics as st
import sys

import specdesk
from specdesk.core.adaptive import AdaptiveK
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite


class Fresh(AdaptiveK):
    """A third acceptance table (state 2) for steps with no drafted step before them; a_1 shrunk toward all three."""

    FRESH = 2

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.state = self.FRESH

    def _acc_tables(self, half_life):
        tables = super()._acc_tables(half_life)
        return tables + [[type(tables[0][0])(half_life) for _ in tables[0]]]

    def acceptances(self, k, state=None):
        table = self.acc_by_state[self.state if state is None else state]
        firsts = [t[1] for t in self.acc_by_state]
        pooled = ((sum(a.s for a in firsts) + self.PSEUDO_TRIALS * self.prior_acceptance)
                  / (sum(a.w for a in firsts) + self.PSEUDO_TRIALS))
        out, prior = [], pooled
        for j in range(1, k + 1):
            prior = table[min(j, self.k_max)].shrunk(prior, self.PSEUDO_TRIALS)
            out.append(min(0.995, max(0.0, prior)))
        return out

    def observe(self, k, drafted, *a, **kw) -> None:
        super().observe(k, drafted, *a, **kw)
        if drafted <= 0:
            self.state = self.FRESH

    def reset_acceptance(self, keep: float = 0.25) -> None:
        super().reset_acceptance(keep)
        self.state = self.FRESH


G, temperature, rounds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
e = specdesk.load(G, "resources/models/smollm2-135m-instruct-draft", drafter="model", device="cpu", target_quant="q4")
e.reuse_cache = False
e.warm_up()
prompts = [prompt_ids(e, p) for p in chat_suite(8)]
arms = {"shipped": AdaptiveK, "fresh": Fresh}
ctls: dict = {}
allr: dict = {}
for rnd in range(rounds):
    if rnd % 2 == 0:
        for arm, cls in arms.items():
            ctls[arm] = cls()
            if temperature == 0:
                ctls[arm].learn_costs_from(e._costs, draft=True)
        first = True
    tot: dict = {}
    for pi, ids in enumerate(prompts):
        order = list(arms) if (rnd + pi) % 2 == 0 else list(arms)[::-1]
        seed = 1000 * rnd + pi
        for name in ["plain"] + order + ["k=1", "k=2"]:
            kw = dict(max_new_tokens=96, temperature=temperature, seed=seed)
            if name == "plain":
                r = e.generate(ids, drafter="none", **kw)
            elif name in ("k=1", "k=2"):
                r = e.generate(ids, drafter="model", k=int(name[-1]), **kw)
            else:
                if not first:
                    ctls[name].reset_acceptance()  # as the engine does for a controller it made before
                r = e.generate(ids, drafter="model", k="auto", controller=ctls[name], **kw)
            t = tot.setdefault(name, [0, 0.0])
            t[0] += r.stats.new_tokens
            t[1] += r.stats.decode_seconds
        first = False
    plain = tot["plain"][0] / tot["plain"][1]
    row = {k: v[0] / v[1] / plain for k, v in tot.items() if k != "plain"}
    for k, v in row.items():
        allr.setdefault(k, []).append(v)
    print("round", rnd, "plain %.1f" % plain, {k: "%.3f" % v for k, v in row.items()}, flush=True)
print({k: "mean %.3f median %.3f" % (st.mean(v), st.median(v)) for k, v in allr.items()})
