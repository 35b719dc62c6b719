"""``specdesk bench``: measured speed-ups against plain decoding and transformers, with the theory beside them."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from specdesk.commands.common import add_model_args, check_writable
from specdesk.core.errors import BadSetting, SpecdeskError
from specdesk.core.loading import OWN_QUANTS

QUICK = dict(per_category=1, repeats=2, ks=(2, 4), hf_ks=(4,), hf_default=False, temps=(0.0, 0.7), max_new=48,
             long_new=32)
FULL = dict(per_category=3, repeats=3, ks=(1, 2, 3, 4, 5, 6, 7, 8), hf_ks=(2, 4, 6), hf_default=True,
            temps=(0.0, 0.7), max_new=96, long_new=64)


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="benchmark speculative decoding against plain decoding and transformers",
                       description="Run the prompt suite with every method interleaved; report speed-ups, "
                                   "acceptance, the predicted speed-up and exactness.")
    add_model_args(p)
    p.add_argument("--quick", action="store_true", help="a smaller suite (under 3 minutes on 2 CPU cores)")
    p.add_argument("--json", type=Path, metavar="OUT", help="write every run and the summary as JSON")
    p.add_argument("--markdown", type=Path, metavar="OUT", help="write the report as Markdown")
    p.add_argument("--plot", type=Path, metavar="OUT.png", help="draw the greedy speed-ups as a PNG")
    p.add_argument("--repeats", type=int, help="override the number of repeats")
    p.add_argument("--per-category", type=int, metavar="N", help="override the number of prompts per category")
    p.add_argument("--ks", help="comma-separated fixed k values for the draft model (e.g. 1,2,4)")
    p.add_argument("--lookup-k", type=int, default=4, help="k for prompt lookup (default 4)")
    p.add_argument("--tree", default="4,2", help="widths of the draft's sibling-tree rows, greedy (default 4,2: "
                                                 "its best 4 tokens at depth 1, best 2 at depth 2); none = no tree "
                                                 "rows")
    p.add_argument("--no-hf", action="store_true", help="skip transformers' assisted generation and prompt lookup")
    p.add_argument("--greedy-only", action="store_true", help="skip the temperature 0.7 runs")
    p.add_argument("--categories", help="comma-separated subset of completion,editing,prose,long_context,chat,"
                                        "chat-free (default: all; chat: held-out template prompts, chat-free: "
                                        "hand-written ones; both only for a target with a chat template)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from specdesk.commands.common import load_engine, use_own_draft
    from specdesk.core.bench.analysis import against_defaults, analyse, goals
    from specdesk.core.bench.report import markdown, to_json
    from specdesk.core.bench.runner import default_methods, run_suite
    from specdesk.core.bench.suite import CATEGORIES, CHAT_CATEGORIES, build_suite
    from specdesk.core.sessionlog import library_versions
    from specdesk.core.tree import checked_widths
    from specdesk.hw.cpu import cpu_description

    cfg = dict(QUICK if args.quick else FULL)
    if args.repeats is not None:
        if args.repeats < 1:
            raise BadSetting("--repeats must be at least 1")
        cfg["repeats"] = args.repeats
    if args.per_category is not None:
        if not 1 <= args.per_category <= 64:
            raise BadSetting("--per-category must be between 1 and 64")
        cfg["per_category"] = args.per_category
    if args.ks:
        try:
            cfg["ks"] = tuple(int(x) for x in args.ks.split(","))
        except ValueError:
            raise BadSetting(f"--ks must be comma-separated whole numbers, not {args.ks!r}") from None
        if any(k < 1 or k > 16 for k in cfg["ks"]):
            raise BadSetting("--ks values must be between 1 and 16")
    if not 1 <= args.lookup_k <= 16:  # 0 drafted nothing: a row of plain decoding named prompt lookup
        raise BadSetting(f"--lookup-k must be between 1 and 16, got {args.lookup_k}")
    if args.greedy_only:
        cfg["temps"] = (0.0,)
    cats = CATEGORIES  # chat only where the target has a chat template (checked once it is loaded)
    if args.categories:
        cats = tuple(c.strip() for c in args.categories.split(","))
        bad = [c for c in cats if c not in CATEGORIES]
        if bad:
            raise BadSetting(f"unknown category {bad[0]!r}: use {', '.join(CATEGORIES)}")
    for out, flag in ((args.json, "--json"), (args.markdown, "--markdown"), (args.plot, "--plot")):
        check_writable(out, flag)

    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    use_own_draft(args, lambda m: say(f"specdesk: {m}"))  # the bench measures the draft `specdesk generate` takes
    if args.drafter is None:
        args.drafter = "model" if (args.draft or args.target == "demo-target") else "ngram"
    engine = load_engine(args, progress=say)
    has_draft = engine.draft is not None
    # chat prompts as plain text are not what a chat model reads: no chat template, no chat category
    chats = [c for c in cats if c in CHAT_CATEGORIES]
    if chats and not engine.has_chat_template:
        say(f"skipping the {' and '.join(chats)} categor{'ies' if len(chats) > 1 else 'y'}: {engine.target.name} "
            f"has no chat template")
        cats = tuple(c for c in cats if c not in CHAT_CATEGORIES)
        if not cats:
            raise BadSetting(f"nothing to run: the chat categories need a chat template, and {engine.target.name} "
                             f"has none")
    prompts = [p for p in build_suite(cfg["per_category"], tokenizer=engine.tokenizer,
                                      chat=any(c in CHAT_CATEGORIES for c in cats))
               if p.category in cats]
    hf_ks = tuple(k for k in cfg["hf_ks"] if k in cfg["ks"]) or cfg["ks"][-1:]
    # A distilled draft's reduced head (logit i is token head_ids[i]) is read by transformers as token ids
    # 0..n-1: its greedy drafts are the wrong tokens and its sampling fails on the mismatched vocabularies.
    reduced = has_draft and getattr(engine.draft, "head_ids", None) is not None
    if reduced and not args.no_hf:
        say(f"skipping transformers' assisted generation: {engine.draft.name}'s head covers "
            f"{int(engine.draft.head_ids.numel())} of {engine.target.vocab} tokens, which transformers cannot map "
            f"(`specdesk distill --standalone` writes a draft it can use)")
    # q4 / q8 models compute in bfloat16 through specdesk's layers; transformers' generate runs them with its own
    # attention over a verify pass's positions at once, whose bfloat16 sums differ from one-position steps', so its
    # greedy output drifts from plain decoding's: no exact comparison to be had there
    own = sorted({m.quant for m in (engine.target, engine.draft) if m is not None and m.quant in OWN_QUANTS})
    if own and not args.no_hf:
        say(f"skipping transformers' generation: the {' and '.join(own)} model{'s' if len(own) > 1 else ''} compute "
            f"in bfloat16, which its batched attention does not reproduce exactly (--target-quant none "
            f"--draft-quant none compares on the float models)")
        args.no_hf = True
    tree = checked_widths(args.tree)
    methods = default_methods(cfg["ks"], hf_ks, args.lookup_k, has_draft, with_hf=not args.no_hf,
                              hf_default=cfg["hf_default"], hf_assisted=not reduced, tree=tree,
                              has_phrases=getattr(engine, "phrases", None) is not None)
    max_new = {c: cfg["max_new"] for c in CATEGORIES}
    max_new["long_context"] = cfg["long_new"]
    say(f"{len(prompts)} prompts x {len(cfg['temps'])} temperatures x {len(methods)} methods x "
        f"{cfg['repeats']} repeats")
    t0 = time.perf_counter()
    runs = run_suite(engine, prompts, methods, cfg["temps"], cfg["repeats"], max_new, progress=say)
    seconds = time.perf_counter() - t0
    rows = analyse(runs)
    goal_list = goals(rows, runs)
    versions = library_versions()
    # each model's quantization and compute dtype as loaded ("auto" made concrete): figures depend on them
    loaded = {role: f"{m.quant}{'+dq' if m.double_quant else ''}, {m.dtype}"
              for role, m in (("target", engine.target), ("draft", engine.draft)) if m is not None}
    meta = {"target": engine.target.name, "draft": engine.draft.name if engine.draft else None,
            "loaded": loaded, "device": engine.device, "cpu": cpu_description(), "cpu_threads": torch.get_num_threads(),
            "cpu_kernels": engine.describe().get("cpu_kernels"), "torch": versions["torch"],
            "transformers": versions["transformers"], "mode": "quick" if args.quick else "full",
            "repeats": cfg["repeats"], "max_new_tokens": max_new, "seconds": seconds,
            "methods": [m.name for m in methods], "prompts": [f"{p.category}:{p.name}" for p in prompts],
            "also": [line for line in (against_defaults(rows),) if line]}
    md = markdown(rows, goal_list, meta)
    print(md)
    try:  # checked before the run; a disk that fills meanwhile still ends in one line (the table is printed above)
        if args.markdown:
            args.markdown.write_text(md, encoding="utf-8")
        if args.json:
            args.json.write_text(json.dumps(to_json(rows, goal_list, meta, runs), indent=1), encoding="utf-8")
    except OSError as e:
        raise SpecdeskError(f"cannot write {e.filename or 'the results'}: {e.strerror or e}") from None
    if args.plot and not plot_speedups(rows, args.plot, f"{meta['target']} + {meta['draft']} on {meta['device']}"):
        raise SpecdeskError(f"cannot write the plot {args.plot} (disk full or no permission?)")
    return 0


def speedup_series(rows) -> tuple[list[str], dict[str, list[float]]]:
    """Greedy speed-up per category for the plot: each method family at its best k.

    specdesk's methods use the decode-time speed-up; transformers' use the rate after the first step over
    plain decoding's (the comparable measure: its first step holds both models' prefill).
    """
    greedy = [r for r in rows if r.temperature == 0.0]
    cats = sorted({r.category for r in greedy})
    series: dict[str, list[float]] = {}
    for cat in cats:
        sel = [r for r in greedy if r.category == cat]
        plain = next((r for r in sel if r.method == "plain"), None)

        def best(pred, sel=sel):
            return max((r.speedup or 0.0 for r in sel if pred(r)), default=0.0)

        def best_steady(kind, sel=sel, plain=plain):
            if plain is None or not plain.steady_tokens_per_s:
                return 0.0
            return max((r.steady_tokens_per_s / plain.steady_tokens_per_s for r in sel
                        if r.kind == kind and r.steady_tokens_per_s), default=0.0)

        values = {
            "best fixed k": best(lambda r: r.method.startswith("draft k=") and r.k != "auto"),
            "adaptive k": best(lambda r: r.method == "draft k=auto"),
            "prompt lookup (best k)": best(lambda r: r.method.startswith("lookup k=")),
            "transformers assisted (best k)": best_steady("hf-assisted"),
            "transformers lookup": best_steady("hf-lookup"),
        }
        for name, v in values.items():
            series.setdefault(name, []).append(v)
    return cats, series


def plot_speedups(rows, out: Path, title: str) -> bool:
    """Grouped bars of greedy speed-ups per category, drawn offscreen with pyqtgraph; whether the PNG was written."""
    import os

    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import pyqtgraph as pg
    import pyqtgraph.exporters as pgex
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])  # noqa: F841 - pyqtgraph needs one
    pg.setConfigOptions(antialias=True, background="w", foreground="k")
    cats, series = speedup_series(rows)
    colors = ["#2b6cb0", "#38a169", "#dd6b20", "#a0aec0", "#718096"]
    w = pg.PlotWidget(title=title)
    w.resize(900, 480)
    w.addLegend(offset=(10, 10), colCount=3)  # one row of bars' names above the bars, not over them
    n = len(series)
    width = 0.8 / max(n, 1)
    for i, (name, vals) in enumerate(series.items()):
        xs = [c + (i - (n - 1) / 2) * width for c in range(len(cats))]
        w.addItem(pg.BarGraphItem(x=xs, height=vals, width=width * 0.9, brush=colors[i % len(colors)], name=name))
    top = max((v for vals in series.values() for v in vals), default=1.0)
    w.setYRange(0, max(1.2, top) * 1.3, padding=0)
    w.addLine(y=1.0, pen=pg.mkPen("#e53e3e", width=1, style=pg.QtCore.Qt.DashLine))
    w.getAxis("bottom").setTicks([[(i, c) for i, c in enumerate(cats)]])
    w.setLabel("left", "speed-up vs plain decoding (greedy)")
    exporter = pgex.ImageExporter(w.plotItem)
    exporter.parameters()["width"] = 900
    return bool(exporter.export(str(out)))
