"""A cheap memory snapshot for session-log lines: this process and its device."""

from __future__ import annotations


def memory_snapshot(device: str = "cpu") -> dict:
    out: dict = {}
    try:
        import psutil

        out["rss_bytes"] = psutil.Process().memory_info().rss
        out["ram_available_bytes"] = psutil.virtual_memory().available
    except Exception:  # psutil missing or a sandbox forbids reading: "not available"
        pass
    if str(device).startswith("cuda"):
        try:
            import torch

            out["cuda_allocated_bytes"] = torch.cuda.memory_allocated()
            out["cuda_reserved_bytes"] = torch.cuda.memory_reserved()
        except Exception:
            pass
    return out
