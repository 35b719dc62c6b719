"""`specdesk serve`: an OpenAI-compatible HTTP server on a loaded pair (a front door beside cli and qt).

It imports core and hw, never Qt (an import-linter contract in pyproject.toml checks it). The desktop
app starts the same server on its own engine (Tools → Start server…).
"""

from specdesk.serve.runner import EngineHost
from specdesk.serve.server import SpecdeskServer

__all__ = ["EngineHost", "SpecdeskServer"]
