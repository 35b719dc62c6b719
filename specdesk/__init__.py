"""specdesk: run local LLMs faster with exact speculative decoding, and see why.

The public Python API is :func:`load`, which returns an :class:`specdesk.core.engine.Engine`.
Heavy libraries (torch, transformers) are imported only when a model is loaded.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# MKL (torch's CPU BLAS) dispatches its own best code path on Intel CPUs but a slower generic one on AMD CPUs for
# the small matrix products of decoding: verifying 5 positions cost 3.3x one position on a Zen 3 EPYC, 1.7x with
# the AVX2 path (devscripts/profile_gemm.py); on a Zen 4 EPYC with AVX-512 the AVX2 path decoded the demo target
# 8% faster than MKL's own choice (devscripts/profile_mkl.py). Its conditional-reproducibility switch forces that
# path, so specdesk sets it on AMD CPUs only: on Intel it would forbid MKL's AVX-512 kernels, and it could not be
# measured there (README). Read at MKL's first call, so it works as long as specdesk is imported before any matrix
# product; a user's own setting wins.
def _cpu_vendor() -> str:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor()  # Windows: "... AuthenticAMD"; elsewhere often empty


if "AuthenticAMD" in _cpu_vendor():
    os.environ.setdefault("MKL_CBWR", "AVX2")

if TYPE_CHECKING:
    from specdesk.core.engine import Engine


def load(target: str = "demo-target", draft: str | None = None, *, drafter: str | None = None,
         **kwargs: Any) -> "Engine":
    """Load a target model and a drafter; see :func:`specdesk.core.engine.load` for every option."""
    from specdesk.core.engine import load as _load

    return _load(target, draft, drafter=drafter, **kwargs)


__all__ = ["__version__", "load"]
