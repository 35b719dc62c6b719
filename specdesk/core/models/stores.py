"""Where other local LLM apps keep their GGUF files: LM Studio, Ollama, llama.cpp.

- LM Studio: ``~/.lmstudio/models/<publisher>/<model>/*.gguf`` (older versions ``~/.cache/lm-studio/models``).
- Ollama: ``$OLLAMA_MODELS``, else ``~/.ollama/models`` and the Linux service's
  ``/usr/share/ollama/.ollama/models``. Each model is a manifest
  (``manifests/<host>/<namespace>/<model>/<tag>``, JSON) whose layer of media type
  ``application/vnd.ollama.image.model`` names the GGUF blob (``blobs/sha256-<hex>``, no extension).
- llama.cpp's download cache: ``$LLAMA_CACHE``, else the platform's cache folder + ``llama.cpp``.

Nothing here reads more than directory listings and manifests; describing a file is ``models.gguf``'s job.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from specdesk.core.errors import BadModel, ModelNotFound

OLLAMA_HOST = "registry.ollama.ai"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
SCAN_DEPTH = 4  # folders below a store's root searched for *.gguf (LM Studio: publisher/model)


@dataclass(frozen=True)
class StoredModel:
    name: str  # what to pass as --target: a path, or ollama:<name>
    path: Path  # the GGUF file
    store: str  # "lmstudio", "ollama", "llama.cpp"


def lmstudio_roots() -> list[Path]:
    home = Path.home()
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def ollama_roots() -> list[Path]:
    env = os.environ.get("OLLAMA_MODELS")
    if env:
        return [Path(env).expanduser()]
    return [Path.home() / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")]


def llamacpp_roots() -> list[Path]:
    env = os.environ.get("LLAMA_CACHE")
    if env:
        return [Path(env).expanduser()]
    if sys.platform == "darwin":
        return [Path.home() / "Library" / "Caches" / "llama.cpp"]
    if sys.platform == "win32":
        return [Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local")) / "llama.cpp"]
    return [Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llama.cpp"]


def _is_dir(path: Path) -> bool:
    """``is_dir`` that says False for a folder we may not look into (Path.is_dir raises on EACCES)."""
    try:
        return path.is_dir()
    except OSError:
        return False


def unreadable(root: Path) -> str | None:
    """Why a store folder that exists cannot be read (the Ollama service's, owned by its own user), or None."""
    try:
        if not root.is_dir():
            return None
        next(root.iterdir(), None)
    except PermissionError:
        return f"{root} is not readable by this user (permission denied)"
    except OSError as e:
        return f"{root} is not readable: {e.strerror or e}"
    return None


def find_ggufs(root: Path, depth: int = SCAN_DEPTH) -> list[Path]:
    """Model GGUF files under ``root`` (projectors and later parts of split models left out), sorted."""
    from specdesk.core.models.gguf import first_parts

    out: list[Path] = []
    if depth < 0 or not _is_dir(root):
        return out
    out.extend(first_parts(root))
    try:
        subdirs = sorted(p for p in root.iterdir() if _is_dir(p) and not p.name.startswith("."))
    except OSError:
        return out
    for sub in subdirs:
        out.extend(find_ggufs(sub, depth - 1))
    return out


def _unique_roots(roots: list[Path]) -> list[Path]:
    seen, out = set(), []
    for r in roots:
        try:
            key = r.resolve()
        except OSError:
            continue
        if key not in seen and _is_dir(r):
            seen.add(key)
            out.append(r)
    return out


def lmstudio_models() -> list[StoredModel]:
    return [StoredModel(str(p), p, "lmstudio") for root in _unique_roots(lmstudio_roots()) for p in find_ggufs(root)]


def llamacpp_models() -> list[StoredModel]:
    return [StoredModel(str(p), p, "llama.cpp") for root in _unique_roots(llamacpp_roots()) for p in find_ggufs(root)]


# ----------------------------------------------------------------------------- Ollama

def _ollama_name(host: str, namespace: str, model: str, tag: str) -> str:
    """Ollama's own short name: ``llama3.2:1b``, ``someone/model:tag``, ``hf.co/org/repo:Q4_K_M``."""
    if host == OLLAMA_HOST:
        return f"{model}:{tag}" if namespace == "library" else f"{namespace}/{model}:{tag}"
    return f"{host}/{namespace}/{model}:{tag}"


def _model_blob(root: Path, manifest: Path) -> Path:
    """The GGUF blob a manifest's model layer names. Raises BadModel for an unreadable or odd manifest."""
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        layer = next(l for l in data["layers"] if l.get("mediaType") == OLLAMA_MODEL_LAYER)
        digest = str(layer["digest"])
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        raise BadModel(f"unreadable Ollama manifest {manifest} (no model layer)") from None
    return root / "blobs" / digest.replace(":", "-")


def ollama_models() -> list[tuple[StoredModel | None, str, str]]:
    """Every Ollama manifest: (model, name, problem). A model whose blob is missing comes with the problem."""
    out = []
    roots = ollama_roots()
    for root in roots:
        if problem := unreadable(root) or unreadable(root / "manifests"):
            out.append((None, str(root), problem))
    for root in _unique_roots(roots):
        manifests = root / "manifests"
        if unreadable(manifests):
            continue
        if not _is_dir(manifests):
            continue
        try:
            tag_files = sorted(manifests.glob("*/*/*/*"))
        except OSError as e:
            out.append((None, str(root), f"{manifests} is not readable: {e.strerror or e}"))
            continue
        for tag_file in tag_files:
            if not tag_file.is_file():
                continue
            host, namespace, model, tag = tag_file.relative_to(manifests).parts
            name = _ollama_name(host, namespace, model, tag)
            try:
                blob = _model_blob(root, tag_file)
            except BadModel as e:
                out.append((None, name, str(e)))
                continue
            if not blob.is_file():
                out.append((None, name, f"its model blob {blob.name} is missing (interrupted pull?)"))
                continue
            out.append((StoredModel(f"ollama:{name}", blob, "ollama"), name, ""))
    return out


def ollama_model(name: str) -> Path:
    """``llama3.2``, ``llama3.2:1b``, ``someone/model:tag`` or ``hf.co/org/repo:tag`` -> its GGUF blob."""
    text = name.strip()
    if not text:
        raise ModelNotFound("no Ollama model named (use ollama:<name>[:<tag>])")
    base, _, tag = text.rpartition(":") if ":" in text.split("/")[-1] else (text, "", "latest")
    tag = tag or "latest"
    parts = base.split("/")
    if len(parts) == 1:
        host, namespace, model = OLLAMA_HOST, "library", parts[0]
    elif len(parts) == 2:
        host, namespace, model = OLLAMA_HOST, parts[0], parts[1]
    else:
        host, namespace, model = parts[0], "/".join(parts[1:-1]), parts[-1]
    roots = _unique_roots(ollama_roots())
    for root in roots:
        manifest = root / "manifests" / host / namespace / model / tag
        try:
            found = manifest.is_file()
        except OSError:
            found = False
        if found:
            blob = _model_blob(root, manifest)
            if not blob.is_file():
                raise BadModel(f"Ollama model {text}: its model blob {blob.name} is missing (interrupted pull?)")
            return blob
    where = ", ".join(str(r) for r in ollama_roots())
    raise ModelNotFound(f"no Ollama model {base}:{tag} in {where} (`ollama pull {base}:{tag}` fetches it)")
