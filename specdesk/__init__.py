"""specdesk: run local LLMs faster with exact speculative decoding, and see why.

The public Python API is :func:`load`, which returns an :class:`specdesk.core.engine.Engine`.
Heavy libraries (torch, transformers) are imported only when a model is loaded.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# MKL (torch's CPU BLAS) picks a slow generic sgemm path on AMD CPUs for the small matrix products of
# decoding: verifying 5 positions cost 3.3x one position on this EPYC, 1.7x with the AVX2 code path
# (devscripts/profile_gemm.py). Its conditional-reproducibility switch forces that path, and makes float
# results the same on every AVX2 CPU. Read at MKL's first call, so it works as long as specdesk is imported
# before any matrix product; a user's own setting wins.
os.environ.setdefault("MKL_CBWR", "AVX2")

if TYPE_CHECKING:
    from specdesk.core.engine import Engine


def load(target: str = "demo-target", draft: str | None = None, *, drafter: str | None = None,
         **kwargs: Any) -> "Engine":
    """Load a target model and a drafter; see :func:`specdesk.core.engine.load` for every option."""
    from specdesk.core.engine import load as _load

    return _load(target, draft, drafter=drafter, **kwargs)


__all__ = ["__version__", "load"]
