"""``specdesk models``: not built yet."""

from __future__ import annotations

from specdesk.core.errors import SpecdeskError


def add_parser(sub) -> None:
    p = sub.add_parser("models", help="(not built yet)")
    p.set_defaults(func=run)


def run(args) -> int:
    raise SpecdeskError("`specdesk models` is not built yet")
