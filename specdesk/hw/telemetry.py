"""Live memory and GPU readings for the status bar, plots and the planner's budget.

    t = Telemetry()            # NVML is initialised once, on the first read
    snap = t.read()            # a frozen Snapshot; every value a driver or library cannot give is None
    snap.gpus[0].free_bytes, snap.host.rss_bytes, snap.to_dict()

Sources: NVML through nvidia-ml-py (``pynvml``) for each GPU's name, memory, utilisation, temperature,
power and this process's own GPU memory; torch's caching allocator (allocated/reserved, current and
peak) when this process has already initialised CUDA; psutil for this process's resident memory and
the system's RAM. As in nvitop's API, a missing driver, library or permission gives "not available"
(None) values, never an exception: the caller decides how to show them and how often to poll.

Cost: one read is a handful of NVML queries per GPU plus two psutil calls (well under a millisecond
each on a typical machine), so polling at 2-10 Hz from the GUI thread is fine. NVML is not retried
after a failed initialisation (a machine does not grow a driver while the app runs); torch is never
imported here, and CUDA is never initialised by a reading.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuReading:
    index: int  # NVML index (the order nvidia-smi shows)
    name: str | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    used_bytes: int | None = None
    utilization_percent: float | None = None  # share of the last sample period a kernel was running
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    process_bytes: int | None = None  # this process's GPU memory as the driver counts it (context included)


@dataclass(frozen=True)
class AllocatorReading:
    """torch.cuda's caching allocator for one device of this process."""

    device: int
    allocated_bytes: int | None = None
    reserved_bytes: int | None = None
    max_allocated_bytes: int | None = None
    max_reserved_bytes: int | None = None


@dataclass(frozen=True)
class HostReading:
    rss_bytes: int | None = None
    peak_rss_bytes: int | None = None
    ram_total_bytes: int | None = None
    ram_available_bytes: int | None = None
    ram_used_bytes: int | None = None


@dataclass(frozen=True)
class Snapshot:
    time: float
    host: HostReading
    gpus: tuple[GpuReading, ...] = ()
    allocators: tuple[AllocatorReading, ...] = ()
    nvml_error: str | None = None  # why there are no GPU readings, when there are none
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def nvml_available(self) -> bool:
        return self.nvml_error is None

    def gpu(self, index: int) -> GpuReading | None:
        return next((g for g in self.gpus if g.index == index), None)

    def allocator(self, device: int) -> AllocatorReading | None:
        return next((a for a in self.allocators if a.device == device), None)

    def to_dict(self) -> dict:
        return {"time": self.time, "host": asdict(self.host), "gpus": [asdict(g) for g in self.gpus],
                "allocators": [asdict(a) for a in self.allocators], "nvml_error": self.nvml_error,
                "notes": list(self.notes)}


# ----------------------------------------------------------------------------- host (psutil)

def peak_rss_bytes() -> int | None:
    """This process's peak resident memory since it started (None when the OS does not say)."""
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # macOS: bytes, Linux: KiB
    except (ImportError, OSError, ValueError):
        pass
    try:
        import psutil

        return int(getattr(psutil.Process().memory_info(), "peak_wset"))  # Windows
    except Exception:
        return None


def read_host() -> HostReading:
    rss = total = available = used = None
    try:
        import psutil

        rss = int(psutil.Process().memory_info().rss)
        vm = psutil.virtual_memory()
        total, available, used = int(vm.total), int(vm.available), int(vm.used)
    except Exception as e:  # psutil missing or a sandbox forbids reading: not available
        log.debug("psutil reading failed: %s", e)
    return HostReading(rss_bytes=rss, peak_rss_bytes=peak_rss_bytes(), ram_total_bytes=total,
                       ram_available_bytes=available, ram_used_bytes=used)


# ----------------------------------------------------------------------------- torch allocator

def read_allocators() -> tuple[AllocatorReading, ...]:
    """Only when this process has torch imported and CUDA initialised: a reading must not create a context."""
    torch = sys.modules.get("torch")
    if torch is None:
        return ()
    try:
        if not torch.cuda.is_initialized():
            return ()
        out = []
        for i in range(torch.cuda.device_count()):
            out.append(AllocatorReading(i, int(torch.cuda.memory_allocated(i)), int(torch.cuda.memory_reserved(i)),
                                        int(torch.cuda.max_memory_allocated(i)),
                                        int(torch.cuda.max_memory_reserved(i))))
        return tuple(out)
    except Exception as e:
        log.debug("torch allocator reading failed: %s", e)
        return ()


def cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:
        return False


# ----------------------------------------------------------------------------- NVML

def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class Telemetry:
    """Readings on demand. NVML is initialised on the first read and shut down by :meth:`close`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nvml = None  # the pynvml module once initialised
        self._handles: list = []
        self._names: list[str | None] = []
        self._error: str | None = None
        self._tried = False

    # NVML -----------------------------------------------------------------
    def _init_nvml(self) -> None:
        self._tried = True
        try:
            import pynvml
        except Exception as e:  # nvidia-ml-py not installed (or broken)
            self._error = f"nvidia-ml-py not available ({type(e).__name__})"
            return
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as e:  # no driver, no GPU, no permission
            self._error = f"NVML not available: {_text(e) or type(e).__name__}"
            return
        self._nvml = pynvml
        self._handles = handles
        self._names = []
        for h in handles:
            try:
                self._names.append(_text(pynvml.nvmlDeviceGetName(h)))
            except Exception:
                self._names.append(None)
        if not handles:
            self._error = "NVML found no GPU"

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except Exception:
            return None

    def _own_bytes(self, handle) -> int | None:
        nv = self._nvml
        pid = os.getpid()
        found = False
        total = 0
        for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            procs = self._call(getattr(nv, getter, None) or (lambda h: None), handle)
            for p in procs or ():
                if getattr(p, "pid", None) == pid:
                    found = True
                    used = getattr(p, "usedGpuMemory", None)
                    if used is None:  # the driver hides per-process usage (Windows WDDM, some containers)
                        return None
                    total += int(used)
        if found:
            return total
        # Not listed: no context of ours on this GPU (0), unless CUDA is up here (then the PID is hidden).
        return None if cuda_initialised() else 0

    def _read_gpu(self, index: int, handle) -> GpuReading:
        nv = self._nvml
        mem = self._call(nv.nvmlDeviceGetMemoryInfo, handle)
        util = self._call(nv.nvmlDeviceGetUtilizationRates, handle)
        temp = self._call(nv.nvmlDeviceGetTemperature, handle, getattr(nv, "NVML_TEMPERATURE_GPU", 0))
        power = self._call(nv.nvmlDeviceGetPowerUsage, handle)  # milliwatts
        limit = self._call(nv.nvmlDeviceGetEnforcedPowerLimit, handle)
        return GpuReading(
            index=index, name=self._names[index] if index < len(self._names) else None,
            total_bytes=int(mem.total) if mem is not None else None,
            free_bytes=int(mem.free) if mem is not None else None,
            used_bytes=int(mem.used) if mem is not None else None,
            utilization_percent=float(util.gpu) if util is not None else None,
            temperature_c=float(temp) if temp is not None else None,
            power_w=power / 1000.0 if power is not None else None,
            power_limit_w=limit / 1000.0 if limit is not None else None,
            process_bytes=self._own_bytes(handle))

    def read_gpus(self) -> tuple[GpuReading, ...]:
        with self._lock:
            if not self._tried:
                self._init_nvml()
            if self._nvml is None:
                return ()
            return tuple(self._read_gpu(i, h) for i, h in enumerate(self._handles))

    @property
    def nvml_error(self) -> str | None:
        with self._lock:
            if not self._tried:
                self._init_nvml()
            return self._error

    # everything -----------------------------------------------------------
    def read(self) -> Snapshot:
        """One snapshot of every reading. Never raises."""
        try:
            gpus = self.read_gpus()
        except Exception as e:  # belt and braces: a reading must never take the app down
            gpus = ()
            self._error = f"NVML reading failed: {e}"
        return Snapshot(time=time.time(), host=read_host(), gpus=gpus, allocators=read_allocators(),
                        nvml_error=self.nvml_error)

    def close(self) -> None:
        with self._lock:
            if self._nvml is not None:
                try:
                    self._nvml.nvmlShutdown()
                except Exception:
                    pass
            self._nvml = None
            self._handles = []
            self._tried = False
            self._error = None


@lru_cache(maxsize=1)
def default_telemetry() -> Telemetry:
    """One shared reader per process (NVML initialised once)."""
    return Telemetry()


def read() -> Snapshot:
    """A snapshot from the shared reader."""
    return default_telemetry().read()
