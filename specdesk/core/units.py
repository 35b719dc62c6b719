"""Numbers for people: sizes on disk (decimal units, as file managers show them) and parameter counts."""

from __future__ import annotations


def disk_size(n: int | None) -> str:
    if not n:
        return "-"
    x = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if x < 1000 or unit == "TB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1000
    return str(n)


def param_count(n: int | None, digits: int = 2) -> str:
    if not n:
        return "-"
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.{digits}f}{unit}"
    return str(n)
