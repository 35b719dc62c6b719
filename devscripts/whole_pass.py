"""A decode step's work around the kernels on a CPU, in one call each (shipped): the whole pass for token ids
(layers.c's sd_forward_ids: embedding rows, layers, final norm, head and, for greedy, each row's argmax), the draft's
softmax and draw (rows.c's sd_softmax_draw) and the sampled verification from the target's logits (sd_verify_sampled),
against the forms before (the layers call with the embedding index, norm, head and argmax as separate calls;
process_logits, draw_one and verify_sampled's float32 CPU form), in one process:

    python devscripts/whole_pass.py ab GGUF ROUNDS TEMPS        # plain, draft k=1 and k=2 on the bench's 8 chat
                                                               # prompts at each temperature (e.g. 0,0.7), both forms
                                                               # per prompt (which first alternates)
    python devscripts/whole_pass.py pattern GGUF K TEMPERATURE  # a step's halves repeated on a fixed context

Both forms give the same tokens (checked). q4 target, the bundled draft, 96 new tokens.
"""

from __future__ import annotations

import statistics as st
import sys
from pathlib import Path

import torch

import specdesk
from specdesk.core import fastdraft
from specdesk.core.acceptance import verify_greedy, verify_sampled_logits
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite
from specdesk.core.sampling import SamplingConfig, make_generator

from loop_overhead import repeat_step  # devscripts/: the same step pattern

DRAFT = str(Path(__file__).resolve().parent.parent / "resources/models/smollm2-135m-instruct-draft")
NEW_ENDS, NEW_ONE_CALL = fastdraft._ends, SamplingConfig.one_call


def use(form: str) -> None:
    """The one-call forms ("new", shipped) or the forms before ("old"); decoders made after this call follow it."""
    old = form == "old"
    fastdraft._ends = (lambda *a: None) if old else NEW_ENDS
    # the draft's one-call draws and sd_verify_sampled (any sampling since the sixteenth sitting): off, the forms before
    SamplingConfig.one_call = property(lambda self: False) if old else NEW_ONE_CALL


def load():
    e = specdesk.load(sys.argv[2], DRAFT, drafter="model", device="cpu", target_quant="q4")
    e.reuse_cache = False
    return e


def ab(rounds: int, temps: list[float]) -> None:
    e = load()
    e.warm_up()
    prompts = [prompt_ids(e, p) for p in chat_suite(8)]
    methods = [("plain", dict(drafter="none")), ("k1", dict(drafter="model", k=1)), ("k2", dict(drafter="model", k=2))]
    tot: dict = {}
    for rnd in range(rounds):
        for pi, ids in enumerate(prompts):
            for form in (("old", "new") if (rnd + pi) % 2 == 0 else ("new", "old")):
                use(form)
                for temp in temps:
                    for name, kw in methods:
                        r = e.generate(ids, max_new_tokens=96, temperature=temp, seed=1000 * rnd + pi, **kw)
                        d = tot.setdefault((temp, form, name), dict(tok=0, sec=0.0, steps=[], ids=[]))
                        d["tok"] += r.stats.new_tokens
                        d["sec"] += r.stats.decode_seconds
                        d["steps"] += [s.step_s for s in r.steps if s.index > 0]
                        d["ids"].append(tuple(r.token_ids))
        print("round", rnd, flush=True)
    use("new")
    for temp in temps:
        for form in ("old", "new"):
            plain = tot[(temp, form, "plain")]["tok"] / tot[(temp, form, "plain")]["sec"]
            cells = []
            for name, _ in methods:
                d = tot[(temp, form, name)]
                rate = d["tok"] / d["sec"]
                cells.append(f"{name} {rate:.1f} tok/s ({rate / plain:.3f}x), step median {st.median(d['steps']) * 1e3:.3f} ms")
            print(f"T={temp} {form}: " + "; ".join(cells))
        same = all(tot[(temp, "old", n)]["ids"] == tot[(temp, "new", n)]["ids"] for n, _ in methods)
        print(f"T={temp} same tokens either way: {same}")


def pattern(k: int, temp: float) -> None:
    cfg = SamplingConfig(temperature=temp)
    gen = make_generator(torch.device("cpu"), 0)

    def verify(form, tr, ids, prop):
        drafts = prop.tokens.tolist()
        if cfg.greedy:
            verify_greedy(tr.verify_top_ids([ids[-1], *drafts]), drafts)
        else:
            verify_sampled_logits(tr.verify_ids([ids[-1], *drafts]), cfg, prop.probs, prop.tokens, gen,
                                  draft_ids=prop.prob_ids, draft_pos=prop.prob_pos)

    res = repeat_step(load(), ("old", "new"), use, verify, k, cfg, gen, blocks=24)
    use("new")
    for form, r in res.items():
        print(f"k={k} T={temp} {form}: " + "; ".join(f"{n} median {st.median(v) * 1e3:.3f} ms" for n, v in r.items()))

if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "ab":
        ab(int(sys.argv[3]), [float(t) for t in sys.argv[4].split(",")])
    elif what == "pattern":
        pattern(int(sys.argv[3]), float(sys.argv[4]))
    else:
        sys.exit(__doc__)
