"""Generation settings, validated where they are made so a bad value never reaches the loop."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from specdesk.core.errors import BadSetting
from specdesk.core.samplingconfig import SamplingConfig
from specdesk.core.tree import checked_widths

MAX_K = 32
MAX_NEW_TOKENS = 100_000


@dataclass(frozen=True)
class GenerationSettings:
    """k: draft tokens per step (0 disables drafting), or "auto" for the adaptive controller.
    tree: candidates per draft depth under greedy decoding ("4,2": the draft's best 4 at depth 1, best 2 at
    depth 2, its chain after; core/tree.py); () drafts a plain chain."""

    max_new_tokens: int = 128
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    k: int | str = 4
    stop: tuple[str, ...] = field(default_factory=tuple)
    tree: tuple[int, ...] | str = ()

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or not (1 <= self.max_new_tokens <= MAX_NEW_TOKENS):
            raise BadSetting(f"max new tokens must be between 1 and {MAX_NEW_TOKENS}, got {self.max_new_tokens}")
        if self.k != "auto" and (not isinstance(self.k, int) or not (0 <= self.k <= MAX_K)):
            raise BadSetting(f"k must be between 0 and {MAX_K} or 'auto', got {self.k!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or not (0 <= self.seed < 2**63)):
            raise BadSetting(f"seed must be a non-negative integer, got {self.seed!r}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise BadSetting("stop strings must be non-empty text")
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "tree", checked_widths(self.tree))
        if len(self.tree) > MAX_K:
            raise BadSetting(f"tree: at most {MAX_K} depths, got {len(self.tree)}")
        self.sampling  # validates temperature, top-k, top-p

    @property
    def sampling(self) -> SamplingConfig:
        return SamplingConfig(self.temperature, self.top_k, self.top_p)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stop"] = list(self.stop)
        d["tree"] = list(self.tree)
        return d
