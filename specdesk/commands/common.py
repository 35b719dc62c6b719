"""Argument groups shared by several subcommands."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from specdesk.core.loading import DTYPES, QUANTS
from specdesk.core.pairing import DRAFTERS
from specdesk.core.tree import SUGGESTED, widths_text

SUGGESTED_TREE = widths_text(SUGGESTED)


def k_value(text: str) -> int | str:
    if text == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"k must be a whole number or 'auto', not {text!r}") from None


def add_model_args(p: argparse.ArgumentParser, default_target: str | None = "demo-target", *,
                   target_help: str = "folder, Hugging Face id in the local cache, or demo-target (default)",
                   loading: bool = True) -> argparse._ArgumentGroup:
    """The "models" group. ``loading=False`` (planning) leaves out what only matters once models run."""
    g = p.add_argument_group("models")
    g.add_argument("--target", default=default_target, help=f"target model: {target_help}")
    g.add_argument("--draft", default=None, help="draft model (same tokenizer); default demo-draft for demo-target")
    g.add_argument("--drafter", choices=DRAFTERS, default=None,
                   help="model (a draft model), model+lookup (the draft model, and prompt lookup where the text "
                        "repeats; the default with a draft), phrases (prompt lookup, then a distilled draft's table "
                        "of the target's own phrases; no model pass), ngram (prompt lookup, no extra model; the "
                        "default without one) or none (plain decoding)")
    g.add_argument("--target-quant", choices=QUANTS, default="auto",
                   help="quantization of the target: bitsandbytes int8/nf4/fp4, q4 or q8 (4- or 8-bit codes per 32 "
                        "weights through specdesk's CPU kernels, bfloat16 activations; CPU only; q8 is near-lossless "
                        "and several times faster than float32 on a CPU), none (as stored), or auto (the default: on a "
                        "CPU q4 for a GGUF file of 4 bits a weight or fewer, q8 for one of 5 to 8 bits or a float "
                        "llama, mistral or qwen2 model of 100 MB and more; else none)")
    g.add_argument("--draft-quant", choices=QUANTS, default="auto",
                   help="quantization of the draft (as --target-quant; a draft distilled for the target follows it)")
    g.add_argument("--double-quant", action="store_true", help="4-bit double quantization of the constants")
    g.add_argument("--dtype", choices=DTYPES, default="auto", help="compute dtype (auto: bf16/fp16 on CUDA, fp32 on CPU)")
    if loading:
        g.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
        g.add_argument("--ngram-max", type=int, default=4, help="prompt lookup: longest n-gram matched (default 4)")
        g.add_argument("--ngram-min", type=int, default=2, help="prompt lookup: shortest n-gram matched (default 2)")
    return g


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("decoding")
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-k", type=int, default=0, help="0 = off")
    g.add_argument("--top-p", type=float, default=1.0, help="1.0 = off")
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--k", type=k_value, default="auto",
                   help="draft tokens per step, or 'auto' (the default: the adaptive controller picks k each step)")
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    g.add_argument("--tree", default="none",
                   help=f"greedy: candidates the draft offers per depth, checked in the same target pass (e.g. "
                        f"{SUGGESTED_TREE}: its best 4 tokens at depth 1, best 2 at depth 2; pays where a pass over "
                        f"more positions costs little more, as on a GPU); default none = a plain chain")


def use_own_draft(args, say) -> None:
    """No --draft given (and a drafter that may use one): a draft distilled for this target (bundled, or made here by
    `specdesk distill`), if there is one (discovery.own_draft), with a line on stderr saying so."""
    from specdesk.core.pairing import may_take_own_draft

    if not may_take_own_draft(args.target, args.draft, args.drafter):
        return
    from specdesk.core.discovery import drafting_with, own_draft

    found = own_draft(args.target)
    if found is not None:
        args.draft = found
        say(f"{drafting_with(found, args.drafter, args.target)} (--drafter ngram or none: without it)")


def load_engine(args, progress=None):
    import specdesk

    return specdesk.load(args.target, args.draft, drafter=args.drafter, target_quant=args.target_quant,
                         draft_quant=args.draft_quant, double_quant=args.double_quant, dtype=args.dtype,
                         device=args.device, ngram_max=args.ngram_max, ngram_min=args.ngram_min,
                         progress=progress)


def tty_progress():
    """Progress messages of a long load (a GGUF file's first conversion) on one overwritten stderr line.

    Only on a terminal: piped or captured, stderr keeps just the result line (or the one error line).
    """
    if not sys.stderr.isatty():
        return None
    state = {"width": 0}

    def show(msg: str) -> None:
        line = msg[:200]
        sys.stderr.write("\r" + line + " " * max(0, state["width"] - len(line)))
        sys.stderr.flush()
        state["width"] = len(line)

    return show


def end_progress() -> None:
    """Clear the progress line (after loading, before output)."""
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()


def check_writable(path: Path | None, flag: str) -> None:
    """Fail now, in one line, where ``path`` (an output a long command writes at its end) cannot be written: a folder,
    a missing folder, no permission, a read-only place. A file that did not exist is made and removed again."""
    if path is None:
        return
    from specdesk.core.errors import BadSetting

    if path.is_dir():
        raise BadSetting(f"{flag} {path} is a folder: give a file name")
    if not path.parent.is_dir():
        raise BadSetting(f"cannot write {path}: folder {path.parent} does not exist")
    existed = path.exists()
    try:
        with path.open("a"):
            pass
        if not existed:
            os.unlink(path)
    except OSError as e:
        raise BadSetting(f"cannot write {path}: {e.strerror or e}") from None
