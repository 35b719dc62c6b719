"""k=auto after a plain stretch and at a new reply, where no drafted step is there to condition the acceptance on:
judged by a table of its own (fresh: steps drafted with no drafted step before them) or by the two states' tables
mixed by how often each came up lately (mixture), both tried and not kept, against the after-a-rejection table that
k=auto reads there (shipped), side by side in one process on q4 SmolLM2 with its draft, the draft model alone: the bench's 8
chat prompts in its order, 96 tokens; per round pooled tokens/s over plain's for each arm's k=auto and fixed k=1, k=2;
fresh controllers every 2 rounds (as a bench's 2 repeats), greedy ones from the engine's warm-up lesson as the engine
makes them; the same seed per prompt for every arm:

    python devscripts/kauto_ab/ab_fresh.py PATH/SmolLM2-135M-Instruct.Q4_1.gguf TEMPERATURE ROUNDS fresh|mixture

(docs/ab-fresh-state-s13-amd-*.log ran with the arms named before = shipped, fresh = Fresh; docs/ab-mixed-state-s13-amd-
*.log: shipped against the mixture, the third greedy run with the mixture as the code and the code before as a
subclass, arms named before = shipped, now = mixture.)
"""

import sys
from pathlib import Path

import specdesk
from specdesk.core.adaptive import AdaptiveK
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Controllers, side_by_side, taught  # noqa: E402


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


class Mixture(AdaptiveK):
    """After plain steps and at a new reply, a_j mixed from the two tables by how often each state came up lately (the
    share of drafted steps that kept every token); steps drafted from there are judged as before (after-a-rejection)."""

    FRESH = 2

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.p_kept = type(self.acc_by_state[0][0])(self.half_life)
        self.state = self.FRESH

    def acceptances(self, k, state=None):
        state = self.state if state is None else state
        if state != self.FRESH:
            return super().acceptances(k, state)
        w = self.p_kept.shrunk(0.5, self.PSEUDO_TRIALS)
        return [(1 - w) * a + w * b for a, b in zip(super().acceptances(k, 0), super().acceptances(k, 1))]

    def observe(self, k, drafted, accepted, *a, **kw) -> None:
        if self.state == self.FRESH:
            self.state = 0  # judged where the shipped controller judges it
        super().observe(k, drafted, accepted, *a, **kw)
        if drafted > 0:
            self.p_kept.add(1.0 if accepted == drafted else 0.0)
        else:
            self.state = self.FRESH

    def reset_acceptance(self, keep: float = 0.25) -> None:
        super().reset_acceptance(keep)
        self.state = self.FRESH


G, temperature, rounds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
e = specdesk.load(G, "resources/models/smollm2-135m-instruct-draft", drafter="model", device="cpu", target_quant="q4")
e.reuse_cache = False
e.warm_up()
prompts = [prompt_ids(e, p) for p in chat_suite(8)]
arms = {"shipped": AdaptiveK, sys.argv[4]: {"fresh": Fresh, "mixture": Mixture}[sys.argv[4]]}


def make(name: str) -> AdaptiveK:
    return taught(arms[name](), e, temperature)


ctls = Controllers(make)


def run(name: str, ids: list[int], seed: int):
    kw = dict(max_new_tokens=96, temperature=temperature, seed=seed)
    if name == "plain":
        return e.generate(ids, drafter="none", **kw)
    if name in ("k=1", "k=2"):
        return e.generate(ids, drafter="model", k=int(name[-1]), **kw)
    return e.generate(ids, drafter="model", k="auto", controller=ctls.take(name), **kw)


side_by_side(rounds, prompts, list(arms), run, lambda: ctls.renew(list(arms)), reference=("k=1", "k=2"))
