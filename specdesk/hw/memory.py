"""Memory readings for callers that want one number: session-log snapshots, generation peaks, plan budgets.

For live readings of every GPU (name, utilisation, temperature, power) see :mod:`specdesk.hw.telemetry`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


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


def process_reader(device: str = "cpu"):
    """A cheap reader of the memory this process holds on ``device``, for a per-step memory budget:
    the GPU memory torch reserved on CUDA, the resident set on the CPU (psutil: 60 us a reading on a busy
    2-core machine, against 10 ms or more per decoding step). It returns None when the figure cannot be read."""
    if str(device).startswith("cuda"):
        def read_cuda() -> int | None:
            try:
                import torch

                return int(torch.cuda.memory_reserved(torch.device(device)))
            except Exception:
                return None

        return read_cuda
    try:
        import psutil

        proc = psutil.Process()
    except Exception:
        return lambda: None

    def read_rss() -> int | None:
        try:
            return int(proc.memory_info().rss)
        except Exception:
            return None

    return read_rss


# ----------------------------------------------------------------------------- peaks and budgets

def peak_memory_bytes(device: str = "cpu") -> int | None:
    """The peak a generation reached: ``torch.cuda.max_memory_reserved`` on CUDA, the process's peak RSS on the CPU.

    None when it cannot be read. The CUDA figure leaves out the CUDA context (the planner adds it back).
    """
    from specdesk.hw.telemetry import peak_rss_bytes

    if str(device).startswith("cuda"):
        try:
            import torch

            if not torch.cuda.is_initialized():  # nothing ran on the GPU in this process: no peak to report
                return None
            return int(torch.cuda.max_memory_reserved(torch.device(device)))
        except Exception:
            return None
    return peak_rss_bytes()


@dataclass(frozen=True)
class Budget:
    """Memory a configuration may use on ``device``; ``bytes`` None when it cannot be read (``source`` says why)."""

    bytes: int | None
    device: str  # "cuda:N" or "cpu"
    source: str


def _nvml_index(torch_index: int) -> int:
    """NVML counts every GPU; torch only those CUDA_VISIBLE_DEVICES lists (integer lists handled)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        parts = [p.strip() for p in visible.split(",") if p.strip()]
        if torch_index < len(parts) and parts[torch_index].isdigit():
            return int(parts[torch_index])
    return torch_index


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def memory_budget(device: str = "auto", telemetry=None) -> Budget:
    """What the planner may fill: free memory of the chosen GPU, or available system RAM for the CPU.

    Memory this process already holds is added back (it would hold the new models instead of the
    old ones: a GUI re-planning with a model loaded must not count that model against the new one).
    device: "auto" (CUDA when torch sees a GPU, else CPU), "cpu", "cuda" or "cuda:N". Never raises.
    """
    from specdesk.hw.telemetry import default_telemetry, read_host

    device = str(device or "auto")
    if device == "auto":
        try:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        except Exception:
            device = "cpu"
    if device.startswith("cuda"):
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        device = f"cuda:{index}"
        t = telemetry or default_telemetry()
        gpu = next((g for g in t.read_gpus() if g.index == _nvml_index(index)), None)
        if gpu is None or gpu.free_bytes is None:
            return Budget(None, device, f"GPU {index} memory not readable ({t.nvml_error or 'no such GPU'})")
        own = gpu.process_bytes or 0
        extra = f", plus {_gib(own)} this process holds" if own else ""
        return Budget(gpu.free_bytes + own, device, f"free memory of GPU {index} ({gpu.name}) from NVML{extra}")
    if device != "cpu":
        return Budget(None, device, f"unknown device {device!r}")
    host = read_host()
    if host.ram_available_bytes is None:
        return Budget(None, "cpu", "system memory not readable (psutil)")
    own = host.rss_bytes or 0
    return Budget(host.ram_available_bytes + own, "cpu",
                  f"available system RAM plus {_gib(own)} this process holds")
