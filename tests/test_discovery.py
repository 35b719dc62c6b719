"""Model discovery on a Hugging Face cache laid out as the hub writes it (blobs, snapshots symlinks, refs)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import specdesk_side_by_side, swapped_token_copy

ROOT = Path(__file__).resolve().parent.parent


def add_to_hub_cache(cache: Path, repo_id: str, folder: Path | None, *, skip: tuple[str, ...] = (),
                     incomplete: bool = False, commit: str = "a" * 40) -> Path:
    """Lay ``folder``'s files out like huggingface_hub does: content-addressed blobs + symlinked snapshot."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    for f in sorted(folder.iterdir()) if folder else []:
        if f.name in skip:
            continue
        data = f.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    if incomplete:
        (repo / "blobs" / ("f" * 64 + ".incomplete")).write_bytes(b"\0" * 1000)
    return snap


@pytest.fixture()
def hub_cache(tmp_path, tiny_target, tiny_draft, tiny_target_copy):
    cache = tmp_path / "hub"
    add_to_hub_cache(cache, "acme/tiny-target", tiny_target)
    add_to_hub_cache(cache, "acme/tiny-draft", tiny_draft)
    add_to_hub_cache(cache, "acme/partial-model", tiny_target, skip=("model.safetensors",), incomplete=True)
    add_to_hub_cache(cache, "acme/no-config", tiny_draft, skip=("config.json",))
    return cache


def specdesk(*args, env_extra=None, tmp_path=None):
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "specdesk", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)


def test_models_lists_bundled_cache_and_broken_entries(hub_cache, tmp_path):
    env = {"HF_HUB_CACHE": str(hub_cache), "SPECDESK_CONFIG_DIR": str(tmp_path / "cfg")}
    r = specdesk("models", "--json", env_extra=env)
    assert r.returncode == 0, r.stderr
    rows = {e["name"]: e for e in json.loads(r.stdout)}
    assert rows["demo-target"]["usable"] and rows["demo-target"]["source"] == "bundled"
    t = rows["acme/tiny-target"]
    assert t["usable"] and t["source"] == "hf-cache" and t["architecture"] == "llama"
    assert t["vocab_size"] == 4096 and t["params"] > 0 and t["bytes_on_disk"] > 100_000
    assert t["chat_template"] is False and t["quantized"] is None and t["dtype"] == "float32"
    partial = rows["acme/partial-model"]
    assert not partial["usable"] and ("partial" in partial["reason"] or "no weights" in partial["reason"])
    assert not rows["acme/no-config"]["usable"] and "config.json" in rows["acme/no-config"]["reason"]


def test_hf_home_is_honoured(hub_cache, tmp_path):
    home = tmp_path / "hfhome"
    (home).mkdir()
    shutil.move(str(hub_cache), str(home / "hub"))
    env = {"HF_HOME": str(home), "SPECDESK_CONFIG_DIR": str(tmp_path / "cfg")}
    env_clean = {k: v for k, v in os.environ.items() if k != "HF_HUB_CACHE"}
    r = subprocess.run([sys.executable, "-m", "specdesk", "models", "--json"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, env={**env_clean, **env, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    assert "acme/tiny-target" in {e["name"] for e in json.loads(r.stdout)}


def test_drafts_for_lists_compatible_smallest_first_and_says_why_not(hub_cache, tmp_path, tiny_draft):
    odd = swapped_token_copy(tiny_draft, tmp_path / "odd-draft")
    env = {"HF_HUB_CACHE": str(hub_cache), "SPECDESK_CONFIG_DIR": str(tmp_path / "cfg")}
    r = specdesk("models", "--add", str(odd), "--drafts-for", "acme/tiny-target", "--json", env_extra=env)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    compatible = [c["name"] for c in rows if c["compatible"]]
    assert compatible[:1] == ["acme/tiny-draft"]  # smallest first
    demo = next(c for c in rows if c["name"] == "demo-draft")  # same tokenizer, but bigger than this target
    assert not demo["compatible"] and demo["incompatibility"] == "not smaller than the target"
    odd_row = next(c for c in rows if c["name"] == str(odd.resolve()))
    assert not odd_row["compatible"] and "token id 500" in odd_row["incompatibility"]
    # the added folder is remembered in the settings file
    settings = json.loads((tmp_path / "cfg" / "settings.json").read_text())
    assert str(odd.resolve()) in settings["model_folders"]


def test_generate_with_a_cached_hub_id(hub_cache, tmp_path):
    env = {"HF_HUB_CACHE": str(hub_cache), "HF_HUB_OFFLINE": "1"}
    r, partial = specdesk_side_by_side(
        ["generate", "--target", "acme/tiny-target", "--draft", "acme/tiny-draft", "--prompt", "x = 1",
         "--max-new-tokens", "5", "--json"],
        ["generate", "--target", "acme/partial-model", "--drafter", "none", "--prompt", "x"], env_extra=env)
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["token_ids"]) == 5
    assert partial.returncode == 2 and "no weights" in partial.stderr


def test_a_target_files_sha256_is_kept_across_processes(tmp_path, monkeypatch):
    """own_draft hashes a target that could be a bundled draft's (SmolLM2's 98 MB file: ~0.2 s a one-shot call);
    a file's sha256 is kept in the user cache by path, size and modification time, a folder's only in the process."""
    import hashlib
    import os

    from specdesk.core import discovery
    from specdesk.core.distill import pipeline

    monkeypatch.setenv("SPECDESK_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "model.gguf"
    f.write_bytes(b"weights" * 1000)
    want = hashlib.sha256(f.read_bytes()).hexdigest()
    assert discovery._target_sha256(f) == want and (tmp_path / "cache" / discovery.HASHES_FILE).exists()
    discovery._hashes.clear()  # as a new process: read back, not hashed

    def refuse(path):
        raise AssertionError("hashed again")
    monkeypatch.setattr(pipeline, "file_sha256", refuse)
    assert discovery._target_sha256(f) == want
    monkeypatch.undo()
    monkeypatch.setenv("SPECDESK_CACHE_DIR", str(tmp_path / "cache"))
    f.write_bytes(b"other weights" * 1000)  # another size and time: hashed again
    os.utime(f, ns=(1, 1))
    discovery._hashes.clear()
    assert discovery._target_sha256(f) == hashlib.sha256(f.read_bytes()).hexdigest()
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"x" * 100)
    discovery._target_sha256(folder)
    saved = (tmp_path / "cache" / discovery.HASHES_FILE).read_text()
    assert str(f.resolve()) in saved and str(folder.resolve()) not in saved
    (tmp_path / "cache" / discovery.HASHES_FILE).write_text("{not json")  # a broken cache: hashed, and rewritten
    discovery._hashes.clear()
    assert discovery._target_sha256(f) == hashlib.sha256(f.read_bytes()).hexdigest()
    gone = tmp_path / "gone.gguf"  # a file hashed, then deleted: its entry leaves at the next save
    gone.write_bytes(b"w" * 10)
    discovery._target_sha256(gone)
    assert str(gone.resolve()) in (tmp_path / "cache" / discovery.HASHES_FILE).read_text()
    gone.unlink()
    f.write_bytes(b"third weights" * 10)
    discovery._hashes.clear()
    discovery._target_sha256(f)
    saved = (tmp_path / "cache" / discovery.HASHES_FILE).read_text()
    assert str(gone.resolve()) not in saved and str(f.resolve()) in saved


def test_same_model_verdicts_kept_are_the_live_ones(tmp_path):
    """same_model's verdicts are kept by the target's and the draft's files' sizes and times: a new verdict for the same
    pair replaces the one before it (its files changed), and verdicts for files that are gone leave the cache."""
    from specdesk.core import discovery

    def pair(name: str) -> tuple:
        target, draft = tmp_path / f"{name}.gguf", tmp_path / f"{name}-draft"
        target.write_bytes(b"gguf" * 10)
        draft.mkdir()
        (draft / "config.json").write_text("{}")
        return target, draft

    (a, da), (b, db) = pair("a"), pair("b")
    old_a = discovery._same_key(a, da)
    kept = {old_a: True, discovery._same_key(b, db): False, "not json": True}
    a.write_bytes(b"other" * 10)  # a's file changed: a new key for the same pair
    new_a = discovery._same_key(a, da)
    assert new_a != old_a
    assert discovery._live_verdicts(kept, new_a) == {discovery._same_key(b, db): False}
    b.unlink()
    assert discovery._live_verdicts(kept, new_a) == {}


def test_drafts_for_a_target_that_cannot_load_is_one_line(tmp_path):
    """A cut file or a folder without config.json as --drafts-for's target: the one line generate and plan give
    (was a traceback from reading its tokenizer)."""
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(b"GGUF" + bytes(60))
    empty = tmp_path / "empty"
    empty.mkdir()
    for target in (cut, empty):
        r = specdesk("models", "--drafts-for", str(target), env_extra={"SPECDESK_CONFIG_DIR": str(tmp_path / "c")})
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith(f"specdesk: error: {target.name} cannot be a target")


def test_models_add_and_remove_say_what_they_did(tmp_path):
    env = {"SPECDESK_CONFIG_DIR": str(tmp_path / "cfg")}
    empty = tmp_path / "empty"
    empty.mkdir()
    r = specdesk("models", "--add", str(empty), "--json", env_extra=env)
    assert r.returncode == 0 and "holds no model specdesk can load yet" in r.stderr  # remembered, with a note
    r = specdesk("models", "--remove", str(tmp_path / "never-added"), "--json", env_extra=env)
    assert r.returncode == 2 and "is not a remembered folder" in r.stderr and str(empty) in r.stderr
    assert specdesk("models", "--remove", str(empty), "--json", env_extra=env).returncode == 0
