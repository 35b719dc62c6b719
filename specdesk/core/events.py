"""The plain values the decode loop yields: small, frozen, safe to pass between threads."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class PrefillEvent:
    prompt_tokens: int
    seconds: float
    cached_tokens: int = 0  # of prompt_tokens, kept from the last generation's cache instead of read


@dataclass(frozen=True)
class StepEvent:
    """One target forward pass: ``accepted`` draft tokens kept, then one token from the target.

    ``token_ids`` are the tokens emitted this step (fewer than accepted + 1 only when a stop cut the
    step short); ``drafted_text`` is the text of the kept draft tokens, ``target_text`` the rest.
    Times are wall seconds measured after device synchronisation.
    """

    index: int
    token_ids: tuple[int, ...]
    drafted: int
    accepted: int
    k: int
    draft_s: float
    verify_s: float
    step_s: float
    elapsed_s: float
    context_len: int
    drafted_text: str = ""
    target_text: str = ""
    setup_s: float = 0.0  # of draft_s: the draft catching up (its lazy start's prompt, tokens decoded while it sat out)
    lookup: bool = False  # the drafted tokens were prompt lookup's continuation (model+lookup): no draft model ran

    @property
    def text(self) -> str:
        return self.drafted_text + self.target_text

    def to_dict(self) -> dict:
        d = asdict(self)
        d["token_ids"] = list(self.token_ids)
        return d


@dataclass(frozen=True)
class GenerationStats:
    prompt_tokens: int = 0
    new_tokens: int = 0
    target_forwards: int = 0
    drafted: int = 0
    accepted: int = 0
    prefill_seconds: float = 0.0
    cached_prompt_tokens: int = 0  # prompt tokens kept from the last generation's cache (not read again)
    decode_seconds: float = 0.0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted draft tokens; None when nothing was drafted."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Emitted tokens per target forward pass (1.0 for plain decoding)."""
        return self.new_tokens / self.target_forwards if self.target_forwards else None

    @property
    def tokens_per_second(self) -> float | None:
        return self.new_tokens / self.decode_seconds if self.decode_seconds > 0 else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(acceptance_rate=self.acceptance_rate, mean_accepted_length=self.mean_accepted_length,
                 tokens_per_second=self.tokens_per_second)
        return d


@dataclass(frozen=True)
class DoneEvent:
    """The end of a generation. stop_reason: "eos", "max_new_tokens", "stop_string" or "cancelled"."""

    token_ids: tuple[int, ...]
    text: str
    stats: GenerationStats
    stop_reason: str
    seed: int | None = None
    tail: str = ""  # text not delivered by any StepEvent (held back until the end)


@dataclass(frozen=True)
class GenerationResult:
    token_ids: list[int]
    text: str
    stats: GenerationStats
    stop_reason: str
    seed: int | None = None
    steps: list[StepEvent] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        return {"token_ids": list(self.token_ids), "text": self.text, "stop_reason": self.stop_reason,
                "seed": self.seed, "stats": self.stats.to_dict()}


Event = PrefillEvent | StepEvent | DoneEvent
