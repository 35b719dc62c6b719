"""Importing specdesk selects MKL's AVX2 code path on AMD CPUs (faster small GEMMs there) unless the user chose one."""

import os
import subprocess
import sys


def _cbwr(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    if env_value is not None:
        env["MKL_CBWR"] = env_value
    r = subprocess.run([sys.executable, "-c", "import os, specdesk; print(os.environ.get('MKL_CBWR', ''))"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def _vendor() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("vendor_id"))
    except (OSError, StopIteration):
        return ""


def test_default_is_avx2_on_amd_and_mkls_own_choice_elsewhere():
    """Where it was measured to help (AMD); Intel CPUs keep MKL's own dispatch (AVX-512 kernels included)."""
    assert _cbwr(None) == ("AVX2" if "AuthenticAMD" in _vendor() else "")


def test_user_setting_wins():
    assert _cbwr("COMPATIBLE") == "COMPATIBLE"
