"""``specdesk models``: every usable model on this machine, and which can draft for which."""

from __future__ import annotations

import argparse
import json
import sys

from specdesk.core import userdirs
from specdesk.core.discovery import discover, drafts_for
from specdesk.core.errors import BadModel
from specdesk.core.units import disk_size, param_count


def add_parser(sub) -> None:
    p = sub.add_parser("models", help="list local models (bundled, Hugging Face cache, LM Studio, Ollama, "
                                      "llama.cpp, added folders)",
                       description="List the models specdesk can use (Hugging Face folders and GGUF files), "
                                   "and compatible drafts for a target.")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--drafts-for", metavar="TARGET", help="list compatible drafts for this target, smallest first")
    p.add_argument("--add", metavar="FOLDER", help="remember a model folder, a folder of GGUF files or a GGUF file "
                                                   "(kept in the settings file)")
    p.add_argument("--remove", metavar="FOLDER", help="forget a remembered folder")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.add:
        p = Path(args.add).expanduser()
        from specdesk.core.models.ggufheader import is_gguf_file

        if not p.is_dir() and not is_gguf_file(p):
            raise BadModel(f"no such folder or GGUF file: {p}")
        userdirs.add_folder(p)
        from specdesk.core.discovery import folder_entries

        found = folder_entries(p)
        if not any(e.usable for e in found):  # remembered all the same: models put there later are listed
            why = found[0].reason if found else "no model folder or GGUF file in it"
            print(f"specdesk: note: {p} holds no model specdesk can load yet ({why})", file=sys.stderr)
    if args.remove:
        before = userdirs.added_folders()
        if len(userdirs.remove_folder(args.remove)) == len(before):
            from specdesk.core.errors import BadSetting

            listed = ", ".join(before) if before else "none"
            raise BadSetting(f"{args.remove} is not a remembered folder (remembered: {listed})")
    if args.drafts_for:
        from specdesk.core import phrases

        cands = drafts_for(args.drafts_for)
        own = phrases.own_table(args.drafts_for)
        if args.json:
            rows = [c.to_dict() for c in cands]
            if own is not None:  # after the usable drafts, as the text lists it
                at = sum(1 for c in cands if c.compatible)
                rows.insert(at, {"name": "the model's own phrases", "path": str(own.path), "format": "phrases",
                                 "drafter": "phrases", "contexts": own.contexts, "replies": own.replies,
                                 "compatible": True, "incompatibility": ""})
            print(json.dumps(rows, indent=2))
            return 0
        good = [c for c in cands if c.compatible]
        print(f"Compatible drafts for {args.drafts_for} (distilled for it first, then for the same model, then smallest first):")
        for c in good:
            note = f"  ({c.reason})" if c.reason else ""
            print(f"  {_short(c.entry.name):40s} {param_count(c.entry.params):>8s} params  "
                  f"{disk_size(c.entry.bytes_on_disk):>9s}{note}")
        if own is not None:
            print(f"  the model's own phrases: {own.describe()} (`specdesk distill --phrases-only`; drafter "
                  f"phrases, taken when no draft is given)\n    {own.path}")
        if not good and own is None:
            print("  none (prompt lookup, --drafter ngram, needs no draft model; `specdesk distill --target TARGET "
                  "--out DIR --phrases-only` counts a table of its phrases without training, `specdesk distill` "
                  "trains a draft)")
        others = [c for c in cands if not c.compatible]
        if others:
            print("Not usable as drafts:")
            for c in others:
                print(f"  {_short(c.entry.name):40s} {c.reason}")
        return 0
    entries = discover()
    if args.json:
        print(json.dumps([e.to_dict() for e in entries], indent=2))
        return 0
    header = (f"{'NAME':40s} {'SOURCE':9s} {'FORMAT':6s} {'ARCH':10s} {'PARAMS':>8s} {'VOCAB':>7s} {'CONTEXT':>7s} "
              f"{'DTYPE':9s} {'SIZE':>9s} {'QUANT':6s} CHAT")
    print(header)
    for e in entries:
        fmt = "gguf" if e.format == "gguf" else "hf"
        if not e.usable:
            print(f"{_short(e.name):40s} {e.source:9s} {fmt:6s} unusable: {e.reason}")
            continue
        print(f"{_short(e.name):40s} {e.source:9s} {fmt:6s} {str(e.architecture)[:10]:10s} "
              f"{param_count(e.params):>8s} {e.vocab_size or '-':>7} {e.context_length or '-':>7} "
              f"{str(e.dtype)[:9]:9s} {disk_size(e.bytes_on_disk):>9s} {(e.quantized or 'no')[:6]:6s} "
              f"{'yes' if e.chat_template else 'no'}")
    return 0


def _short(name: str, width: int = 40) -> str:
    """Long names (GGUF paths) keep their end, where the file name is."""
    return name if len(name) <= width else "…" + name[-(width - 1):]
