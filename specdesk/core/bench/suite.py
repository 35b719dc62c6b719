"""The benchmark's prompt suite, cut from standard-library modules the demo pair never saw in training.

Categories:
- ``completion``: a function's signature (and docstring) after some module context; the model writes the body.
- ``editing``: a whole function, then the start of a renamed copy; the answer repeats the prompt (prompt lookup's case).
- ``prose``: the opening words of a docstring or comment block.
- ``long_context``: ~1,200 tokens of a module, then continue.
- ``chat``: a user message through the target's chat template: the distiller's held-out prompts
  (``core.distill.prompts``, subjects no training prompt uses), so a distilled draft is measured on chat it
  never trained on. Only for targets with a chat template.
- ``chat-free``: user messages written by hand in forms none of the distiller's templates writes
  (``core.distill.prompts.FREE_PROMPTS``): how far a draft distilled on template prompts carries to other chat.
"""

from __future__ import annotations

import ast
import sysconfig
from dataclasses import dataclass
from pathlib import Path

# Held out of the demo pair's tokenizer and training (devscripts/train_demo.py imports this list).
HELD_OUT_MODULES = (
    "bisect.py", "calendar.py", "difflib.py", "fractions.py", "heapq.py",
    "pprint.py", "shlex.py", "statistics.py", "string.py", "textwrap.py",
)
STDLIB_CATEGORIES = ("completion", "editing", "prose", "long_context")
CHAT_CATEGORIES = ("chat", "chat-free")  # through the target's chat template: only for targets that have one
CATEGORIES = STDLIB_CATEGORIES + CHAT_CATEGORIES


@dataclass(frozen=True)
class Prompt:
    category: str
    name: str
    text: str
    chat: bool = False  # ``text`` is one user message, to go through the target's chat template


def chat_suite(n: int = 3, seed: int = 0) -> list[Prompt]:
    """``n`` held-out chat prompts (user messages; the runner applies the chat template)."""
    from specdesk.core.distill.prompts import chat_prompts

    out = []
    for i, text in enumerate(chat_prompts(n, held_out=True, seed=seed)):
        words = " ".join(text.split()[:3]).rstrip(":,.")
        out.append(Prompt("chat", f"{i}. {words}", text, chat=True))
    return out


def free_chat_suite(n: int = 3) -> list[Prompt]:
    """The first ``n`` hand-written chat prompts (distill.prompts.FREE_PROMPTS; at most their 24)."""
    from specdesk.core.distill.prompts import FREE_PROMPTS

    return [Prompt("chat-free", f"{i}. " + " ".join(t.split()[:3]).rstrip(":,.?"), t, chat=True)
            for i, t in enumerate(FREE_PROMPTS[:n])]


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _functions(source: str) -> list[ast.FunctionDef]:
    tree = ast.parse(source)
    out = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    return sorted(out, key=lambda n: n.lineno)


def _lines(source: str, start: int, end: int) -> str:
    return "".join(source.splitlines(keepends=True)[start:end])


def build_suite(per_category: int = 3, modules: tuple[str, ...] = HELD_OUT_MODULES, tokenizer=None,
                long_tokens: int = 1200, chat: bool = False) -> list[Prompt]:
    """Deterministic prompts: the same files give the same suite on every machine with this Python.

    With a tokenizer, long-context prompts are cut to about ``long_tokens`` tokens (at a line end).
    ``chat``: add the chat categories' ``per_category`` prompts each (held-out template prompts, hand-written ones).
    """
    prompts: dict[str, list[Prompt]] = {c: [] for c in CATEGORIES}
    for mod in modules:
        path = stdlib_dir() / mod
        if not path.exists():
            continue
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines(keepends=True)
        funcs = [f for f in _functions(source) if 6 <= (f.end_lineno - f.lineno) <= 40]
        name = mod.removesuffix(".py")
        # completion: 20 lines of context, the signature and the docstring, if any
        for f in funcs:
            body_start = f.body[0].end_lineno if isinstance(f.body[0], ast.Expr) else f.lineno
            if body_start >= f.end_lineno - 2:
                continue
            ctx = _lines(source, max(0, f.lineno - 21), body_start)
            prompts["completion"].append(Prompt("completion", f"{name}.{f.name}", ctx))
            break
        # editing: the function, then a renamed copy's first line
        for f in funcs:
            if len(f.body) < 2:
                continue
            src = _lines(source, f.lineno - 1, f.end_lineno)
            first = lines[f.lineno - 1]
            renamed = first.replace(f"def {f.name}(", f"def {f.name}_v2(", 1)
            indent = first[: len(first) - len(first.lstrip())]
            text = src + "\n" + indent + "# Same as above, under a new name:\n" + renamed
            prompts["editing"].append(Prompt("editing", f"{name}.{f.name}", text))
            break
        # prose: a docstring's first words
        for f in funcs:
            doc = ast.get_docstring(f, clean=False)
            if not doc or len(doc.split()) < 12:
                continue
            doc_node = f.body[0]
            head = _lines(source, f.lineno - 1, doc_node.lineno - 1)
            first_doc_line = lines[doc_node.lineno - 1]
            words = first_doc_line.split()
            cut = first_doc_line[: first_doc_line.index(words[min(3, len(words) - 1)])] if len(words) > 1 else first_doc_line
            prompts["prose"].append(Prompt("prose", f"{name}.{f.name}", head + cut))
            break
        # long context: the module's first ~4,500 characters (about 1,200 tokens), cut at a line end
        text = source[:4500]
        if tokenizer is not None:
            ids = tokenizer(source[: long_tokens * 8])["input_ids"][:long_tokens]
            text = tokenizer.decode(ids)
        text = text[: text.rfind("\n") + 1]
        prompts["long_context"].append(Prompt("long_context", name, text))
    if chat:
        prompts["chat"] = chat_suite(per_category)
        prompts["chat-free"] = free_chat_suite(per_category)
    suite = []
    for cat in CATEGORIES:
        suite.extend(prompts[cat][:per_category])
    return suite
