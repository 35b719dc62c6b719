"""Measured memory peaks of configurations the engine has really loaded, kept to set beside the estimate.

One JSON file, ``memory_history.json`` in the user data dir (``userdirs.data_dir()``, which
``SPECDESK_DATA_DIR`` overrides). A record is keyed by everything that changes the peak: the target and
its quantization, the draft (or drafter) and its quantization, dtype, device kind, context and the
library versions (a new torch or bitsandbytes can change the allocator or the storage layout).

``kind`` says what was measured: ``cuda_max_reserved`` (``torch.cuda.max_memory_reserved()``, which
leaves out the CUDA context) or ``cpu_peak_rss`` (the process's peak resident memory, everything).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from specdesk.core import userdirs

log = logging.getLogger(__name__)

FILENAME = "memory_history.json"
MAX_RECORDS = 500
KINDS = ("cuda_max_reserved", "cpu_peak_rss")
_lock = threading.Lock()


def library_versions() -> dict[str, str]:
    return dict(_versions())


@lru_cache(maxsize=1)
def _versions() -> tuple[tuple[str, str], ...]:
    out = {}
    for pkg in ("torch", "transformers", "bitsandbytes"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "absent"
    return tuple(out.items())


@dataclass(frozen=True)
class Measurement:
    target: str  # resolved folder
    target_quant: str  # QuantSpec.label: none, int8, nf4, nf4+dq, ...
    draft: str  # resolved draft folder, or "ngram" / "none"
    draft_quant: str
    dtype: str
    device: str  # "cuda" or "cpu"
    context: int
    peak_bytes: int
    kind: str
    versions: dict
    predicted_bytes: int | None = None
    time: float = 0.0

    def key(self) -> tuple:
        return (self.target, self.target_quant, self.draft, self.draft_quant, self.dtype, self.device, self.context,
                tuple(sorted(self.versions.items())))

    def comparable_bytes(self, cuda_context_bytes: int) -> int:
        """The peak on the planner's scale: the CUDA context is added to a torch allocator reading."""
        return self.peak_bytes + (cuda_context_bytes if self.kind == "cuda_max_reserved" else 0)

    def to_dict(self) -> dict:
        return asdict(self)


def history_path() -> Path:
    return userdirs.data_dir() / FILENAME


_NO_MODEL = ("ngram", "phrases", "none")  # drafters that load no draft model: named, not resolved as paths


def _norm_model(ref: str | os.PathLike | None) -> str:
    if ref is None:
        return "none"
    text = str(ref)
    if text in _NO_MODEL:
        return text
    return str(Path(text).expanduser().resolve())


def device_kind(device: str) -> str:
    return "cuda" if str(device).startswith("cuda") else "cpu"


def load_measurements(path: Path | None = None) -> list[Measurement]:
    """Every stored record; an unreadable file counts as empty (it is rewritten on the next record)."""
    path = path or history_path()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    out = []
    for r in raw.get("records", []) if isinstance(raw, dict) else []:
        try:
            out.append(Measurement(**r))
        except TypeError:
            continue  # a record from another version of specdesk
    return out


def record_measurement(target: str | os.PathLike, target_quant: str, context: int, peak_bytes: int, device: str, *,
                       draft: str | os.PathLike | None = None, draft_quant: str = "none", dtype: str = "float32",
                       kind: str | None = None, predicted_bytes: int | None = None,
                       path: Path | None = None) -> Measurement:
    """Store (or replace) the measured peak of one configuration. Raises OSError if the file can't be written."""
    dev = device_kind(device)
    m = Measurement(target=_norm_model(target), target_quant=str(target_quant), draft=_norm_model(draft),
                    draft_quant=str(draft_quant) if draft not in (None, *_NO_MODEL) else "none",
                    dtype=str(dtype), device=dev, context=int(context), peak_bytes=int(peak_bytes),
                    kind=kind or ("cuda_max_reserved" if dev == "cuda" else "cpu_peak_rss"),
                    versions=library_versions(), predicted_bytes=predicted_bytes, time=time.time())
    path = path or history_path()
    with _lock:
        records = [r for r in load_measurements(path) if r.key() != m.key()]
        records.append(m)
        records = records[-MAX_RECORDS:]
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".memory-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"version": 1, "records": [r.to_dict() for r in records]}, f, indent=1)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return m


def lookup_measurement(target: str | os.PathLike, target_quant: str, context: int, device: str, *,
                       draft: str | os.PathLike | None = None, draft_quant: str = "none", dtype: str = "float32",
                       path: Path | None = None) -> Measurement | None:
    """The stored peak of this configuration with the installed library versions, if any.

    The record at exactly ``context`` when there is one, else the one nearest to it (its ``context``
    says which: the planner re-estimates at that context to set them side by side).
    """
    want = Measurement(target=_norm_model(target), target_quant=str(target_quant), draft=_norm_model(draft),
                       draft_quant=str(draft_quant) if draft not in (None, *_NO_MODEL) else "none",
                       dtype=str(dtype), device=device_kind(device), context=int(context), peak_bytes=0,
                       kind="", versions=library_versions()).key()
    same = [r for r in load_measurements(path) if r.key()[:6] == want[:6] and r.key()[7:] == want[7:]]
    if not same:
        return None
    return min(reversed(same), key=lambda r: abs(r.context - int(context)))
