"""Memory readings for the memory plot and the status bar: GPU (NVML) when the models are on CUDA, else RAM.

Readings come from ``specdesk.hw.telemetry`` (NVML per GPU, this process's GPU memory, psutil); every
failure there is a None value, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3


@dataclass(frozen=True)
class MemoryReading:
    used: int | None  # bytes this process holds (GPU memory on CUDA, RSS on the CPU)
    free: int | None  # bytes free on that device
    total: int | None
    used_label: str
    free_label: str

    def summary(self) -> str:
        def gib(n):
            return "n/a" if n is None else f"{n / GIB:.2f} GiB"

        where = "GPU" if "GPU" in self.used_label else "RAM"
        return f"{where}: {gib(self.used)} used by specdesk · {gib(self.free)} free"


def _gpu_index(device: str) -> int:
    try:
        return int(device.split(":", 1)[1]) if ":" in device else 0
    except ValueError:
        return 0


def read_memory(device: str = "cpu") -> MemoryReading:
    """One reading (well under a millisecond: safe to poll from the GUI thread at a few Hz)."""
    from specdesk.hw import telemetry

    if str(device).startswith("cuda"):
        from specdesk.hw.memory import _nvml_index

        index = _gpu_index(str(device))
        gpu = next((g for g in telemetry.default_telemetry().read_gpus() if g.index == _nvml_index(index)), None)
        used = gpu.process_bytes if gpu is not None else None
        if used is None:  # the driver hides per-process usage: torch's reserved memory is the next best
            alloc = next((a for a in telemetry.read_allocators() if a.device == index), None)
            used = alloc.reserved_bytes if alloc is not None else None
        return MemoryReading(used, gpu.free_bytes if gpu else None, gpu.total_bytes if gpu else None,
                             "this process (GPU)", "GPU free")
    host = telemetry.read_host()
    return MemoryReading(host.rss_bytes, host.ram_available_bytes, host.ram_total_bytes, "this process (RSS)",
                         "RAM free")
