"""Finding every model specdesk can use: the bundled pair, the local Hugging Face cache, added folders.

Each entry is described from its files alone (config.json, safetensors headers, tokenizer config):
nothing is loaded, so listing is fast and a broken entry (partial download, no weights, unreadable
config) becomes an "unusable" row with its reason instead of stopping the listing.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from specdesk.core import userdirs
from specdesk.core.errors import SpecdeskError
from specdesk.core.loading import (DEMO_NAMES, TOKENIZER_FILES, bundled_models_dir, hf_cache_dir, read_config,
                                   resolve, weight_files)
from specdesk.core.stheader import folder_tensors

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelEntry:
    name: str  # what to pass as --target/--draft: demo name, HF id, or folder path
    path: str
    source: str  # "bundled", "hf-cache" or "added"
    usable: bool
    reason: str = ""  # why not usable
    architecture: str | None = None
    params: int | None = None
    vocab_size: int | None = None
    dtype: str | None = None
    bytes_on_disk: int = 0
    quantized: str | None = None  # quantization method of an already-quantized checkpoint
    chat_template: bool | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _text_config(cfg: dict) -> dict:
    return cfg.get("text_config") or cfg


def _folder_bytes(path: Path) -> int:
    total = 0
    for p in path.iterdir():
        try:
            if p.is_file():
                total += p.stat().st_size  # follows the hub's symlinks to blobs
        except OSError:
            pass
    return total


def _has_chat_template(path: Path) -> bool:
    if (path / "chat_template.jinja").exists() or (path / "chat_template.json").exists():
        return True
    try:
        cfg = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
        return bool(cfg.get("chat_template"))
    except (OSError, ValueError):
        return False


def describe_folder(path: Path, name: str, source: str) -> ModelEntry:
    """Describe one model folder from its files; never raises for a broken folder."""
    base = dict(name=name, path=str(path), source=source)
    try:
        cfg = read_config(path)
    except SpecdeskError as e:
        return ModelEntry(**base, usable=False, reason=str(e), bytes_on_disk=_safe_bytes(path))
    tcfg = _text_config(cfg)
    quant = cfg.get("quantization_config")
    info = dict(architecture=cfg.get("model_type"), vocab_size=tcfg.get("vocab_size"),
                dtype=cfg.get("torch_dtype") or cfg.get("dtype") or tcfg.get("torch_dtype") or tcfg.get("dtype"),
                quantized=(quant.get("quant_method", "yes") if isinstance(quant, dict) else None),
                chat_template=_has_chat_template(path), bytes_on_disk=_safe_bytes(path))
    try:
        files = weight_files(path)
    except SpecdeskError as e:
        return ModelEntry(**base, usable=False, reason=str(e), **info)
    if not files:
        why = "weights in the old pytorch_model.bin format (convert to safetensors)" \
            if (path / "pytorch_model.bin").exists() else "no weights (*.safetensors): partial download?"
        return ModelEntry(**base, usable=False, reason=why, **info)
    try:
        tensors = folder_tensors(files)
    except (OSError, ValueError) as e:
        return ModelEntry(**base, usable=False, reason=f"unreadable weights file: {e}", **info)
    params = sum(t.numel for t in tensors.values())
    if not any((path / f).exists() for f in TOKENIZER_FILES):
        return ModelEntry(**base, usable=False, reason="no tokenizer files", params=params, **info)
    return ModelEntry(**base, usable=True, params=params, **info)


def _safe_bytes(path: Path) -> int:
    try:
        return _folder_bytes(path)
    except OSError:
        return 0


def _hf_cache_entries() -> list[ModelEntry]:
    from huggingface_hub import scan_cache_dir

    cache = hf_cache_dir()
    if not cache.exists():
        return []
    try:
        info = scan_cache_dir(cache)
    except Exception as e:  # a cache we cannot read is one unusable row, not a crash
        return [ModelEntry(name=str(cache), path=str(cache), source="hf-cache", usable=False,
                           reason=f"cannot scan the Hugging Face cache: {e}")]
    out = []
    incomplete = {}
    for f in info.incomplete_files:
        repo_dir = f.file_path.parent.parent  # <cache>/models--org--name/blobs/x.incomplete
        incomplete[repo_dir] = incomplete.get(repo_dir, 0) + 1
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model":
            continue
        revs = sorted(repo.revisions, key=lambda r: ("main" not in r.refs, -r.last_modified))
        if not revs:
            out.append(ModelEntry(name=repo.repo_id, path=str(repo.repo_path), source="hf-cache", usable=False,
                                  reason="no snapshot (download never finished)"))
            continue
        entry = describe_folder(revs[0].snapshot_path, repo.repo_id, "hf-cache")
        if entry.usable and incomplete.get(repo.repo_path):
            entry = ModelEntry(**{**entry.to_dict(), "usable": False,
                                  "reason": f"partial download: {incomplete[repo.repo_path]} file(s) still incomplete"})
        out.append(entry)
    for w in info.warnings:
        out.append(ModelEntry(name=str(getattr(w, "args", [w])[0])[:80], path=str(cache), source="hf-cache",
                              usable=False, reason=f"corrupted cache entry: {w}"))
    return out


def discover(include_hf_cache: bool = True) -> list[ModelEntry]:
    """Every model specdesk knows of, usable or not (with the reason)."""
    entries: list[ModelEntry] = []
    bundled = bundled_models_dir()
    for name in DEMO_NAMES:
        entries.append(describe_folder(bundled / name, name, "bundled"))
    if include_hf_cache:
        entries.extend(_hf_cache_entries())
    for folder in userdirs.added_folders():
        p = Path(folder)
        if not p.is_dir():
            entries.append(ModelEntry(name=folder, path=folder, source="added", usable=False,
                                      reason="folder no longer exists"))
        else:
            entries.append(describe_folder(p, folder, "added"))
    return entries


# ----------------------------------------------------------------------------- compatible drafts

_tokenizers: dict[tuple[str, float], object] = {}


def _tokenizer(path: Path):
    from specdesk.core.loading import load_tokenizer

    key_file = next((path / f for f in TOKENIZER_FILES if (path / f).exists()), path / "config.json")
    key = (str(path), key_file.stat().st_mtime)
    if key not in _tokenizers:
        _tokenizers[key] = load_tokenizer(path)
    return _tokenizers[key]


def _tokenizer_digest(path: Path) -> str | None:
    h = hashlib.sha256()
    found = False
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        p = path / f
        if p.exists():
            h.update(p.read_bytes())
            found = True
    return h.hexdigest() if found else None


@dataclass(frozen=True)
class DraftCandidate:
    entry: ModelEntry
    compatible: bool
    reason: str = ""

    def to_dict(self) -> dict:
        return {**self.entry.to_dict(), "compatible": self.compatible, "incompatibility": self.reason}


def drafts_for(target: str, entries: list[ModelEntry] | None = None) -> list[DraftCandidate]:
    """Local models that can draft for ``target``: compatible ones smallest first, then the others with why."""
    from specdesk.core.compat import check_tokenizers

    t_path = resolve(target)
    t_entry = describe_folder(t_path, target, "target")
    t_digest = _tokenizer_digest(t_path)
    t_tok = None
    good, bad = [], []
    for e in entries if entries is not None else discover():
        if Path(e.path).resolve() == t_path.resolve():
            continue
        if not e.usable:
            bad.append(DraftCandidate(e, False, f"unusable: {e.reason}"))
            continue
        if t_entry.params and e.params and e.params >= t_entry.params:
            bad.append(DraftCandidate(e, False, "not smaller than the target"))
            continue
        if t_digest is not None and _tokenizer_digest(Path(e.path)) == t_digest:
            good.append(DraftCandidate(e, True))  # byte-identical tokenizer files: same mapping
            continue
        try:
            t_tok = t_tok or _tokenizer(t_path)
            comp = check_tokenizers(t_tok, _tokenizer(Path(e.path)), target, e.name)
        except SpecdeskError as err:
            bad.append(DraftCandidate(e, False, str(err)))
            continue
        (good if comp.ok else bad).append(DraftCandidate(e, comp.ok, comp.reason))
    good.sort(key=lambda c: (c.entry.params or 0, c.entry.bytes_on_disk))
    return good + bad
