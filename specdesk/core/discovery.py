"""Finding every model specdesk can use: the bundled pair, the local Hugging Face cache, the GGUF files in
LM Studio's, Ollama's and llama.cpp's stores, and added folders.

Each entry is described from its files alone (config.json, safetensors headers, tokenizer config, GGUF
headers): nothing is loaded, so listing is fast and a broken entry (partial download, no weights,
unreadable config, truncated GGUF, an architecture transformers cannot load) becomes an "unusable" row
with its reason instead of stopping the listing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from specdesk.core import userdirs
from specdesk.core.errors import BadModel, SpecdeskError
from specdesk.core.loading import (DEMO_NAMES, TOKENIZER_FILES, bundled_models_dir, hf_cache_dir, is_gguf,
                                   read_config, resolve, weight_files)
from specdesk.core.stheader import folder_tensors

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelEntry:
    name: str  # what to pass as --target/--draft: demo name, HF id, folder or GGUF path, ollama:<name>
    path: str
    source: str  # "bundled", "hf-cache", "lmstudio", "ollama", "llama.cpp" or "added"
    usable: bool
    reason: str = ""  # why not usable
    architecture: str | None = None
    params: int | None = None
    vocab_size: int | None = None
    dtype: str | None = None  # a GGUF file's quantization as llama.cpp names it (Q4_K_M, Q8_0, F16, ...)
    bytes_on_disk: int = 0
    quantized: str | None = None  # quantization method of an already-quantized checkpoint
    chat_template: bool | None = None
    format: str = "safetensors"  # or "gguf" (converted once into specdesk's cache when first loaded)
    context_length: int | None = None
    draft_for: dict | None = None  # a distilled draft: its target (name, file, sha256, shapes), see core.distill

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
                chat_template=_has_chat_template(path), bytes_on_disk=_safe_bytes(path),
                context_length=tcfg.get("max_position_embeddings"))
    borrow = cfg.get("specdesk") if isinstance(cfg.get("specdesk"), dict) else None
    if borrow and borrow.get("borrows"):
        info["draft_for"] = borrow.get("target") or {}
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
    params = sum(t.numel for n, t in tensors.items() if n != "specdesk.head_ids")  # a reduced head's token ids
    if not any((path / f).exists() for f in TOKENIZER_FILES):
        return ModelEntry(**base, usable=False, reason="no tokenizer files", params=params, **info)
    return ModelEntry(**base, usable=True, params=params, **info)


_gguf_entries: dict[tuple, ModelEntry] = {}  # (path, size, mtime, name, source) -> entry: GUI refreshes


def describe_gguf(path: Path, name: str, source: str) -> ModelEntry | None:
    """Describe one GGUF file from its header; None for a file that is not a model (a vision projector)."""
    from specdesk.core.models.gguf import inspect_gguf

    try:
        st = path.stat()
    except OSError as e:
        return ModelEntry(name=name, path=str(path), source=source, usable=False, format="gguf",
                          reason=f"unreadable: {e.strerror or e}")
    key = (str(path), st.st_size, st.st_mtime_ns, name, source)
    if key in _gguf_entries:
        return _gguf_entries[key]
    base = dict(name=name, path=str(path), source=source, format="gguf", bytes_on_disk=st.st_size)
    try:
        info = inspect_gguf(path)
    except SpecdeskError as e:
        entry = ModelEntry(**base, usable=False, reason=str(e))
    else:
        if info.architecture == "clip":
            return None
        entry = ModelEntry(**base, usable=info.runnable, reason=info.problem or "", architecture=info.architecture,
                           params=info.params, vocab_size=info.vocab_size, dtype=info.file_type,
                           chat_template=info.chat_template, context_length=info.context_length)
    _gguf_entries[key] = entry
    return entry


def describe_path(path: Path, name: str, source: str) -> ModelEntry:
    """A resolved model (folder or GGUF file), described."""
    if is_gguf(path):
        return describe_gguf(path, name, source) or ModelEntry(
            name=name, path=str(path), source=source, usable=False, format="gguf",
            reason="a vision projector (mmproj), not a language model")
    return describe_folder(path, name, source)


def _folder_entries(folder: Path, name: str, source: str) -> list[ModelEntry]:
    """A folder: one model folder, or a folder of GGUF files (each one an entry)."""
    from specdesk.core.models.stores import find_ggufs

    if not (folder / "config.json").exists():
        ggufs = find_ggufs(folder)
        if ggufs:
            return [e for p in ggufs if (e := describe_gguf(p, str(p), source)) is not None]
    return [describe_folder(folder, name, source)]


def _store_entries() -> list[ModelEntry]:
    """GGUF files in LM Studio's, Ollama's and llama.cpp's stores."""
    from specdesk.core.models.stores import llamacpp_models, lmstudio_models, ollama_models

    out = []
    for m in lmstudio_models() + llamacpp_models():
        if (e := describe_gguf(m.path, m.name, m.store)) is not None:
            out.append(e)
    for m, name, problem in ollama_models():
        if m is None:
            out.append(ModelEntry(name=name if Path(name).is_absolute() else f"ollama:{name}", path="",
                                  source="ollama", usable=False, format="gguf",
                                  reason=problem))
        elif (e := describe_gguf(m.path, m.name, m.store)) is not None:
            out.append(e)
    return out


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
        snapshot = revs[0].snapshot_path
        if not (snapshot / "config.json").exists() and (ggufs := _first_ggufs(snapshot)):
            # a GGUF repository: each file is a model, named org/repo/file.gguf
            out.extend(e for p in ggufs if (e := describe_gguf(p, f"{repo.repo_id}/{p.name}", "hf-cache")))
            continue
        entry = describe_folder(snapshot, repo.repo_id, "hf-cache")
        if entry.usable and incomplete.get(repo.repo_path):
            entry = ModelEntry(**{**entry.to_dict(), "usable": False,
                                  "reason": f"partial download: {incomplete[repo.repo_path]} file(s) still incomplete"})
        out.append(entry)
    for w in info.warnings:
        out.append(ModelEntry(name=str(getattr(w, "args", [w])[0])[:80], path=str(cache), source="hf-cache",
                              usable=False, reason=f"corrupted cache entry: {w}"))
    return out


def _first_ggufs(folder: Path) -> list[Path]:
    from specdesk.core.models.gguf import first_parts

    return first_parts(folder)


def discover(include_hf_cache: bool = True, include_stores: bool = True) -> list[ModelEntry]:
    """Every model specdesk knows of, usable or not (with the reason)."""
    entries: list[ModelEntry] = []
    bundled = bundled_models_dir()
    for name in DEMO_NAMES:
        entries.append(describe_folder(bundled / name, name, "bundled"))
    for folder in _bundled_drafts(bundled):  # drafts specdesk distilled for models users fetch themselves
        entries.append(describe_folder(folder, str(folder), "bundled"))
    if include_hf_cache:
        entries.extend(_hf_cache_entries())
    if include_stores:
        entries.extend(_store_entries())
    for folder in userdirs.added_folders():
        p = Path(folder)
        if p.is_file():
            if (e := describe_gguf(p, folder, "added")) is not None:
                entries.append(e)
        elif not p.is_dir():
            entries.append(ModelEntry(name=folder, path=folder, source="added", usable=False,
                                      reason="folder no longer exists"))
        else:
            entries.extend(_folder_entries(p, folder, "added"))
    return _without_repeats(entries)


def folder_entries(folder: str | os.PathLike) -> list[ModelEntry]:
    """The models an added folder (or GGUF file) holds, as discover() lists them (unusable ones with why)."""
    p = Path(folder)
    if p.is_file():
        e = describe_gguf(p, str(folder), "added")
        return [e] if e is not None else []
    return _folder_entries(p, str(folder), "added") if p.is_dir() else []


def _bundled_drafts(bundled: Path) -> list[Path]:
    try:
        return sorted(p for p in bundled.iterdir()
                      if p.name not in DEMO_NAMES and p.is_dir() and (p / "config.json").exists())
    except OSError:
        return []


_hashes: dict[tuple, str] = {}
HASHES_FILE = "sha256.json"  # in the user cache: a target file's sha256 by path, size and modification time


def _hash_file() -> Path:
    return userdirs.cache_dir() / HASHES_FILE


def _saved_hash(key: tuple) -> str | None:
    saved = userdirs.read_json_dict(_hash_file()).get(key[0])
    return saved[2] if isinstance(saved, list) and len(saved) == 3 and tuple(saved[:2]) == key[1:] else None


def _save_hash(key: tuple, sha: str) -> None:
    """Kept across processes (a one-shot `specdesk generate` hashed SmolLM2's 98 MB file every call: ~0.15-0.2 s);
    a cache that cannot be written is only slower."""
    saved = userdirs.read_json_dict(_hash_file())
    # files moved or deleted since they were hashed leave the cache (it would otherwise grow with every file ever seen)
    saved = {p: v for p, v in saved.items() if os.path.exists(p)}
    saved[key[0]] = [key[1], key[2], sha]
    try:
        userdirs.write_json(_hash_file(), saved)
    except OSError:
        pass


def _target_sha256(path: Path) -> str | None:
    """The sha256 a distilled draft names for its target (a GGUF file's, or a folder's weights), cached in the
    process, and a file's also in the user cache by path, size and modification time."""
    from specdesk.core.distill.pipeline import file_sha256

    try:
        st = path.stat()
    except OSError:
        return None
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _hashes:
        kept = path.is_file()  # a folder's size and time do not follow its files' contents: hashed once a process
        sha = _saved_hash(key) if kept else None
        if sha is None:
            sha = file_sha256(path)
            if kept:
                _save_hash(key, sha)
        _hashes[key] = sha
    return _hashes[key]


def _distilled_fit(e: ModelEntry, t_path: Path, t_entry: ModelEntry) -> tuple[bool, str]:
    """(whether this is the draft distilled for exactly this target, why it cannot serve it or "")."""
    want = e.draft_for or {}
    named = want.get("name") or "another model"
    if want.get("vocab_size") and t_entry.vocab_size and want["vocab_size"] != t_entry.vocab_size:
        return False, f"distilled for {named}: it borrows that model's embeddings (vocabulary {want['vocab_size']})"
    if want.get("sha256") and want.get("sha256") == _target_sha256(t_path):
        return True, ""
    from specdesk.core.plan.params import analyze_or_none

    a = analyze_or_none(str(t_path))
    if a is not None and want.get("hidden_size") and a.hidden_size != want["hidden_size"]:
        return False, f"distilled for {named}: it borrows that model's embeddings (hidden size {want['hidden_size']})"
    return False, ""


def distilled_for(draft: str | Path, target: str | Path) -> bool:
    """Whether ``draft`` is a draft distilled for exactly ``target``: its config names the target file's sha256 (the
    hash cached as :func:`own_draft` keeps it). False for any other draft, without hashing the target."""
    from specdesk.core.distill.draft import made_for

    want = made_for(Path(draft)).get("sha256")
    return bool(want) and want == _target_sha256(Path(target))


def drafting_with(found: str, drafter: str | None, target: str | None = None) -> str:
    """The line that says a draft found by :func:`own_draft` is used (of it, drafter "phrases" reads only its table of
    the target's phrases), and for which file it was distilled where that is not exactly ``target``."""
    name = Path(found).name
    what = f"the table of this model's phrases in {name}" if drafter == "phrases" else name
    if target is None or distilled_for(found, resolve(target)):
        return f"drafting with {what}, distilled for this model"
    from specdesk.core.distill.draft import made_for

    name = made_for(Path(found)).get("name") or "another file"
    return (f"drafting with {what}, distilled for {name}: the same shapes and tokenizer (this model "
            f"in another file, or a fine-tune of it); output stays this model's")


def _distilled_drafts() -> list[tuple[Path, str]]:
    """(folder, source) of every draft distilled for some target that specdesk knows: the bundled ones, then those
    `specdesk distill` made here (it remembers its output folder), the newest first."""
    from specdesk.core.distill.draft import borrow_info

    found = [(p, "bundled") for p in _bundled_drafts(bundled_models_dir())]
    made = []
    for text in userdirs.added_folders():
        p = Path(text)
        if p.is_dir() and borrow_info(p) is not None:
            try:
                made.append((p.stat().st_mtime, p))
            except OSError:
                continue
    return found + [(p, "added") for _, p in sorted(made, key=lambda m: -m[0])]


def own_draft(target: str) -> str | None:
    """The draft distilled for ``target``, or None: what `specdesk generate` and `serve` draft with when no draft is
    given. A bundled one, or one `specdesk distill` made here (the newest first). First one distilled for exactly this
    file (its card names the file's sha256); else one distilled for the same model in another file (another
    quantization or format, or a fine-tune of it: the same vocabulary, width, layers and tokenizer; it borrows this
    target's own embeddings and head, and verification keeps the output this target's). Cheap for any other target:
    its vocabulary and hidden size come from its header or config.json (describing it whole imported transformers'
    GGUF readers, ~0.5 s of a one-shot call), and only a target with a draft's shapes is hashed (SmolLM2's 98 MB file:
    ~0.2 s, kept in the user cache) and, where the hash differs, has its tokenizer compared with the draft's (the
    verdict kept too)."""
    try:
        t_path = resolve(target)
    except SpecdeskError:
        return None
    if t_path.is_dir() and t_path.parent == bundled_models_dir():
        return None  # the demo models have their own pairing (and a bundled draft loads only as a draft)
    from specdesk.core.distill.draft import borrow_info

    if borrow_info(t_path) is not None:
        return None  # a distilled draft loaded as a target: refused in one line by the load, with no draft beside it
    shapes = None
    same_shapes = []
    for path, source in _distilled_drafts():
        e = describe_folder(path, path.name if source == "bundled" else str(path), source)
        want = e.draft_for or {}
        if not e.usable or not want.get("sha256"):
            continue
        shapes = shapes or _shapes(t_path)
        if shapes[:2] != (want.get("vocab_size"), want.get("hidden_size")):  # the layers: same_model's, below
            continue
        if want["sha256"] == _target_sha256(t_path):
            return str(path)
        same_shapes.append(path)
    return next((str(p) for p in same_shapes if same_model(t_path, p)), None)


SAME_FILE = "same-model.json"  # in the user cache: same_model's verdicts, by target, its files' sizes and times


def _same_key(target: Path, draft: Path) -> str | None:
    """What same_model's verdict depends on: the target's path and the size and time of the files that say its shapes
    and tokenizer (a GGUF file itself; a folder's config and tokenizer files), and the draft's config."""
    files = [target] if target.is_file() else [target / f for f in ("config.json", *TOKENIZER_FILES)]
    try:
        stamps = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.exists()]
        stamps.append(("draft", (draft / "config.json").stat().st_mtime_ns))
    except OSError:
        return None
    return json.dumps([str(target.resolve()), str(draft.resolve()), stamps])


def same_model(target: Path, draft: Path) -> bool:
    """Whether a distilled ``draft`` (made for another file) fits ``target`` as the model it was made for: the
    vocabulary, width and layers its config names, and the same tokenizer (token for token, the same special tokens). The
    verdict is kept in the user cache (loading two tokenizers to compare them took ~1 s of every load of SmolLM2 as a
    Hugging Face folder)."""
    from specdesk.core.compat import check_tokenizers
    from specdesk.core.distill.draft import made_for

    target, draft = Path(target), Path(draft)
    key = _same_key(target, draft)
    if key is None:
        return False
    kept = userdirs.read_json_dict(userdirs.cache_dir() / SAME_FILE)
    if isinstance(kept.get(key), bool):
        return kept[key]
    want = made_for(draft)
    ok = _shapes_match(_shapes(target), want)
    if ok:
        try:
            ok = check_tokenizers(_tokenizer(target), _tokenizer(draft)).ok
        except Exception:  # a tokenizer that does not load: not the same model as far as we can tell
            ok = False
    try:
        userdirs.write_json(userdirs.cache_dir() / SAME_FILE, {**_live_verdicts(kept, key), key: ok})
    except OSError:  # a read-only cache: decided again next time
        pass
    return ok


def _live_verdicts(kept: dict, key: str) -> dict:
    """The kept verdicts still worth keeping beside a new one under ``key``: not one for the same target and draft
    (their files changed since: ``key`` supersedes it), nor one whose target or draft is gone."""
    pair = json.loads(key)[:2]
    live = {}
    for k, v in kept.items():
        try:
            paths = json.loads(k)[:2]
        except (ValueError, TypeError):
            continue
        if len(paths) == 2 and paths != pair and all(isinstance(p, str) and os.path.exists(p) for p in paths):
            live[k] = v
    return live


def _shapes(path: Path) -> tuple[int | None, int | None, int | None]:
    """A model's (vocabulary, hidden size, number of layers) from its GGUF header or config.json, read once (no model
    built), or Nones."""
    try:
        if path.is_dir():
            cfg = json.loads((path / "config.json").read_text())
            text = _text_config(cfg)
            return tuple(cfg.get(key) or text.get(key) for key in ("vocab_size", "hidden_size", "num_hidden_layers"))
        from specdesk.core.models.gguf import vocab_size
        from specdesk.core.models.ggufheader import read_gguf_header

        header = read_gguf_header(path)
        return vocab_size(header), header.get("embedding_length"), header.get("block_count")
    except (OSError, ValueError, SpecdeskError):
        return None, None, None


def _shapes_match(shapes: tuple[int | None, int | None, int | None], want: dict) -> bool:
    """Whether a model of ``shapes`` (:func:`_shapes`) has those a distilled draft's config names for the model it was
    made for: vocabulary and width, and the number of layers where the config records it (the same model, as far as
    shapes tell)."""
    vocab, hidden, layers = shapes
    if (vocab, hidden) != (want.get("vocab_size"), want.get("hidden_size")):
        return False
    return not want.get("num_hidden_layers") or layers == want["num_hidden_layers"]


def _without_repeats(entries: list[ModelEntry]) -> list[ModelEntry]:
    """An added folder inside a store (or a file listed twice) shows once, where it was first found."""
    seen, out = set(), []
    for e in entries:
        key = str(Path(e.path).resolve()) if e.path else e.name
        if key in seen:
            continue
        seen.add(key)
        out.append(e)
    return out


# ----------------------------------------------------------------------------- compatible drafts

def display_name(name: str) -> str:
    """A model's name for messages and lists: a path (an added folder, a GGUF file) shows its last part."""
    return Path(name).name if Path(name).is_absolute() else name


_tokenizers: dict[tuple[str, float], object] = {}


def _tokenizer(path: Path):
    from specdesk.core.loading import load_tokenizer

    if is_gguf(path):
        key = (str(path), path.stat().st_mtime)
        if key not in _tokenizers:
            from specdesk.core.models.convert import tokenizer_folder

            _tokenizers[key] = load_tokenizer(tokenizer_folder(path))
        return _tokenizers[key]
    key_file = next((path / f for f in TOKENIZER_FILES if (path / f).exists()), path / "config.json")
    key = (str(path), key_file.stat().st_mtime)
    if key not in _tokenizers:
        _tokenizers[key] = load_tokenizer(path)
    return _tokenizers[key]


def read_tokenizer(path: Path):
    """A resolved model's tokenizer (cached), or None where it has none to read (a config-only folder)."""
    try:
        return _tokenizer(Path(path))
    except (SpecdeskError, OSError, ValueError):
        return None


def _tokenizer_digest(path: Path) -> str | None:
    if is_gguf(path):  # every tokenizer.* value of the header, byte for byte
        from specdesk.core.models.ggufheader import read_gguf_header

        try:
            digest = read_gguf_header(path).tokenizer_digest
        except (OSError, ValueError):
            return None
        return f"gguf:{digest}" if digest else None
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
    """Local models that can draft for ``target``: drafts distilled for it first, then drafts distilled for the same
    model in another file (another quantization or format, or the model a fine-tune came from: the same vocabulary,
    width, layers and tokenizer), then compatible ones smallest first, then the others with why."""
    from specdesk.core.compat import check_tokenizers

    t_path = resolve(target)
    t_entry = describe_path(t_path, target, "target")
    if not t_entry.usable:  # a cut file, a folder without config.json: the one line generate and plan give
        raise BadModel(f"{display_name(target)} cannot be a target: {t_entry.reason}")
    t_digest = _tokenizer_digest(t_path)
    t_tok = t_shapes = None
    good, bad, own, kin = [], [], [], []
    for e in entries if entries is not None else discover():
        if e.path and Path(e.path).resolve() == t_path.resolve():
            continue
        if not e.usable:
            bad.append(DraftCandidate(e, False, f"unusable: {e.reason}"))
            continue
        if t_entry.params and e.params and e.params >= t_entry.params:
            bad.append(DraftCandidate(e, False, "not smaller than the target"))
            continue
        if e.draft_for is not None:  # a distilled draft: made for one target, whose tensors it borrows
            mine, why = _distilled_fit(e, t_path, t_entry)
            if why:
                bad.append(DraftCandidate(e, False, why))
                continue
            if mine:
                own.append(DraftCandidate(e, True, "distilled for this model"))
                continue
        # distilled for another file of the same shapes: the same model elsewhere (or a fine-tune) if the tokenizer is
        kin_reason = ""
        if e.draft_for is not None:
            t_shapes = t_shapes or _shapes(t_path)
            if _shapes_match(t_shapes, e.draft_for):
                kin_reason = f"distilled for {(e.draft_for.get('name') or 'another file')}: the same shapes and tokenizer"
        if t_digest is not None and _tokenizer_digest(Path(e.path)) == t_digest:
            # byte-identical tokenizer files: same mapping
            (kin if kin_reason else good).append(DraftCandidate(e, True, kin_reason))
            continue
        try:
            t_tok = t_tok or _tokenizer(t_path)
            comp = check_tokenizers(t_tok, _tokenizer(Path(e.path)), display_name(target), display_name(e.name))
        except SpecdeskError as err:
            bad.append(DraftCandidate(e, False, str(err)))
            continue
        if comp.ok and kin_reason:
            kin.append(DraftCandidate(e, True, kin_reason))
            continue
        (good if comp.ok else bad).append(DraftCandidate(e, comp.ok, comp.reason))
    good.sort(key=lambda c: (c.entry.params or 0, c.entry.bytes_on_disk))
    # drafts distilled for this very target first, then for the same model in another file, then any that fit
    return own + kin + good + bad
