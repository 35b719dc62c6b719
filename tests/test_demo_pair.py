"""The bundled demo pair: sizes, its card's figures, and that a non-editable install carries and finds it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


from specdesk.core.stheader import read_header

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "resources" / "models"


def non_embedding(folder: Path) -> int:
    t = read_header(folder / "model.safetensors")
    return sum(v.numel for n, v in t.items() if "embed_tokens" not in n and "lm_head" not in n)


def test_sizes_and_ratio():
    target, draft = MODELS / "demo-target", MODELS / "demo-draft"
    assert (target / "model.safetensors").stat().st_size <= 60e6
    assert (draft / "model.safetensors").stat().st_size <= 8e6
    assert non_embedding(target) >= 8 * non_embedding(draft)
    for folder in (target, draft):
        for f in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json", "README.md",
                  "training.json"):
            assert (folder / f).exists(), (folder, f)
    assert (target / "tokenizer.json").read_bytes() == (draft / "tokenizer.json").read_bytes()


def test_card_acceptance_figure_is_reproducible():
    """The card's k=4 acceptance, recomputed by the card's own command (the deterministic part)."""
    ev = json.loads((MODELS / "demo-target" / "eval.json").read_text())
    card = (MODELS / "demo-target" / "README.md").read_text()
    assert "python devscripts/eval_demo.py" in card
    stated = ev["acceptance"]["4"]["acceptance_rate"]
    assert f"| 4 | {stated:.3f} |" in card
    r = subprocess.run([sys.executable, "devscripts/eval_demo.py", "--acceptance-only", "--ks", "4"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)["acceptance"]["4"]["acceptance_rate"]
    # Greedy decoding is deterministic; another CPU's float rounding may flip a rare near-tie.
    assert abs(got - stated) <= 0.02, (got, stated)
    assert stated >= 0.6


def test_installed_package_carries_and_finds_the_models(tmp_path):
    """`pip install .` (not editable) puts the pair inside the package, and an installed specdesk uses it."""
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--quiet",
                        "--target", str(target), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    installed = target / "specdesk" / "resources" / "models"
    assert (installed / "demo-target" / "model.safetensors").exists()
    assert (installed / "demo-draft" / "model.safetensors").exists()
    assert (installed.parent / "icons" / "org.specdesk.Specdesk.svg").exists()  # for specdesk desktop-entry
    code = ("import specdesk, specdesk.core.loading as L; p = L.resolve('demo-target'); "
            "assert 'site' in str(p) and str(p).startswith(%r), p; "
            "e = specdesk.load(); r = e.generate('import os', max_new_tokens=4); print(len(r.token_ids))"
            % str(target))
    env = {**os.environ, "PYTHONPATH": str(target), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "4"


def test_the_package_list_names_every_package():
    """pyproject lists packages by hand (for resources/); a new subpackage left out would not be installed."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "specdesk").rglob("__init__.py")}
    assert listed == found | {"specdesk.resources"}
