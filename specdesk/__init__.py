"""specdesk: run local LLMs faster with exact speculative decoding, and see why.

The public Python API is :func:`load`, which returns an :class:`specdesk.core.engine.Engine`.
Heavy libraries (torch, transformers) are imported only when a model is loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from specdesk.core.engine import Engine


def load(target: str = "demo-target", draft: str | None = None, *, drafter: str | None = None,
         **kwargs: Any) -> "Engine":
    """Load a target model and a drafter; see :func:`specdesk.core.engine.load` for every option."""
    from specdesk.core.engine import load as _load

    return _load(target, draft, drafter=drafter, **kwargs)


__all__ = ["__version__", "load"]
