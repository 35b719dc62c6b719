"""Telemetry: "not available" values instead of exceptions, plausible psutil readings, cheap polling.

This machine has no NVIDIA driver, so the NVML path is exercised two ways: the real failure (library
not found), and a stand-in ``pynvml`` module (a third-party library, not our code) that answers like a
one-GPU machine, so the parsing of names, milliwatts and per-process memory is tested too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from specdesk.hw import telemetry
from specdesk.hw.memory import memory_budget, peak_memory_bytes
from specdesk.hw.telemetry import Snapshot, Telemetry

ROOT = Path(__file__).resolve().parent.parent
GiB = 2**30


def test_reading_without_a_driver_gives_none_not_an_exception():
    t = Telemetry()
    snap = t.read()
    assert isinstance(snap, Snapshot)
    if snap.nvml_available:  # a machine with a GPU runs this suite too: then the values must be real
        assert snap.gpus and snap.gpus[0].total_bytes > 0
        return
    assert snap.gpus == () and "NVML" in snap.nvml_error
    assert snap.gpu(0) is None and snap.allocator(0) is None
    d = snap.to_dict()
    assert d["gpus"] == [] and d["host"]["rss_bytes"] == snap.host.rss_bytes


def test_host_readings_are_plausible():
    host = Telemetry().read().host
    assert 20 * 2**20 < host.rss_bytes < host.ram_total_bytes
    assert 0 < host.ram_available_bytes <= host.ram_total_bytes
    assert 0 < host.ram_used_bytes <= host.ram_total_bytes
    assert host.peak_rss_bytes >= host.rss_bytes * 0.9  # the high-water mark is at least the current level


def test_missing_library_is_not_available(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # "import pynvml" now raises ImportError
    snap = Telemetry().read()
    assert snap.gpus == () and "nvidia-ml-py not available" in snap.nvml_error
    assert snap.host.rss_bytes > 0


def _fake_nvml(power_fails: bool = False, own_pid_listed: bool = True) -> types.ModuleType:
    """A stand-in for nvidia-ml-py answering like one H100 with this process holding 1 GiB."""
    m = types.ModuleType("pynvml")
    m.NVML_TEMPERATURE_GPU = 0
    m.nvmlInit = lambda: None
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: 1
    m.nvmlDeviceGetHandleByIndex = lambda i: f"handle{i}"
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"  # older bindings return bytes
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=80 * GiB, free=60 * GiB, used=20 * GiB)
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=87, memory=40)
    m.nvmlDeviceGetTemperature = lambda h, sensor: 64

    def power(h):
        if power_fails:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return 312_500  # milliwatts

    m.nvmlDeviceGetPowerUsage = power
    m.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700_000
    pid = os.getpid() if own_pid_listed else 1
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=pid, usedGpuMemory=GiB),
                                                       types.SimpleNamespace(pid=999999, usedGpuMemory=5 * GiB)]
    m.nvmlDeviceGetGraphicsRunningProcesses = lambda h: []
    return m


def test_nvml_values_are_parsed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml())
    t = Telemetry()
    snap = t.read()
    assert snap.nvml_available and len(snap.gpus) == 1
    g = snap.gpu(0)
    assert g.name == "NVIDIA H100 80GB HBM3"
    assert (g.total_bytes, g.free_bytes, g.used_bytes) == (80 * GiB, 60 * GiB, 20 * GiB)
    assert g.utilization_percent == 87 and g.temperature_c == 64
    assert g.power_w == pytest.approx(312.5) and g.power_limit_w == pytest.approx(700.0)
    assert g.process_bytes == GiB  # only this process's entry, not the other one's 5 GiB
    b = memory_budget("cuda:0", telemetry=t)
    assert b.bytes == 61 * GiB and "NVIDIA H100" in b.source  # free + what this process already holds
    t.close()


def test_one_failing_query_leaves_the_others(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(power_fails=True, own_pid_listed=False))
    g = Telemetry().read().gpu(0)
    assert g.power_w is None and g.free_bytes == 60 * GiB
    assert g.process_bytes == 0  # not listed and CUDA not initialised here: this process holds nothing


def test_polling_is_cheap():
    t = Telemetry()
    t.read()  # NVML initialisation (or its failure) happens once
    t0 = time.perf_counter()
    for _ in range(50):
        t.read()
    per_read = (time.perf_counter() - t0) / 50
    assert per_read < 0.02  # 10 Hz polling would cost < 20% of one core even at this bound


def test_a_reading_never_imports_torch_or_starts_cuda():
    code = ("import sys; from specdesk.hw import telemetry; s = telemetry.read(); "
            "print('torch' in sys.modules, s.allocators)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "()"]


def test_peaks_and_budgets_without_a_gpu():
    assert peak_memory_bytes("cpu") > 20 * 2**20
    cpu = memory_budget("cpu")
    assert cpu.bytes > 0 and cpu.device == "cpu" and "RAM" in cpu.source
    if telemetry.read().nvml_available:
        return
    assert peak_memory_bytes("cuda") is None
    gpu = memory_budget("cuda:0")
    assert gpu.bytes is None and "not readable" in gpu.source
    assert memory_budget("tpu").bytes is None
