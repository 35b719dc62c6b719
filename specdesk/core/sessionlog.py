"""Session logs: JSON Lines, written and flushed line by line so a killed process loses no finished step.

A file holds one session (fixed models and device) and one or more generations:

    {"type": "header", "format": "specdesk-session/1", "versions": {...}, "device": ..., "target": {...},
     "draft": {...} | null, "drafter": ..., "settings": {...}, "created": ...}
    {"type": "generation", "index": 0, "settings": {...}, "drafter": ..., "prompt": ..., "prompt_tokens": N,
     "chat_template": true | false}
    {"type": "step", "generation": 0, "index": 0, "token_ids": [...], "drafted": 4, "accepted": 3, ...}
    {"type": "summary", "generation": 0, "stop_reason": ..., "text": ..., "stats": {...}}
    {"type": "error", "generation": 0, "message": ...}   (instead of a summary: out of memory, an engine error)

``specdesk generate --log`` writes one generation; the desktop app appends one per reply.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specdesk.core.events import DoneEvent, PrefillEvent, StepEvent

FORMAT = "specdesk-session/1"


def library_versions() -> dict:
    import importlib.metadata as md

    out = {}
    for dist in ("specdesk", "torch", "transformers", "bitsandbytes", "tokenizers"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    out["python"] = platform.python_version()
    return out


class SessionLogWriter:
    """Append-only writer. Every line is flushed (and fsynced at generation ends) as it is written."""

    def __init__(self, path: str | os.PathLike, engine_info: dict, settings: dict | None = None,
                 memory: Callable[[], dict] | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        cut = _ends_mid_line(self.path)
        self._f = self.path.open("a", encoding="utf-8")
        if cut:  # an earlier run was killed mid-line: start this one on a line of its own
            self._f.write("\n")
        self._memory = memory
        self._generation = -1
        try:
            self._write({"type": "header", "format": FORMAT, "created": _now(), "versions": library_versions(),
                         "platform": platform.platform(), **engine_info, "settings": settings or {}})
        except OSError:
            self.close()
            raise

    def _write(self, obj: dict) -> None:
        self._f.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
        self._f.flush()

    def begin(self, prompt: str | list[int], settings: dict, drafter: str, prompt_tokens: int | None = None,
              chat_template: bool | None = None, system: str | None = None, **extra) -> int:
        """Start a generation. ``chat_template``: whether the prompt went through the model's chat template;
        ``extra`` keys (e.g. a server's ``request``) go into its line as they are."""
        self._generation += 1
        line = {"type": "generation", "index": self._generation, "created": _now(), "drafter": drafter,
                "settings": settings, "prompt": prompt, "prompt_tokens": prompt_tokens}
        if chat_template is not None:
            line["chat_template"] = chat_template
        if system is not None:
            line["system"] = system
        self._write({**line, **extra})
        return self._generation

    def event(self, ev) -> None:
        """Record one engine event of the current generation."""
        g = self._generation
        if isinstance(ev, PrefillEvent):
            self._write({"type": "prefill", "generation": g, **_plain(ev)})
        elif isinstance(ev, StepEvent):
            line = {"type": "step", "generation": g, **ev.to_dict()}
            if self._memory is not None:
                line["memory"] = self._memory()
            self._write(line)
        elif isinstance(ev, DoneEvent):
            self._write({"type": "summary", "generation": g, "stop_reason": ev.stop_reason, "seed": ev.seed,
                         "text": ev.text, "token_ids": list(ev.token_ids), "stats": ev.stats.to_dict()})
            os.fsync(self._f.fileno())

    def error(self, message: str) -> None:
        """The current generation ended without a summary: out of memory, or an error of the engine."""
        self._write({"type": "error", "generation": self._generation, "created": _now(), "message": message})
        os.fsync(self._f.fileno())

    def close(self) -> None:
        """Flush and close; a disk that fails now has already been reported by the writes (never raises)."""
        if not self._f.closed:
            try:
                self._f.flush()
            except OSError:
                pass
            finally:
                try:
                    self._f.close()
                except OSError:
                    pass

    def __enter__(self) -> "SessionLogWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def new_log_path(folder: str | os.PathLike, engine, suffix: str = "") -> Path:
    """A fresh file name for a session of ``engine``: ``<stamp>_<target>+<draft or drafter><suffix>.jsonl``."""
    import re

    def safe(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9._+-]+", "_", str(text).rsplit("/", 1)[-1])[:60]

    folder = Path(folder)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    pair = safe(engine.target.name) + "+" + (safe(engine.draft.name) if engine.draft else engine.drafter) + suffix
    path = folder / f"{stamp}_{pair}.jsonl"
    n = 1
    while path.exists():
        n += 1
        path = folder / f"{stamp}_{pair}-{n}.jsonl"
    return path


def _plain(ev) -> dict:
    from dataclasses import asdict

    return asdict(ev)


def _now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


@dataclass
class Generation:
    index: int
    info: dict
    prefill: dict | None = None
    steps: list[dict] = field(default_factory=list)
    summary: dict | None = None
    error: str | None = None  # why it ended without a summary (out of memory, an engine error)

    @property
    def complete(self) -> bool:
        return self.summary is not None


@dataclass
class SessionLog:
    path: Path
    header: dict
    generations: list[Generation]
    truncated: bool = False  # the last line was cut (the writer was killed mid-line)
    damaged: int = 0  # lines before the last that were not a JSON object (skipped): an earlier run cut mid-line


def _ends_mid_line(path: Path) -> bool:
    """Whether ``path`` exists and its last byte is not a newline (a writer killed mid-line)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except OSError:
        return False


_HEADER_START = '{"type":"header"'


def read_log(path: str | os.PathLike) -> SessionLog:
    """Read a session log, tolerating a half-written last line, and damaged lines before it (a run killed
    mid-line that a later run appended to: skipped and counted, a header glued onto one recovered). Raises
    ValueError for a non-log file."""
    p = Path(path)
    header: dict | None = None
    gens: list[Generation] = []
    truncated = False
    damaged = 0
    with p.open(encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    last = max((n for n, line in enumerate(lines) if line.strip()), default=-1)
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            if n == last:  # a half-written last line
                truncated = True
                break
            damaged += 1
            at = line.find(_HEADER_START, 1)  # an older writer appended a run's header to the cut line
            try:
                obj = json.loads(line[at:]) if at > 0 else None
            except ValueError:
                obj = None
            if obj is None:
                continue
        if not isinstance(obj, dict):  # JSON, but not one of the log's lines
            damaged += 1
            continue
        kind = obj.get("type")
        if kind == "header":
            if header is None:
                header = obj
        elif kind == "generation":
            gens.append(Generation(index=obj.get("index", len(gens)), info=obj))
        elif gens and kind == "prefill":
            gens[-1].prefill = obj
        elif gens and kind == "step":
            gens[-1].steps.append(obj)
        elif gens and kind == "summary":
            gens[-1].summary = obj
        elif gens and kind == "error":
            gens[-1].error = obj.get("message")
    if header is None or header.get("format", "").split("/")[0] != FORMAT.split("/")[0]:
        raise ValueError(f"{p.name} is not a specdesk session log")
    return SessionLog(path=p, header=header, generations=gens, truncated=truncated, damaged=damaged)
