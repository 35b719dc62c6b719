"""What CPU this is, for the speed figures a run publishes (libraries take different code paths on AVX2, AVX-512 and
AMX machines, so a figure without its CPU cannot be compared)."""

from __future__ import annotations

import platform
from pathlib import Path

NOTABLE_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile")  # the kernels' code paths split on these


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return ""


def _field(name: str, cpuinfo: str | None) -> str:
    """The first non-empty value of ``name`` in /proc/cpuinfo's text (or the one given), else ""."""
    for line in (_cpuinfo() if cpuinfo is None else cpuinfo).splitlines():
        key, _, value = line.partition(":")
        if key.strip() == name and value.strip():
            return value.strip()
    return ""


def cpu_name(cpuinfo: str | None = None) -> str:
    """The CPU's model name (Linux: /proc/cpuinfo's "model name"), else what ``platform`` says."""
    return _field("model name", cpuinfo) or platform.processor() or platform.machine() or "unknown CPU"


def cpu_flags(cpuinfo: str | None = None) -> list[str]:
    """Which of NOTABLE_FLAGS the CPU has ([] where /proc/cpuinfo is not there to say)."""
    have = set(_field("flags", cpuinfo).split())
    return [f for f in NOTABLE_FLAGS if f in have]


def cpu_description() -> str:
    """"Intel(R) Xeon(R) Processor (avx2, avx512f, avx512_bf16, amx_tile)": the name and its notable flags."""
    flags = cpu_flags()
    return f"{cpu_name()} ({', '.join(flags)})" if flags else cpu_name()
