"""Temperature 0.7, k=auto: keep_drafting as shipped (the position's a_j moved by the draft's confidence, in log-odds)
against by the confidence's calibration alone (a guess that a_j, judged mostly on confident tokens, counts confidence
twice), side by side in one process on SmolLM2 q4 with its draft (the bench's 8 chat prompts, 96 tokens), fixed k=1
beside them:

    python devscripts/kauto_ab/ab_sampled_confonly.py PATH/SmolLM2-135M-Instruct.Q4_1.gguf 12
"""
import math, statistics as st, sys, specdesk
from specdesk.core import adaptive
from specdesk.core.adaptive import AdaptiveK, _logit
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite
class ConfOnly(AdaptiveK):
    def keep_drafting(self, j, p, token=None):
        if self._step is None:
            return False
        rate, c, acc, v, mean = self._step
        hint = self.HINT_NONE
        if token is not None and len(self._hint) >= j and (j == 1 or self._hint_states[-1] == self.HINT_AGREE):
            hint = self.HINT_AGREE if token == self._hint[j - 1] else self.HINT_DEPART
        self._hint_states.append(hint)
        z = _logit(self.confidence_acceptance(p, mean, hint))
        self._survive /= 1.0 + math.exp(-z)
        if j >= self.k_max:
            return False
        gain, survive = 0.0, self._survive
        for nxt in range(j + 1, self.k_max + 1):
            survive *= acc[nxt - 1]
            gain += survive
            if gain >= rate * ((nxt - j) * c + v[nxt] - v[j]):
                return True
        return False
G = sys.argv[1]; rounds = int(sys.argv[2])
e = specdesk.load(G, "resources/models/smollm2-135m-instruct-draft", device="cpu", target_quant="q4")
e.reuse_cache = False; e.warm_up()
prompts = [prompt_ids(e, p) for p in chat_suite(8)]
arms = {"shipped": AdaptiveK, "confonly": ConfOnly}
ctls = {}; allr = {}
for rnd in range(rounds):
    if rnd % 2 == 0:
        ctls = {a: {("model", "sampled"): c()} for a, c in arms.items()}
    tot = {}
    for pi, ids in enumerate(prompts):
        order = ["plain", "shipped", "confonly", "k=1"] if (rnd + pi) % 2 == 0 else ["plain", "confonly", "shipped", "k=1"]
        for name in order:
            seed = 1000 * rnd + pi
            if name == "plain": r = e.generate(ids, drafter="none", max_new_tokens=96, temperature=0.7, seed=seed)
            elif name == "k=1": r = e.generate(ids, drafter="model", k=1, max_new_tokens=96, temperature=0.7, seed=seed)
            else:
                e._adaptive = ctls[name]
                r = e.generate(ids, drafter="model", k="auto", max_new_tokens=96, temperature=0.7, seed=seed)
            t = tot.setdefault(name, [0, 0.0, 0, 0]); t[0] += r.stats.new_tokens; t[1] += r.stats.decode_seconds; t[2] += r.stats.drafted; t[3] += r.stats.target_forwards
    plain = tot["plain"][0] / tot["plain"][1]
    row = {k: v[0] / v[1] / plain for k, v in tot.items() if k != "plain"}
    for k, v in row.items(): allr.setdefault(k, []).append(v)
    print("round", rnd, "plain %.1f" % plain, {k: "%.3f (drafted/step %.2f)" % (v, tot[k][2] / tot[k][3]) for k, v in row.items()}, flush=True)
print({k: "mean %.3f median %.3f" % (st.mean(v), st.median(v)) for k, v in allr.items()})
