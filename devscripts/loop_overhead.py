"""The decode loop's own work between passes on a CPU: token ids as ints (LeanDecoder.forward_ids, the greedy draft
chain by C calls, verify_greedy on ints, the sampled draws as ints and verify_sampled's float32 CPU form; shipped)
against the tensor form it replaced, in one process:

    python devscripts/loop_overhead.py ab GGUF ROUNDS TEMPERATURE [KS]   # plain and draft k (default 1,2) on the
                                                                         # bench's 8 chat prompts, both forms per
                                                                         # prompt (which first alternates)
    python devscripts/loop_overhead.py pattern GGUF                      # a k=2 step's two halves repeated on a
                                                                         # fixed context: propose, then verify

The tensor form is the same code with forward_ids, argmax_list and the greedy chain routed back through tensors
(what the loop did before); both give the same tokens (checked). q4 target, the bundled draft, 96 new tokens.
"""

from __future__ import annotations

import statistics as st
import sys
import time
from pathlib import Path

import torch

import specdesk
from specdesk.core import acceptance, drafters, fastdraft, kernels
from specdesk.core.acceptance import verify_greedy
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite
from specdesk.core.sampling import SamplingConfig

DRAFT = str(Path(__file__).resolve().parent.parent / "resources/models/smollm2-135m-instruct-draft")
NEW_FORWARD, NEW_ARGMAX, NEW_PLAIN = fastdraft.LeanDecoder.forward_ids, kernels.argmax_list, acceptance._plain_cpu


def _tensor_forward(self, ids, every=False):
    return self.forward(torch.tensor(ids, dtype=torch.long), every)


def use(form: str) -> None:
    """Route the loop through ints ("ints", shipped) or through tensors ("tensors", before)."""
    old = form == "tensors"
    fastdraft.LeanDecoder.forward_ids = _tensor_forward if old else NEW_FORWARD
    kernels.argmax_list = (lambda x: kernels.argmax(x).flatten().tolist()) if old else NEW_ARGMAX
    drafters.ModelDrafter.ids_path = not old
    acceptance._plain_cpu = (lambda *a: False) if old else NEW_PLAIN


def ab(gguf: str, rounds: int, temperature: float, ks: list[int]) -> None:
    e = specdesk.load(gguf, DRAFT, drafter="model", device="cpu", target_quant="q4")
    e.reuse_cache = False
    e.warm_up()
    prompts = [prompt_ids(e, p) for p in chat_suite(8)]
    methods = [("plain", dict(drafter="none"))] + [(f"k{k}", dict(drafter="model", k=k)) for k in ks]
    tot: dict = {}
    for rnd in range(rounds):
        for pi, ids in enumerate(prompts):
            for form in (["tensors", "ints"] if (rnd + pi) % 2 == 0 else ["ints", "tensors"]):
                use(form)
                for name, kw in methods:
                    r = e.generate(ids, max_new_tokens=96, temperature=temperature, seed=1000 * rnd + pi, **kw)
                    d = tot.setdefault((form, name), dict(tok=0, sec=0.0, steps=[], ids=[]))
                    d["tok"] += r.stats.new_tokens
                    d["sec"] += r.stats.decode_seconds
                    d["steps"] += [s.step_s for s in r.steps if s.index > 0]
                    d["ids"].append(tuple(r.token_ids))
        print("round", rnd, " ".join(f"{f}/{n} {d['tok'] / d['sec']:.1f}" for (f, n), d in tot.items()), flush=True)
    use("ints")
    for form in ("tensors", "ints"):
        plain = tot[(form, "plain")]["tok"] / tot[(form, "plain")]["sec"]
        cells = []
        for name, _ in methods:
            d = tot[(form, name)]
            rate = d["tok"] / d["sec"]
            cells.append(f"{name} {rate:.1f} tok/s ({rate / plain:.3f}x), step median {st.median(d['steps']) * 1e3:.3f} ms")
        print(form, "; ".join(cells))
    print("same tokens either way:", all(tot[("ints", n)]["ids"] == tot[("tensors", n)]["ids"] for n, _ in methods))


def repeat_step(e, forms: tuple[str, str], use, verify, k: int = 2, cfg: SamplingConfig = SamplingConfig(),
                gen=None, blocks: int = 16) -> dict:
    """A k-token step's two halves repeated on a fixed 200-token context, in blocks of 30 per form (which form goes
    first alternates; ``use(form)`` switches): the draft's proposal, then ``verify(form, runner, ids, proposal)``.
    Per form the propose, verify and whole-step times, the first 3 of each block left out."""
    tr, dr = e._runner, e._model_drafter
    ids = list(range(1000, 1200))
    res = {f: dict(propose=[], verify=[], step=[]) for f in forms}
    for blk in range(blocks):
        for form in (forms if blk % 2 == 0 else forms[::-1]):
            use(form)
            tr.prefill(ids[:-1], 512)
            dr.start(ids[:-1], 512)
            dr.propose(ids, k, cfg, gen)
            dr.commit(len(ids) - 1)
            base = tr.cache_len
            for it in range(30):
                t0 = time.perf_counter()
                prop = dr.propose(ids, k, cfg, gen)
                t1 = time.perf_counter()
                verify(form, tr, ids, prop)
                t2 = time.perf_counter()
                tr.rollback(tr.cache_len - base)
                dr.commit(len(ids) - 1)
                if it >= 3:
                    r = res[form]
                    r["propose"].append(t1 - t0)
                    r["verify"].append(t2 - t1)
                    r["step"].append(t2 - t0)
    return res


def pattern(gguf: str) -> None:
    e = specdesk.load(gguf, DRAFT, drafter="model", device="cpu", target_quant="q4")
    e.reuse_cache = False

    def verify(form, tr, ids, prop):
        if form == "tensors":
            logits = tr.verify(torch.cat([torch.tensor([ids[-1]]), prop.tokens]))
            verify_greedy(kernels.argmax(logits), prop.tokens)
        else:
            drafts = prop.tokens.tolist()
            logits = tr.verify_ids([ids[-1], *drafts])
            verify_greedy(kernels.argmax_list(logits), drafts)

    res = repeat_step(e, ("tensors", "ints"), use, verify)
    use("ints")
    for form, r in res.items():
        print(form, "; ".join(f"{k} median {st.median(v) * 1e3:.3f} ms, mean {st.mean(v) * 1e3:.3f}" for k, v in r.items()))

if __name__ == "__main__":
    what = sys.argv[1]
    if what == "ab":
        ab(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]),
           [int(x) for x in (sys.argv[5] if len(sys.argv) > 5 else "1,2").split(",")])
    elif what == "pattern":
        pattern(sys.argv[2])
    else:
        sys.exit(__doc__)
