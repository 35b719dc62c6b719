"""A GGUF file, converted once into a safetensors folder in specdesk's cache, then loaded like any folder.

transformers loads a GGUF with ``from_pretrained(folder, gguf_file=...)``: it rebuilds the config and the
tokenizer from the metadata and dequantizes every tensor (numpy, float32) on every load, holding them all
before the model takes them. specdesk does the same steps once, with transformers' own pieces (its config
and tokenizer rebuild, its GGUF -> transformers tensor-name map and per-architecture tensor fixes), tensor
by tensor into safetensors shards, so memory stays at one shard and progress can be reported; the second
load reads a safetensors folder. The weights are stored in the compute dtype the model is loaded in (a
dequantized float32 value cast once, exactly what transformers' GGUF load in that dtype holds), so each
dtype is its own conversion.

Cache layout, under ``userdirs.cache_dir() / "gguf"``, one folder per file version (keyed by the header's
sha256, the file size and its modification time, so a changed file converts again and the old conversion
is removed):

    <stem>-<key>/source.json         the GGUF file this came from
    <stem>-<key>/config.json         the transformers config rebuilt from the header (no weights: planning)
    <stem>-<key>/gguf-config.json    the header's values as transformers' GGUF loader read them
    <stem>-<key>/tokenizer/          the tokenizer rebuilt from the header
    <stem>-<key>/<dtype>/            a complete model folder (config, tokenizer, safetensors, .complete)
    <stem>-<key>/q4-own-1/           the same for a q4 load: packed codes and scales, not float32 (q4store)
    <stem>-<key>/q8-own-1/           the same for a q8 load
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from specdesk.core import userdirs
from specdesk.core.errors import BadModel, OutOfDisk, OutOfMemory
from specdesk.core.models.gguf import NOT_PARAMETERS, GGUFInfo, check_gguf
from specdesk.core.models.ggufheader import GGUFHeader, read_gguf_header

log = logging.getLogger(__name__)

SHARD_BYTES = 2 * 2**30
Q4 = "q4"  # converted_folder's "dtype" for the q4 form: 4-bit codes and scales as a q4 load holds them (q4store)
Q8 = "q8"  # the same for the q8 form: 8-bit codes and steps
STORED = (Q4, Q8)
COMPLETE = ".complete"
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}

Progress = Callable[[str], None]


def gguf_cache_dir() -> Path:
    return userdirs.cache_dir() / "gguf"


def cache_key(header: GGUFHeader) -> str:
    st = header.path.stat()
    text = f"{header.header_digest}:{st.st_size}:{st.st_mtime_ns}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def entry_dir(header: GGUFHeader) -> Path:
    """The cache folder of this version of the file."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", header.path.name.removesuffix(".gguf"))[:80] or "model"
    return gguf_cache_dir() / f"{stem}-{cache_key(header)}"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _dtype_name(torch_dtype) -> str:
    """The cache folder of a conversion: the dtype's name, or for "q4" / "q8" this machine's layout (models/q4store)."""
    if torch_dtype in STORED:
        from specdesk.core.models.q4store import folder_name

        return folder_name(torch_dtype)
    return str(torch_dtype).replace("torch.", "")


# ----------------------------------------------------------------------------- config and tokenizer

def _write_json(path: Path, obj) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def _make_dir(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadModel(f"cannot write specdesk's cache folder {folder}: {e.strerror or e} "
                       f"(set SPECDESK_CACHE_DIR to a writable folder)") from None


def config_folder(path: Path, header: GGUFHeader | None = None) -> Path:
    """The cache folder holding the transformers config.json rebuilt from ``path``'s header (built once)."""
    header = header or read_gguf_header(path)
    root = entry_dir(header)
    if (root / "config.json").exists() and (root / "gguf-config.json").exists():
        return root
    _make_dir(root)
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from specdesk.core.loading import quiet_transformers

    quiet_transformers()
    try:
        from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

        with gguf_read_once():
            parsed = load_gguf_checkpoint(str(path), return_tensors=False)["config"]
        config = CONFIG_MAPPING[parsed["model_type"]].from_dict(parsed)
    except (ValueError, KeyError, TypeError, ImportError, NotImplementedError) as e:
        raise BadModel(f"could not read {path.name}'s configuration: {_first_line(e)}") from None
    tmp = root / f".config.{os.getpid()}"
    try:
        _write_json(root / "source.json", {"path": str(Path(path).resolve()), "size": header.file_size})
        _write_json(root / "gguf-config.json", parsed)
        config.save_pretrained(tmp)
        os.replace(tmp / "config.json", root / "config.json")
    except OSError as e:
        raise BadModel(f"cannot write specdesk's cache folder {root}: {e.strerror or e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def tokenizer_folder(path: Path, header: GGUFHeader | None = None):
    """The cache folder holding the tokenizer rebuilt from ``path``'s header (built once)."""
    header = header or read_gguf_header(path)
    folder = entry_dir(header) / "tokenizer"
    if (folder / COMPLETE).exists():
        return folder
    from transformers import AutoTokenizer

    from specdesk.core.loading import quiet_transformers

    quiet_transformers()
    try:
        with gguf_read_once():
            tok = AutoTokenizer.from_pretrained(str(Path(path).parent), gguf_file=Path(path).name,
                                                local_files_only=True)
    except Exception as e:  # tokenizers raise many types; the user needs the one line
        raise BadModel(f"could not rebuild the tokenizer of {Path(path).name}: {_first_line(e)}") from None
    tmp = folder.with_name(f".tokenizer.{os.getpid()}")
    _make_dir(folder.parent)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tok.save_pretrained(tmp)
        (tmp / COMPLETE).touch()
        _publish(tmp, folder)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BadModel(f"cannot write specdesk's cache folder {folder.parent}: {e.strerror or e}") from None
    return folder


@contextlib.contextmanager
def gguf_read_once():
    """Within: gguf's reader parses each file once, 3-4x faster, and its tensor-name table is built once.

    transformers parses a GGUF's metadata again in every call (the config, then the tokenizer), and rebuilds gguf's
    tensor-name table for every module it maps (397 modules of SmolLM2, ~30 ms a table: 11 s). Both are pure
    functions of their arguments, and transformers imports them from gguf at call time, so this swaps them on the
    gguf module for one conversion and puts them back. The reader itself spends most of a parse slicing an
    ``np.memmap`` (each slice runs numpy's Python-level ``__array_finalize__``: ~100k strings for SmolLM2's 49,152
    tokens and 48,900 merges, 3.5 s); it reads a plain array view of the same map instead (1.0 s), the fields and
    tensors equal.
    """
    import gguf
    import numpy as np

    if getattr(gguf.GGUFReader, "specdesk_once", False):  # inside another: its reader and table already serve
        yield
        return
    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map

    class PlainViewReader(reader_class):
        @property
        def data(self):
            return self.__dict__["data"]

        @data.setter
        def data(self, value) -> None:
            self.__dict__["data"] = value.view(np.ndarray) if isinstance(value, np.memmap) else value

    readers: dict[tuple[str, str], object] = {}

    def read(path, mode="r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = PlainViewReader(path, mode)
        return readers[key]

    read.specdesk_once = True

    gguf.GGUFReader, gguf.get_tensor_name_map = read, functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map


def _publish(tmp: Path, final: Path) -> None:
    """Move a finished folder into place; if another process got there first, keep theirs."""
    try:
        os.replace(tmp, final)
    except OSError:
        if (final / COMPLETE).exists():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)


# ----------------------------------------------------------------------------- weights

def needed_bytes(header: GGUFHeader, dtype_name: str) -> int:
    """Disk a conversion to ``dtype_name`` writes: every parameter at that width, plus the tokenizer. The q4 form:
    at most 1.07 bytes a weight (8-bit head; the layers 0.63), the embeddings and vectors in bfloat16, and the
    embeddings again as a tied head's 8-bit codes. The q8 form: the same bound (its layers take 1.07 too)."""
    params = sum(t.numel for t in header.tensors if t.name not in NOT_PARAMETERS)
    extra = 4 * header.data_start + 16 * 2**20
    if dtype_name.startswith(("q4-", "q8-")):
        wide = sum(t.numel for t in header.tensors if t.name not in NOT_PARAMETERS
                   and (len(t.shape) == 1 or t.name.startswith("token_embd")))
        return int(1.07 * params + 2.07 * wide) + extra
    return params * _DTYPE_BYTES.get(dtype_name, 4) + extra


def _free_bytes(folder: Path) -> int:
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def converted_folder(path: Path, torch_dtype, progress: Progress | None = None) -> Path:
    """A safetensors model folder equal to transformers' GGUF load of ``path`` in ``torch_dtype``, or with
    ``torch_dtype`` "q4" (:data:`Q4`) or "q8" that load's stored form (models/q4store.load reads it).

    Converts on the first call for this version of the file and dtype (checking free disk space first),
    reporting progress through ``progress``; later calls return the cached folder at once.
    """
    path = Path(path)
    say = progress or (lambda msg: None)
    info = check_gguf(path)
    header = info.header
    dname = _dtype_name(torch_dtype)
    root = entry_dir(header)
    final = root / dname
    if (final / COMPLETE).exists():
        return final
    need = needed_bytes(header, dname)
    free = _free_bytes(root)
    if need > free:
        raise OutOfDisk(f"not enough disk space to convert {path.name}: it needs {_gib(need)} in {root.parent}, "
                        f"{_gib(free)} is free (set SPECDESK_CACHE_DIR to convert on another disk)")
    _make_dir(root)
    _remove_dead_partials(root)
    tmp = root / f".{dname}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    label = f"converting {path.name} to {torch_dtype if torch_dtype in STORED else dname} (first load only)"
    t0 = time.perf_counter()
    try:
        with gguf_read_once():
            say(f"{label}: reading its configuration")
            cfg_root = config_folder(path, header)
            say(f"{label}: rebuilding its tokenizer")
            tok = tokenizer_folder(path, header)
            shutil.copytree(tok, tmp)
            (tmp / COMPLETE).unlink()
            _write_weights(path, info, cfg_root, torch_dtype, tmp, lambda msg: say(f"{label}: {msg}"))
        config = json.loads((cfg_root / "config.json").read_text(encoding="utf-8"))
        config["dtype"] = "float32" if torch_dtype in STORED else dname  # q4, q8: what its float32 form would say
        _write_json(tmp / "config.json", config)
        (tmp / COMPLETE).write_text(json.dumps({"gguf": str(path.resolve()), "seconds": time.perf_counter() - t0}))
        _publish(tmp, final)
    except MemoryError:
        raise OutOfMemory(f"out of memory converting {path.name}") from None
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise OutOfDisk(f"the disk filled up converting {path.name} in {root.parent} "
                            f"(set SPECDESK_CACHE_DIR to convert on another disk)") from None
        raise BadModel(f"could not convert {path.name}: {e.strerror or _first_line(e)}") from None
    except (ValueError, KeyError, TypeError, RuntimeError, NotImplementedError) as e:  # the GGUF's content
        raise BadModel(f"could not convert {path.name}: {_first_line(e)}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("converted %s to %s in %.1f s", path, final, time.perf_counter() - t0)
    _remove_stale(root)
    if torch_dtype == Q4:
        _remove_superseded(root, dname, path.name, say)
    return final


def _write_weights(path: Path, info: GGUFInfo, cfg_root: Path, torch_dtype, dest: Path, say: Progress) -> None:
    """Dequantize every tensor, apply transformers' per-architecture fixes and names, write shards (in
    ``torch_dtype``, or for "q4" / "q8" as q4store.encoder stores them)."""
    import numpy as np
    import torch
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, dequantize
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        from transformers.modeling_gguf_pytorch_utils import (TENSOR_PROCESSORS, TensorProcessor,
                                                              get_gguf_hf_weights_map)
    except ImportError as e:
        raise BadModel(f"this transformers version cannot convert GGUF files ({_first_line(e)})") from None

    header = info.header
    gguf_config = json.loads((cfg_root / "gguf-config.json").read_text(encoding="utf-8"))
    config = AutoConfig.from_pretrained(cfg_root, local_files_only=True)
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except (ValueError, KeyError, TypeError, ImportError, RuntimeError) as e:
        raise BadModel(f"transformers cannot build {path.name}'s architecture: {_first_line(e)}") from None
    processor = TENSOR_PROCESSORS.get(header.architecture, TensorProcessor)(config=gguf_config)
    try:
        names = get_gguf_hf_weights_map(model, processor)
    except (NotImplementedError, ValueError, KeyError) as e:
        raise BadModel(f"cannot map {path.name}'s tensors to transformers' names: {_first_line(e)}") from None
    parsed = {"config": gguf_config, "tensors": {}}  # processors for fused experts collect tensors here
    if torch_dtype in STORED:
        from specdesk.core.models.q4store import encoder

        encode = encoder(model, torch_dtype)
    else:
        def encode(name, tensor):
            return [(name, tensor.to(torch_dtype))]
    shards = _ShardWriter(dest)
    filled: set[str] = set()

    def add(name, tensor) -> None:
        filled.add(name)
        for stored, value in encode(name, tensor.to(torch.float32)):
            shards.add(stored, value)
    blob = np.memmap(path, mode="r", dtype=np.uint8)
    n = len(header.tensors)
    last = 0.0
    for i, t in enumerate(header.tensors):
        qtype = GGMLQuantizationType(t.ggml_type)
        raw = blob[header.data_start + t.offset: header.data_start + t.offset + t.nbytes]
        if qtype == GGMLQuantizationType.F32:
            data = raw.view(np.float32).reshape(t.shape)
        elif qtype == GGMLQuantizationType.F16:
            data = raw.view(np.float16).reshape(t.shape)
        else:  # blocks: (rows..., bytes per row), as gguf's reader hands them to dequantize
            block, type_bytes = GGML_QUANT_SIZES[qtype]
            data = raw.reshape(*t.shape[:-1], t.shape[-1] // block * type_bytes)
        weights = dequantize(data, qtype)
        result = processor.process(weights=weights, name=t.name, tensor_key_mapping=names, parsed_parameters=parsed)
        if result.name is not None and result.name in names:
            add(names[result.name], torch.from_numpy(np.copy(result.weights)))
        now = time.perf_counter()
        if now - last > 0.5 or i == n - 1:
            say(f"{100 * (i + 1) // n}% ({i + 1} of {n} tensors)")
            last = now
    for name, tensor in parsed["tensors"].items():
        add(name, tensor)
    del blob
    missing = _missing(model, filled)
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise BadModel(f"{path.name} lacks weights the {header.architecture} architecture needs: {shown}")
    shards.close()


def _missing(model, written: set[str]) -> list[str]:
    """Model weights no converted tensor fills (a tied output embedding is filled by its twin)."""
    params = {n for n, _ in model.named_parameters()}  # tied parameters appear once
    every = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    persistent = {n for n in model.state_dict() if n not in every}
    return sorted((params | persistent) - written)


class _ShardWriter:
    """Safetensors shards of at most SHARD_BYTES, named and indexed like ``save_pretrained``'s at close."""

    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self.current: dict = {}
        self.current_bytes = 0
        self.files: list[tuple[Path, list[str]]] = []

    def add(self, name: str, tensor) -> None:
        nbytes = tensor.numel() * tensor.element_size()
        if self.current and self.current_bytes + nbytes > SHARD_BYTES:
            self._flush()
        self.current[name] = tensor.contiguous()
        self.current_bytes += nbytes

    def _flush(self) -> None:
        from safetensors.torch import save_file

        part = self.dest / f".part-{len(self.files)}.safetensors"
        save_file(self.current, str(part), metadata={"format": "pt"})
        self.files.append((part, list(self.current)))
        self.current, self.current_bytes = {}, 0

    def close(self) -> None:
        if self.current or not self.files:
            self._flush()
        if len(self.files) == 1:
            os.replace(self.files[0][0], self.dest / "model.safetensors")
            return
        n = len(self.files)
        weight_map = {}
        for i, (part, names) in enumerate(self.files, 1):
            final = f"model-{i:05d}-of-{n:05d}.safetensors"
            os.replace(part, self.dest / final)
            weight_map.update({name: final for name in names})
        total = sum((self.dest / f).stat().st_size for f in set(weight_map.values()))
        _write_json(self.dest / "model.safetensors.index.json",
                    {"metadata": {"total_size": total}, "weight_map": weight_map})


# ----------------------------------------------------------------------------- housekeeping

def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _remove_dead_partials(root: Path) -> None:
    """Partial conversions left by a process that was killed."""
    for p in root.glob(".*.partial-*"):
        try:
            pid = int(p.name.rsplit("-", 1)[1])
        except ValueError:
            continue
        if pid != os.getpid() and not _alive(pid):
            shutil.rmtree(p, ignore_errors=True)


def _remove_stale(root: Path) -> None:
    """Conversions of earlier versions of the same file (it changed since): they will never be used again."""
    try:
        source = json.loads((root / "source.json").read_text(encoding="utf-8"))["path"]
    except (OSError, ValueError, KeyError):
        return
    for other in gguf_cache_dir().iterdir():
        if other == root or not other.is_dir():
            continue
        try:
            if json.loads((other / "source.json").read_text(encoding="utf-8"))["path"] == source:
                shutil.rmtree(other, ignore_errors=True)
                log.info("removed %s: converted from an earlier version of %s", other, source)
        except (OSError, ValueError, KeyError):
            continue


def _superseded(root: Path, q4_name: str) -> list[Path]:
    """What a q4 conversion of this file makes useless in its cache folder: q4 forms of another layout (an older
    q4store.LAYOUT, or torch's int4 packing of another torch version; the other kind's current form stays, for a
    machine where the other kernel runs), and the float32 conversion that specdesk made for q4 loads before q4 was
    stored as q4 (4-8x the file: ~32 GB for an 8B Q4_K_M), which nothing but ``--target-quant none`` reads now."""
    from specdesk.core.models import q4store

    current = {q4_name, *q4store.folder_names()}
    out = []
    for p in sorted(root.iterdir()):
        if p.is_dir() and (p.name == "float32" or (p.name.startswith("q4-") and p.name not in current)):
            out.append(p)
    return out


def _remove_superseded(root: Path, q4_name: str, file_name: str, say: Progress) -> None:
    """Remove :func:`_superseded`'s folders when a q4 form is first written (a float32 folder made later, by a load
    with ``--target-quant none``, stays until the next q4 conversion of the file), saying what was freed."""
    for p in _superseded(root, q4_name):
        size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        shutil.rmtree(p, ignore_errors=True)
        if not p.exists():
            say(f"removed the {p.name} conversion of {file_name} from the cache: q4 loads no longer read it "
                f"({_gib(size)} freed)")
            log.info("removed %s (%d bytes): superseded by %s", p, size, q4_name)


def cached_tokenizer_folder(path: Path) -> Path | None:
    """The tokenizer already rebuilt for this version of ``path``, if any (no work when there is none)."""
    try:
        folder = entry_dir(read_gguf_header(path)) / "tokenizer"
    except (OSError, ValueError):
        return None
    return folder if (folder / COMPLETE).exists() else None

