"""Importing specdesk selects MKL's AVX2 code path (fast small GEMMs on AMD CPUs) unless the user chose one."""

import os
import subprocess
import sys


def _cbwr(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    if env_value is not None:
        env["MKL_CBWR"] = env_value
    r = subprocess.run([sys.executable, "-c", "import os, specdesk; print(os.environ['MKL_CBWR'])"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_default_is_avx2():
    assert _cbwr(None) == "AVX2"


def test_user_setting_wins():
    assert _cbwr("COMPATIBLE") == "COMPATIBLE"
