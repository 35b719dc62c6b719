"""Reading safetensors headers: every tensor's dtype and shape without reading any weights.

Format: 8 bytes little-endian header length N, then N bytes of JSON {name: {dtype, shape, data_offsets}}.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}
MAX_HEADER = 100 * 2**20


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES.get(self.dtype, 4)


def read_header(path: Path) -> dict[str, TensorInfo]:
    """Tensors of one .safetensors file. Raises ValueError for a file that is not one, or is cut short."""
    with Path(path).open("rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise ValueError("file too short" if raw else "the file is empty")
        (n,) = struct.unpack("<Q", raw)
        if n <= 0 or n > MAX_HEADER:
            raise ValueError("bad header length")
        text = f.read(n)
        if len(text) < n:
            raise ValueError("truncated inside its header (interrupted download?)")
        header = json.loads(text)
        size = f.seek(0, 2)
    try:
        end = max((int(info["data_offsets"][1]) for name, info in header.items() if name != "__metadata__"),
                  default=0)
    except (KeyError, TypeError, IndexError, ValueError, AttributeError):
        raise ValueError("its header is not a safetensors header") from None
    if size < 8 + n + end:
        raise ValueError(f"truncated: {size:,} bytes where its header promises {8 + n + end:,} "
                         f"(interrupted download?)")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        out[name] = TensorInfo(name, info["dtype"], tuple(info["shape"]))
    return out


def folder_tensors(files: list[Path]) -> dict[str, TensorInfo]:
    out: dict[str, TensorInfo] = {}
    for f in files:
        out.update(read_header(f))
    return out
