"""The work folder of one distillation: data shards, checkpoints and the run's settings, so a run resumes.

    <out>/.distill/settings.json       what this run was started with (a resume must match it)
    <out>/.distill/data/held-out.pt     the target's greedy replies to the held-out prompts
    <out>/.distill/data/train-00000.pt  one shard per batch of training prompts (skipped when present)
    <out>/.distill/checkpoint.pt        the draft, optimiser and curve after the last checkpoint
    <out>/.distill/features/train-00000.pt  an EAGLE head's: the target's hidden states, 512 replies a shard
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from specdesk.core.distill.data import Sample
from specdesk.core.errors import BadSetting


def _save(obj, path: Path) -> None:
    """torch.save by way of a temporary file, so a stop midway never leaves a half-written file at ``path``."""
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


class WorkDir:
    def __init__(self, out: Path) -> None:
        self.root = Path(out) / ".distill"
        self.data = self.root / "data"
        self.features = self.root / "features"

    @property
    def settings_path(self) -> Path:
        return self.root / "settings.json"

    @property
    def checkpoint_path(self) -> Path:
        return self.root / "checkpoint.pt"

    def exists(self) -> bool:
        """Whether a run is here to resume: its settings and something it made (an answered shard, prompts written,
        a checkpoint). A run stopped before any of that (cancelled while the target loaded) left only its settings:
        a new run may start there with other ones."""
        if not self.settings_path.exists():
            return False
        return any(p.is_file() and p != self.settings_path for p in self.root.rglob("*"))

    def start(self, settings: dict, resume: bool) -> None:
        """A new run writes its settings; a resumed one checks the data-shaping ones still match."""
        if resume and self.exists():
            old = json.loads(self.settings_path.read_text())
            keys = ("target_sha256", "seed", "held_out_prompts", "max_new_tokens", "topk",
                    "layers", "head_vocab", "kind", "skip_prompts", "prompts")
            # what runs from before these settings existed used
            before = {"kind": "draft", "skip_prompts": 0, "prompts": "templates"}
            diff = [k for k in keys if old.get(k, before.get(k)) != settings.get(k, before.get(k))]
            # more training prompts extend the data: the prompt list is the same seeded sequence, longer, so the
            # answered shards stay valid (fewer would drop answered data: refused)
            if settings.get("train_prompts", 0) < old.get("train_prompts", 0):
                diff.append("train_prompts (fewer than before)")
            elif settings.get("train_prompts", 0) > old.get("train_prompts", 0) \
                    and old.get("prompt_set") != settings.get("prompt_set"):
                # another specdesk's templates give another list: its next prompts could repeat answered ones
                diff.append("prompt templates (this specdesk writes other prompts than the run began with, so "
                            "more train_prompts cannot extend its list)")
            if diff:
                raise BadSetting(f"--resume: this run's {', '.join(diff)} differ from the run in {self.root} "
                                 f"(use the same settings, or another --out)")
            if settings.get("train_prompts") != old.get("train_prompts"):
                self.settings_path.write_text(json.dumps({**old, "train_prompts": settings["train_prompts"]},
                                                         indent=2))
            return
        if not resume and self.exists():
            raise BadSetting(f"{self.root.parent} already holds a distillation; add --resume to go on with it, "
                             f"or choose another --out")
        try:
            self.data.mkdir(parents=True, exist_ok=True)
            self.settings_path.write_text(json.dumps(settings, indent=2))
        except OSError as e:
            raise BadSetting(f"cannot make the work folder {self.root}: {e.strerror or e}") from None

    def shard_path(self, name: str) -> Path:
        return self.data / f"{name}.pt"

    def save_shard(self, name: str, samples: list[Sample]) -> None:
        _save([s.to_dict() for s in samples], self.shard_path(name))

    def load_shard(self, name: str) -> list[Sample]:
        return [Sample.from_dict(d) for d in torch.load(self.shard_path(name), weights_only=False)]

    def train_shards(self) -> list[str]:
        return sorted(p.stem for p in self.data.glob("train-*.pt"))

    def save_checkpoint(self, state: dict) -> None:
        _save(state, self.checkpoint_path)

    def features_path(self, split: str, index: int) -> Path:
        return self.features / f"{split}-{index:05d}.pt"

    def save_features(self, split: str, index: int, feats: list[torch.Tensor]) -> None:
        self.features.mkdir(parents=True, exist_ok=True)
        _save(feats, self.features_path(split, index))

    def load_features(self, split: str, index: int) -> list[torch.Tensor]:
        """One features shard, memory-mapped (the page cache holds it, not the process)."""
        return torch.load(self.features_path(split, index), mmap=True, weights_only=False)

    def load_checkpoint(self) -> dict | None:
        if not self.checkpoint_path.exists():
            return None
        return torch.load(self.checkpoint_path, weights_only=False)
