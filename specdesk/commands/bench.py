"""``specdesk bench``: not built yet."""

from __future__ import annotations

from specdesk.core.errors import SpecdeskError


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="(not built yet)")
    p.set_defaults(func=run)


def run(args) -> int:
    raise SpecdeskError("`specdesk bench` is not built yet")
