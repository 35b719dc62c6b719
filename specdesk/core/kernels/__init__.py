"""specdesk's own CPU kernels, built on first use with this machine's C compiler: q4 and q8 products (q4gemm.c),
the lean decoder's position-by-position attention in bfloat16 (attention.c) and its row-wise steps (RMSNorm,
rotary embedding with the KV cache write, SwiGLU's product, greedy's argmax, and sampling's softmax, draw and residual)
in one call each (rows.c), and all of a pass's layers in one call (layers.c: the same kernels in the same order as the
decoder's Python loop).

Without them a q4 target's products run through torch's int4 kernel and attention through torch's, one call per
position. They build with ``cc -O3 -march=native -fopenmp`` on the C files beside this one, once per machine (several seconds: 8.5 s on a 2-core AMD EPYC), into the cache folder, keyed by the source, the
compiler and the CPU. It needs AVX2 and FMA (or AVX512-VNNI); a machine without a C compiler, or another CPU kind,
keeps torch's kernel, and ``SPECDESK_KERNELS=torch`` asks for them. No torch here: the planner asks
:func:`available` too.

OpenMP: the library links ``libgomp.so.1``; torch's CPU wheels load a library of that name first, so the kernel's
threads are torch's own pool (``torch.set_num_threads`` counts for both).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

log = logging.getLogger(__name__)

SOURCES = tuple(Path(__file__).with_name(name) for name in ("q4gemm.c", "attention.c", "rows.c", "layers.c"))
HEADERS = (Path(__file__).with_name("scalars.h"),)  # in the cache key too
FLAGS = ("-O3", "-mprefer-vector-width=512", "-fopenmp", "-shared", "-fPIC", "-fno-math-errno")
ENV = "SPECDESK_KERNELS"  # "torch": torch's kernels (int4 products, attention) even where these build
MARCH_ENV = "SPECDESK_KERNELS_MARCH"  # the -march to build for: native unless set (tests build x86-64-v3, AVX2, too)

OWN = "specdesk's own kernels"  # how status() begins when they run (the status bar reads it)

_lock = threading.Lock()
_state: dict = {}


def _cpu_key() -> str:
    """What -march=native compiles for: the CPU's model and flags (Linux), else the platform's words."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
        keep = [line for line in text.splitlines() if line.startswith(("model name", "flags"))][:2]
        return "\n".join(keep)
    except OSError:
        return platform.processor() + platform.machine()


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _cache_dir() -> Path:
    from specdesk.core.userdirs import cache_dir

    return cache_dir() / "kernels"


def _build(march: str, progress=None) -> tuple[ctypes.CDLL | None, str]:
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return None, f"torch's kernels: specdesk's own are built for x86-64 Linux (this is {platform.system()} {platform.machine()})"
    cc = _compiler()
    if cc is None:
        return None, "torch's kernels: no C compiler (cc, gcc or clang) to build specdesk's own"
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"torch's kernels: the C compiler did not run: {e}"
    source = b"".join(path.read_bytes() for path in SOURCES + HEADERS)
    flags = (f"-march={march}", *FLAGS)
    key = hashlib.sha256(source + " ".join(flags).encode() + version.encode() + _cpu_key().encode()).hexdigest()[:16]
    out = _cache_dir() / f"q4gemm-{key}.so"
    if not out.exists():
        if progress is not None:
            progress("building specdesk's CPU kernels for this machine (once, several seconds)")
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
        except OSError as e:  # a cache folder that cannot be made or written: run torch's kernels, say why
            return None, (f"torch's kernels: no place to build specdesk's own ({out.parent}: {e.strerror or e}; "
                          f"set SPECDESK_CACHE_DIR to a writable folder)")
        os.close(fd)
        try:
            done = subprocess.run([cc, *flags, *map(str, SOURCES), "-o", tmp], capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
                return None, f"torch's kernels: specdesk's own did not build here: {last}"
            os.replace(tmp, out)  # whole or not at all, should two processes build at once
        except (OSError, subprocess.SubprocessError) as e:
            return None, f"torch's kernels: specdesk's own did not build here: {e}"
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    try:
        lib = ctypes.CDLL(str(out))
    except OSError as e:
        return None, f"torch's kernels: specdesk's own did not load: {e}"
    lib.sd_isa.restype = ctypes.c_char_p
    lib.sd_gemm_map.restype = ctypes.c_int
    lib.sd_gemm_map.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                ctypes.c_int]
    lib.sd_attend.restype = ctypes.c_int
    lib.sd_attend.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 5 + [ctypes.c_void_p] * 3 + [
        ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
    lib.sd_rope_kv.restype = None
    lib.sd_rope_kv.argtypes = [ctypes.c_void_p] + [ctypes.c_int64] * 4 + [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 2
    lib.sd_silu_mul.restype = None
    lib.sd_silu_mul.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.sd_argmax_bf16.restype = None
    lib.sd_argmax_bf16.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.sd_softmax_bf16.restype = None
    lib.sd_softmax_bf16.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p]
    lib.sd_sample_f32.restype = ctypes.c_int64
    lib.sd_sample_f32.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_double]
    lib.sd_softmax_draw.restype = ctypes.c_int64
    lib.sd_softmax_draw.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int64, ctypes.c_double,
                                    ctypes.c_double, ctypes.c_void_p]
    lib.sd_verify_sampled.restype = ctypes.c_int64
    lib.sd_verify_sampled.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_float, ctypes.c_int64,
                                      ctypes.c_double] + [
        ctypes.c_void_p] * 2 + [ctypes.c_int64] + [ctypes.c_void_p] * 3 + [ctypes.c_double] + [ctypes.c_void_p] * 3
    lib.sd_process_bf16.restype = ctypes.c_int
    lib.sd_process_bf16.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_float, ctypes.c_int64,
                                    ctypes.c_double, ctypes.c_void_p]
    lib.sd_residual_f32.restype = None
    lib.sd_residual_f32.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                    ctypes.c_void_p]
    lib.sd_rmsnorm.restype = None
    lib.sd_rmsnorm.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_float,
                               ctypes.c_void_p]
    lib.sd_forward.restype = ctypes.c_int
    lib.sd_forward.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p] + [ctypes.c_int64] * 5 + [
        ctypes.c_void_p] * 2 + [ctypes.c_int64] * 2 + [ctypes.c_void_p] * 3 + [ctypes.c_float] * 2 + [ctypes.c_int]
    lib.sd_forward_ids.restype = ctypes.c_int
    lib.sd_forward_ids.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64] + [
        ctypes.c_void_p] * 3 + lib.sd_forward.argtypes[2:]
    return lib, f"{OWN} ({lib.sd_isa().decode()})"


class Linear(ctypes.Structure):
    """layers.c's sd_linear: a q4gemm.c product (kind 4 or 8), its codes, scales, bias (0: none), outputs."""

    _fields_ = [("kind", ctypes.c_int64), ("w", ctypes.c_void_p), ("s", ctypes.c_void_p), ("bias", ctypes.c_void_p),
                ("n", ctypes.c_int64)]


class Ends(ctypes.Structure):
    """layers.c's sd_ends: what surrounds the layers in a pass for token ids (embedding table and its rows, final
    norm weight, the head's product and its row map, 0: in order)."""

    _fields_ = [("embed", ctypes.c_void_p), ("rows", ctypes.c_int64), ("norm", ctypes.c_void_p), ("head", Linear),
                ("map", ctypes.c_void_p)]


class Layer(ctypes.Structure):
    """layers.c's sd_layer: a decoder layer's norm weights, four products and KV cache."""

    _fields_ = [("ln1", ctypes.c_void_p), ("ln2", ctypes.c_void_p), ("qkv", Linear), ("o", Linear), ("gu", Linear),
                ("down", Linear), ("kc", ctypes.c_void_p), ("vc", ctypes.c_void_p)]


def _torch_asked() -> bool:
    return os.environ.get(ENV, "").strip().lower() == "torch"


def _march() -> str:
    return os.environ.get(MARCH_ENV, "").strip() or "native"


def library(progress=None) -> ctypes.CDLL | None:
    """The built kernel, or None (torch's int4 kernel runs instead: :func:`status` says why). ``progress(message)``
    hears of a build (the first use on a machine, or after an update)."""
    if _torch_asked():
        return None
    march = _march()
    with _lock:
        if march not in _state:
            _state[march] = _build(march, progress)
            (log.info if _state[march][0] is not None else log.warning)("%s", _state[march][1])
        return _state[march][0]


def available() -> bool:
    return library() is not None


def status() -> str:
    """One line: which kernels run (q4 products, verify attention), and why."""
    if _torch_asked():
        return f"torch's kernels ({ENV}=torch)"
    library()
    return _state[_march()][1]


def _for(t, dtype):
    """The kernels library for a CPU tensor ``t`` of ``dtype`` where it builds; None for anything else (the caller's
    torch form)."""
    return library() if t.dtype == dtype and t.device.type == "cpu" else None


def argmax(logits):
    """logits (..., V) -> the index of each row's first largest value, as ``logits.argmax(dim=-1)``: through
    rows.c for bfloat16 on a CPU where the kernels build (~10 us a SmolLM2 row against torch's ~180), else torch's."""
    import torch

    lib = _for(logits, torch.bfloat16)
    if lib is None:
        return logits.argmax(dim=-1)
    rows = logits.contiguous()
    out = torch.empty(rows.shape[:-1], dtype=torch.int64)
    lib.sd_argmax_bf16(rows.data_ptr(), out.numel(), rows.shape[-1], out.data_ptr())
    return out


def argmax_list(logits) -> list[int]:
    """The index of each row's first largest value as a list of ints, as ``logits.argmax(dim=-1).flatten().tolist()``
    (a 1-D ``logits`` is one row): the decode loop's form, without the tensor in between. Right after a target pass
    has streamed its weights through the CPU's caches every torch call costs several times what it does in a loop
    (q4 SmolLM2 on a 2-core AMD EPYC: argmax of a row ~60 us there against ~13 alone); this is one C call."""
    import torch

    lib = _for(logits, torch.bfloat16)
    if lib is None:
        return logits.argmax(dim=-1).flatten().tolist()
    rows = logits if logits.is_contiguous() else logits.contiguous()
    v = rows.shape[-1]
    n = rows.numel() // v if v else 0
    out = (ctypes.c_int64 * n)()
    lib.sd_argmax_bf16(rows.data_ptr(), n, v, ctypes.addressof(out))
    return list(out)


def top_probability(logits) -> tuple[int, float]:
    """(index, probability) of a 1-D row's largest logit under softmax(logits): a greedy draft token and its
    confidence. Two C calls for bfloat16 on a CPU where the kernels build (the index as :func:`argmax`'s, the
    probability from :func:`softmax`'s float32 row); torch's ``softmax(-1).max(-1)`` elsewhere."""
    import torch

    lib = _for(logits, torch.bfloat16)
    if lib is None:
        q, i = logits.softmax(-1).max(-1)
        return int(i), float(q)
    row = logits if logits.is_contiguous() else logits.contiguous()
    v = row.shape[-1]
    at = ctypes.c_int64()
    probs = (ctypes.c_float * v)()
    lib.sd_argmax_bf16(row.data_ptr(), 1, v, ctypes.addressof(at))
    lib.sd_softmax_bf16(row.data_ptr(), 1, v, 1.0, ctypes.addressof(probs))
    return at.value, probs[at.value]


def tops(logits, prob: bool = False) -> tuple[list[int], list[float] | None]:
    """Greedy's reading of logits (n, V), or one row (V,): each row's first largest index (:func:`argmax_list`) and,
    with ``prob``, its probability under softmax (:func:`top_probability`)."""
    if not prob:
        return argmax_list(logits), None
    pairs = [top_probability(row) for row in (logits if logits.dim() == 2 else [logits])]
    return [a for a, _ in pairs], [q for _, q in pairs]


def softmax(logits, temperature: float):
    """softmax(logits / temperature) in float32 through rows.c for bfloat16 logits on a CPU where the kernels build,
    (..., V) -> (..., V); None elsewhere (the caller's torch form)."""
    import torch

    lib = _for(logits, torch.bfloat16)
    if lib is None or logits.numel() == 0:
        return None
    rows = logits.contiguous()
    out = torch.empty(rows.shape, dtype=torch.float32)
    lib.sd_softmax_bf16(rows.data_ptr(), rows.numel() // rows.shape[-1], rows.shape[-1], 1.0 / temperature,
                        out.data_ptr())
    return out


def process(logits, temperature: float, top_k: int, top_p: float):
    """sampling.process_logits (temperature, top-k, top-p, softmax) of bfloat16 logits (..., V) on a CPU in one call
    of rows.c's sd_process_bf16, float32 (..., V); None elsewhere (the caller's torch form)."""
    import torch

    lib = _for(logits, torch.bfloat16)
    if lib is None or logits.numel() == 0:
        return None
    rows = logits.contiguous()
    out = torch.empty(rows.shape, dtype=torch.float32)
    if lib.sd_process_bf16(rows.data_ptr(), rows.numel() // rows.shape[-1], rows.shape[-1], 1.0 / temperature,
                           top_k, top_p, out.data_ptr()) != 0:
        return None  # out of memory for the boundary's tokens: torch's form
    return out


def softmax_draw(logits, temperature: float, u: float, out: int, top_k: int = 0, top_p: float = 1.0) -> int | None:
    """A sampled token from one bfloat16 row (V,) on a CPU: softmax(logits / temperature), with ``top_k`` and ``top_p``
    (:func:`process`'s), into the V float32 values at address ``out`` (:func:`softmax`'s at a temperature alone), then
    the draw at ``u`` (:func:`sample_one`'s), in one call. None where the kernels do not run (or out of memory)."""
    import torch

    lib = _for(logits, torch.bfloat16)
    if lib is None or not logits.is_contiguous():
        return None
    at = lib.sd_softmax_draw(logits.data_ptr(), logits.shape[-1], 1.0 / temperature, top_k, top_p, u, out)
    return at if at >= 0 else None


def sample_rows(probs, u):
    """One index per row of ``probs`` (N, V) float32 by the inverse of the cumulative mass at ``u`` (N,) in [0, 1)
    through rows.c on a CPU where the kernels build, as an (N,) int64 tensor; None elsewhere."""
    import torch

    lib = _for(probs, torch.float32)
    if lib is None:
        return None
    rows = probs.contiguous()
    v = rows.shape[-1]
    out = [lib.sd_sample_f32(rows.data_ptr() + i * v * 4, v, float(x)) for i, x in enumerate(u.tolist())]
    if min(out, default=0) < 0:
        return None  # out of memory for the block sums: torch's form
    return torch.tensor(out, dtype=torch.int64)


def sample_one(probs, u: float) -> int | None:
    """:func:`sample_rows` for one float32 row (V,) at the uniform ``u``, as an int; None where it does not run."""
    import torch

    lib = _for(probs, torch.float32)
    if lib is None:
        return None
    row = probs if probs.is_contiguous() else probs.contiguous()
    at = lib.sd_sample_f32(row.data_ptr(), row.numel(), u)
    return at if at >= 0 else None


def residual(p_target, p_draft, ids):
    """normalize(max(0, p_target - p_draft)) for one row (V,), with p_draft (H,) the draft's probabilities of tokens
    ``ids`` (H,), 0 elsewhere, or with ``ids`` None a whole row (V,), through rows.c for float32 on a CPU where the
    kernels build; None elsewhere."""
    import torch

    ok = p_target.dtype == p_draft.dtype == torch.float32 and p_target.device.type == "cpu" and p_target.dim() == 1
    ok = ok and (ids is not None or p_draft.shape == p_target.shape)
    lib = library() if ok else None
    if lib is None:
        return None
    pt, pd = p_target.contiguous(), p_draft.contiguous()
    ix = None if ids is None else ids.to(torch.int64).contiguous()
    out = torch.empty_like(pt)
    lib.sd_residual_f32(pt.data_ptr(), pt.numel(), pd.data_ptr(), None if ix is None else ix.data_ptr(),
                        pd.numel() if ix is None else ix.numel(), out.data_ptr())
    return out
