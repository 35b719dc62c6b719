"""Reading a GGUF file's header: metadata and tensor table, without reading any weights.

Format (llama.cpp's ``docs/gguf.md``, versions 2 and 3): the magic ``GGUF``, a uint32 version, uint64
tensor and metadata counts, the metadata key/value pairs, the tensor table (name, dimensions fastest-moving
first, ggml type, offset into the data section), then the data section at the next multiple of
``general.alignment`` (default 32).

String arrays (a vocabulary of 150k tokens, its merges) are walked, not decoded, and kept as their count:
listing a model folder must stay fast. The byte span of every tokenizer value is kept, so two files can be
compared by a digest of their tokenizers without decoding them.
"""

from __future__ import annotations

import hashlib
import math
import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    shape: tuple[int, ...]  # torch order (slowest-moving first)
    ggml_type: int
    offset: int  # from the start of the data section
    nbytes: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class GGUFHeader:
    path: Path
    version: int
    metadata: dict  # key -> value; arrays of strings are their length
    tensors: tuple[GGUFTensor, ...]
    data_start: int  # file offset of the data section
    file_size: int
    header_digest: str  # sha256 of the bytes before the data section
    tokenizer_digest: str | None  # sha256 of every tokenizer.* value's bytes, in file order
    spans: dict = field(default_factory=dict, repr=False, compare=False)  # key -> (start, end) of its value

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "?"))

    def get(self, key: str, default=None):
        """An architecture-scoped value: ``get("context_length")`` reads ``<arch>.context_length``."""
        return self.metadata.get(f"{self.architecture}.{key}", default)

    @property
    def data_end(self) -> int:
        """Where the last tensor's bytes end (what the file size must reach)."""
        return self.data_start + max((t.offset + t.nbytes for t in self.tensors), default=0)


def is_gguf_file(path: Path) -> bool:
    """Whether ``path`` is a file starting with the GGUF magic (Ollama's blobs have no extension)."""
    try:
        with Path(path).open("rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def read_gguf_header(path: Path) -> GGUFHeader:
    """The header of ``path``. Raises ValueError naming what is wrong with a file that is not a whole GGUF."""
    path = Path(path)
    size = path.stat().st_size
    if size < 24:
        raise ValueError("file too short to be a GGUF file" if size else "the file is empty")
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as blob:
        if blob[:4] != MAGIC:
            raise ValueError("not a GGUF file (no GGUF magic bytes)")
        try:
            return _parse(path, blob, size)
        except (struct.error, UnicodeDecodeError, IndexError) as e:
            raise ValueError(f"the header is cut short or corrupt ({e})") from None


def _parse(path: Path, blob: mmap.mmap, size: int) -> GGUFHeader:
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", blob, 4)
    if version not in VERSIONS:
        raise ValueError(f"GGUF version {version} is not supported (only {' and '.join(map(str, VERSIONS))})")
    if n_tensors > 1 << 24 or n_kv > 1 << 24:
        raise ValueError("the header is corrupt (implausible tensor or key count)")
    pos = 24
    metadata: dict = {}
    spans: dict = {}
    for _ in range(n_kv):
        key, pos = _string(blob, pos, size)
        (vtype,) = struct.unpack_from("<I", blob, pos)
        start = pos + 4
        metadata[key], pos = _value(blob, start, vtype, size)
        spans[key] = (start, pos)
    tensors = []
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    for _ in range(n_tensors):
        name, pos = _string(blob, pos, size)
        (n_dims,) = struct.unpack_from("<I", blob, pos)
        if n_dims > 8:
            raise ValueError(f"tensor {name} has {n_dims} dimensions (corrupt header)")
        dims = struct.unpack_from(f"<{n_dims}Q", blob, pos + 4)
        ggml_type, offset = struct.unpack_from("<IQ", blob, pos + 4 + 8 * n_dims)
        pos += 4 + 8 * n_dims + 12
        numel = 1
        for d in dims:
            numel *= d
        try:
            block, type_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
        except (ValueError, KeyError):
            raise ValueError(f"tensor {name} has ggml type {ggml_type}, unknown to the gguf package") from None
        tensors.append(GGUFTensor(name, tuple(reversed(dims)), ggml_type, offset, numel // block * type_bytes))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0:
        alignment = DEFAULT_ALIGNMENT
    data_start = (pos + alignment - 1) // alignment * alignment
    digest = hashlib.sha256(blob[:pos]).hexdigest()
    tok = hashlib.sha256()
    tok_keys = [k for k in metadata if k.startswith("tokenizer.")]
    for k in tok_keys:
        tok.update(k.encode())
        tok.update(blob[spans[k][0]:spans[k][1]])
    return GGUFHeader(path=path, version=version, metadata=metadata, tensors=tuple(tensors), data_start=data_start,
                      file_size=size, header_digest=digest, tokenizer_digest=tok.hexdigest() if tok_keys else None,
                      spans=spans)


def _string(blob: mmap.mmap, pos: int, size: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<Q", blob, pos)
    end = pos + 8 + n
    if end > size:
        raise ValueError("the header is cut short (a string runs past the end of the file)")
    return blob[pos + 8:end].decode("utf-8"), end


def _value(blob: mmap.mmap, pos: int, vtype: int, size: int):
    if vtype in _SCALAR:
        fmt = _SCALAR[vtype]
        return struct.unpack_from(fmt, blob, pos)[0], pos + struct.calcsize(fmt)
    if vtype == _STRING:
        return _string(blob, pos, size)
    if vtype == _ARRAY:
        etype, count = struct.unpack_from("<IQ", blob, pos)
        pos += 12
        if etype in _SCALAR:
            width = struct.calcsize(_SCALAR[etype])
            end = pos + count * width
            if end > size:
                raise ValueError("the header is cut short (an array runs past the end of the file)")
            if count <= 64:  # small arrays are settings (per-layer head counts, rope sections)
                return list(struct.unpack_from(f"<{count}{_SCALAR[etype][1]}", blob, pos)), end
            return count, end  # token types, scores: kept as the count
        if etype == _STRING:
            for _ in range(count):
                (n,) = struct.unpack_from("<Q", blob, pos)
                pos += 8 + n
            if pos > size:
                raise ValueError("the header is cut short (a string array runs past the end of the file)")
            return count, pos
        raise ValueError(f"metadata array of type {etype} is not readable")
    raise ValueError(f"metadata value of type {vtype} is not readable")

