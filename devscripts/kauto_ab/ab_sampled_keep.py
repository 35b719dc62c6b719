"""Temperature 0.7, k=auto: how long to draft, as shipped (the position's a_j moved by the draft's confidence, in
log-odds) against a variant, side by side in one process on SmolLM2 q4 with its draft (the bench's 8 chat prompts,
96 tokens, fresh controllers every 2 rounds), fixed k=1 beside them. Variants:

    noconf    the cost model's k per step, the draft's confidence ignored
    confonly  by the confidence's calibration alone, without a_j (the guess: a_j, judged mostly on confident tokens,
              counts confidence twice)

    python devscripts/kauto_ab/ab_sampled_keep.py PATH/SmolLM2-135M-Instruct.Q4_1.gguf 12 noconf|confonly

(docs/draft-notebook.md's docs/ab-sampled-confidence-s12-amd.log is the noconf run, docs/ab-sampled-confonly-s12-amd.log the
confonly one; the arms were named conf/noconf and shipped/confonly there).
"""

import statistics as st
import sys

import specdesk
from specdesk.core.adaptive import AdaptiveK, _logit
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite


class NoConf(AdaptiveK):
    def plan(self, context_len=0, confidence=False, hint=()):
        return super().plan(context_len, False, hint)


class ConfOnly(AdaptiveK):
    def _token_logit(self, a_j, p, mean, hint):
        return _logit(self.confidence_acceptance(p, mean, hint))


G, rounds, variant = sys.argv[1], int(sys.argv[2]), sys.argv[3]
e = specdesk.load(G, "resources/models/smollm2-135m-instruct-draft", drafter="model", device="cpu", target_quant="q4")
e.reuse_cache = False
e.warm_up()
prompts = [prompt_ids(e, p) for p in chat_suite(8)]
arms = {"shipped": AdaptiveK, variant: {"noconf": NoConf, "confonly": ConfOnly}[variant]}
ctls: dict = {}
allr: dict = {}
for rnd in range(rounds):
    if rnd % 2 == 0:
        ctls = {a: {("model", "sampled"): c()} for a, c in arms.items()}
    tot: dict = {}
    for pi, ids in enumerate(prompts):
        pair = list(arms) if (rnd + pi) % 2 == 0 else list(arms)[::-1]
        for name in ["plain", *pair, "k=1"]:
            kw = dict(max_new_tokens=96, temperature=0.7, seed=1000 * rnd + pi)
            if name == "plain":
                r = e.generate(ids, drafter="none", **kw)
            elif name == "k=1":
                r = e.generate(ids, drafter="model", k=1, **kw)
            else:
                e._adaptive = ctls[name]
                r = e.generate(ids, drafter="model", k="auto", **kw)
            t = tot.setdefault(name, [0, 0.0, 0, 0])
            t[0] += r.stats.new_tokens
            t[1] += r.stats.decode_seconds
            t[2] += r.stats.drafted
            t[3] += r.stats.target_forwards
    plain = tot["plain"][0] / tot["plain"][1]
    row = {k: v[0] / v[1] / plain for k, v in tot.items() if k != "plain"}
    for k, v in row.items():
        allr.setdefault(k, []).append(v)
    print("round", rnd, "plain %.1f" % plain,
          {k: "%.3f (drafted/step %.2f)" % (v, tot[k][2] / tot[k][3]) for k, v in row.items()}, flush=True)
print({k: "mean %.3f median %.3f" % (st.mean(v), st.median(v)) for k, v in allr.items()})
