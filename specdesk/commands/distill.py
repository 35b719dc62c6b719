"""``specdesk distill``: train a small draft for a target from the target's own replies (specdesk.core.distill)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from specdesk.core.distill.prompts import PROMPT_SETS
from specdesk.core.errors import BadSetting


def add_parser(sub) -> None:
    p = sub.add_parser("distill", help="train a draft model for a target (from the target's own replies)",
                       description="Train a small draft for TARGET: the target answers chat prompts written from "
                                   "templates, a few layers of its own shape learn its distributions, and DIR becomes "
                                   "a Hugging Face folder that borrows the target's embeddings and head (specdesk "
                                   "loads it as that target's draft). Resumable: add --resume to go on after a stop. "
                                   "With --standalone, write an existing draft out as an ordinary model instead.")
    p.add_argument("--target", required=True, help="the target model (folder, GGUF file, Hugging Face id in the cache)")
    p.add_argument("--out", required=True, metavar="DIR", help="the draft folder to write (its work files go in DIR/.distill)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--minutes", type=float, default=None, help="training time (default 30; data generation extra)")
    budget.add_argument("--steps", type=int, default=None, help="training steps instead of a time")
    p.add_argument("--device", default="auto", help="auto (CUDA when present, bf16), cpu, cuda or cuda:N")
    p.add_argument("--resume", action="store_true", help="go on from DIR's data and last checkpoint")
    p.add_argument("--prompts", type=int, default=None, help="training replies for the target to write (default 640; past the distinct prompts the templates give, it answers them again, sampled)")
    p.add_argument("--kind", choices=("draft", "eagle"), default=None,
                   help="draft: a small model of the target's shape (default); eagle: a one-layer head that drafts "
                        "from the target's hidden states (EAGLE)")
    p.add_argument("--layers", type=int, default=None, help="decoder layers (default: 2 for a draft, 1 for an EAGLE head)")
    p.add_argument("--init-from", metavar="DRAFT", default=None,
                   help="start from this distilled draft of the same target (its layers, norm and head tokens): a "
                        "draft goes on learning from new replies (with --skip-prompts), an EAGLE head begins "
                        "drafting as well as that draft does")
    p.add_argument("--skip-prompts", type=int, default=None, metavar="N",
                   help="leave out the first N training prompts of the seeded list (those the --init-from draft "
                        "was trained on: its distill.json says how many), so the target answers new ones")
    p.add_argument("--prompt-set", choices=PROMPT_SETS, default=None,
                   help="the prompts the target answers: varied (the default; resuming, the set the run began with): "
                        "the templates and 14 more kinds of request (advice, comparisons, short writing, fixes, "
                        "recommendations, sums, plans, definitions, commands, ...); templates alone (explain, "
                        "code, rewrite, list, questions); or self: messages the target writes itself where its chat "
                        "template starts a user's turn (its own kind of request: a fine-tune's domain, its language)")
    p.add_argument("--phrases-only", action="store_true",
                   help="train no draft: count the target's phrases in its replies (a table drafter 'phrases' reads: "
                        "prompt lookup, then these; no model pass). Minutes, not hours; specdesk drafts with it "
                        "whenever this target is loaded without a draft. Default here: 3000 replies to prompts the "
                        "target writes itself (--prompt-set self)")
    p.add_argument("--head-vocab", type=int, default=None,
                   help="tokens the draft's head predicts, the most frequent in the replies (default 8192; 0: all)")
    p.add_argument("--standalone", metavar="DRAFT", default=None,
                   help="write DRAFT (a distilled folder) with the target's tensors copied in to --out, for vLLM or "
                        "transformers, and exit")
    p.set_defaults(func=run)


def rebuild_command(args: argparse.Namespace) -> str:
    """The command that rebuilds the draft from nothing (a resumed run ends where a whole one does)."""
    parts = ["specdesk", "distill", "--target", str(args.target), "--out", str(args.out)]
    for flag, value in (("--kind", args.kind), ("--init-from", args.init_from), ("--minutes", args.minutes),
                        ("--steps", args.steps), ("--prompts", args.prompts), ("--skip-prompts", args.skip_prompts),
                        ("--prompt-set", args.prompt_set),
                        ("--layers", args.layers),
                        ("--head-vocab", args.head_vocab)):
        if value is not None:
            parts += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    if args.device != "auto":
        parts += ["--device", args.device]
    if getattr(args, "phrases_only", False):
        parts.append("--phrases-only")
    return " ".join(shlex.quote(p) for p in parts)


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def run(args: argparse.Namespace) -> int:
    from specdesk.core.distill.pipeline import PHRASES_ONLY_PROMPTS, DistillConfig, distill, prompt_set_for

    if args.standalone:
        return _standalone(args)
    if args.phrases_only and args.prompt_set is None and not args.resume:
        # the target's own prompts: a table of its replies to 2,800 of them drafted 1.09x / 1.15x of plain on
        # hand-written prompts (simulated, SmolLM2) where 2,000-4,000 template replies gave 1.06x / 1.10-1.12x
        args.prompt_set = "self"
    cfg = DistillConfig(target=args.target, out=Path(args.out), minutes=args.minutes, steps=args.steps,
                        device=args.device, resume=args.resume, prompts=args.prompt_set,
                        phrases_only=args.phrases_only)
    args.prompt_set = cfg.prompts = prompt_set_for(cfg)  # named in the card's command: a rebuild answers the same set
    cfg.command = rebuild_command(args)
    if args.prompts is not None:
        cfg.train_prompts = args.prompts
    elif args.phrases_only:
        cfg.train_prompts = PHRASES_ONLY_PROMPTS
    if args.kind is not None:
        cfg.kind = args.kind
    if args.skip_prompts is not None:
        cfg.skip_prompts = args.skip_prompts
    if args.init_from is not None:
        cfg.init_from = str(Path(args.init_from).expanduser())
        init_cfg = Path(cfg.init_from) / "config.json"
        if not init_cfg.exists():
            raise BadSetting(f"--init-from: {cfg.init_from} is not a draft folder (no config.json)")
        cfg.layers = int(json.loads(init_cfg.read_text()).get("num_hidden_layers", cfg.layers))
        # fine-tuning a trained draft: 1e-3 undid it (an EAGLE head from a draft, agreement 0.355 -> 0.258 in 50
        # steps, SmolLM2); a draft going on with new replies starts a little above where its own run ended (1e-4)
        cfg.lr = 2e-4 if cfg.kind == "eagle" else 3e-4
    elif cfg.kind == "eagle":
        cfg.layers = 1
    if args.layers is not None:
        cfg.layers = args.layers
    if args.head_vocab is not None:
        cfg.head_vocab = args.head_vocab
    tty = sys.stderr.isatty()
    last = 0.0
    for ev in distill(cfg):
        now = time.monotonic()
        if ev.phase == "train":
            if now - last < (0.5 if tty else 10.0) and not (ev.total_steps and ev.step == ev.total_steps):
                continue
            agree = f"{ev.agreement:.3f}" if ev.agreement is not None else "-"
            line = (f"step {ev.step}{'/' + str(ev.total_steps) if ev.total_steps else ''}  {ev.fraction:5.1%}  "
                    f"loss {'-' if ev.loss is None else format(ev.loss, '.3f')}  held-out agreement {agree}  ETA {_eta(ev.eta_s)}")
        elif ev.phase in ("prompts", "data"):
            line = f"{ev.message}  ETA {_eta(ev.eta_s)}"
        else:
            line = ev.message
        last = now
        print(("\r" + line.ljust(100)) if tty and ev.phase == "train" else line, file=sys.stderr, flush=True)
        if ev.phase == "done":
            if tty:
                print(file=sys.stderr)
            if ev.agreement is not None:
                print(f"{ev.out}: held-out agreement {ev.agreement:.3f} after {ev.step} steps "
                      f"({ev.elapsed_s / 60:.1f} training minutes)")
    return 0


def _standalone(args: argparse.Namespace) -> int:
    from specdesk.core.distill.draft import export_standalone
    from specdesk.core.loading import load_model

    target = load_model(args.target, device="cpu")
    dest = export_standalone(Path(args.standalone), target.model, Path(args.out))
    print(f"wrote {dest}: an ordinary transformers model (the target's embeddings and head copied in)")
    return 0
