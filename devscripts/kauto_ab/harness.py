"""The side-by-side loop of the k=auto A/B scripts (ab_free.py, ab_fresh.py): every round runs each prompt plainly,
then each arm (which arm goes first alternates prompt by prompt), then the reference rows, with one seed per prompt
and round for all of them; it prints each round's pooled tokens/s over plain decoding's, and the mean and median of
those over the rounds. ``renew`` runs before every second round (fresh controllers, as a bench's 2 repeats)."""

import statistics as st
from collections.abc import Callable, Sequence


def side_by_side(rounds: int, prompts: Sequence[list[int]], arms: Sequence[str], run: Callable, renew: Callable,
                 reference: Sequence[str] = ()) -> dict[str, list[float]]:
    """``run(name, ids, seed)`` -> a GenerationResult for "plain", an arm or a reference row."""
    allr: dict[str, list[float]] = {}
    for rnd in range(rounds):
        if rnd % 2 == 0:
            renew()
        tot: dict[str, list] = {}
        for pi, ids in enumerate(prompts):
            order = list(arms) if (rnd + pi) % 2 == 0 else list(arms)[::-1]
            for name in ["plain", *order, *reference]:
                r = run(name, ids, 1000 * rnd + pi)
                t = tot.setdefault(name, [0, 0.0])
                t[0] += r.stats.new_tokens
                t[1] += r.stats.decode_seconds
        plain = tot["plain"][0] / tot["plain"][1]
        row = {k: v[0] / v[1] / plain for k, v in tot.items() if k != "plain"}
        for k, v in row.items():
            allr.setdefault(k, []).append(v)
        print("round", rnd, "plain %.1f" % plain, {k: "%.3f" % v for k, v in row.items()}, flush=True)
    print({k: "mean %.3f median %.3f" % (st.mean(v), st.median(v)) for k, v in allr.items()})
    return allr


class Controllers:
    """One k=auto controller per arm, made anew by ``renew`` (``make(name)``). Taking one for a reply resets its
    acceptance as the engine does for a controller it made before: not on its first reply after ``renew``, unless
    ``always_reset`` (ab_free.py's runs reset every reply)."""

    def __init__(self, make: Callable, always_reset: bool = False) -> None:
        self.make, self.always_reset = make, always_reset
        self.ctls: dict = {}
        self.untouched: set = set()

    def renew(self, names: Sequence[str]) -> None:
        for name in names:
            self.ctls[name] = self.make(name)
        self.untouched.update(names)

    def take(self, name: str):
        ctl = self.ctls[name]
        if self.always_reset or name not in self.untouched:
            ctl.reset_acceptance()
        self.untouched.discard(name)
        return ctl


def taught(ctl, engine, temperature: float):
    """``ctl`` with the engine's warm-up lesson's costs where decoding is greedy, as the engine makes its k=auto
    controllers (sampled ones start untaught)."""
    if temperature == 0:
        ctl.learn_costs_from(engine._costs, draft=True)
    return ctl


def arm_runner(engine, ctls: Controllers, temperature: float, drafter: str = "model") -> Callable:
    """``run(name, ids, seed)`` for :func:`side_by_side`: "plain" decodes plainly, "k=N" drafts N tokens a step, any
    other name is an arm: k=auto with that arm's controller (``ctls.take``); 96 new tokens."""
    def run(name: str, ids: list[int], seed: int):
        kw = dict(max_new_tokens=96, temperature=temperature, seed=seed)
        if name == "plain":
            return engine.generate(ids, drafter="none", **kw)
        if name.startswith("k="):
            return engine.generate(ids, drafter=drafter, k=int(name[2:]), **kw)
        return engine.generate(ids, drafter=drafter, k="auto", controller=ctls.take(name), **kw)
    return run


def engine_and_prompts(target: str, draft: str, quant: str, suite: str):
    """The engine (warmed up, no cache kept between replies) and the bench's chat prompts as ids: its 8 held-out chat
    prompts and its 8 hand-written ones (suite "both"), or either ("chat", "free")."""
    import specdesk
    from specdesk.core.bench.runner import prompt_ids
    from specdesk.core.bench.suite import chat_suite, free_chat_suite

    e = specdesk.load(target, draft, drafter="model", device="cpu", target_quant=quant)
    e.reuse_cache = False
    e.warm_up()
    texts = (chat_suite(8) if suite != "free" else []) + (free_chat_suite(8) if suite != "chat" else [])
    return e, [prompt_ids(e, p) for p in texts]
