"""Drafters: whatever proposes the next k tokens for the target to check.

All share one small interface. ``start`` sees the committed tokens before the last one (the
prefill); ``propose`` sees every committed token and returns up to k guesses; ``commit`` says how
many leading committed positions are certainly right, so a drafter with state rolls back the rest.

- ``ModelDrafter``: a second causal LM with the same tokenizer (the classic draft model).
- ``NgramDrafter``: prompt lookup; continues the latest earlier occurrence of the context's last n-gram.
- ``NoDrafter``: proposes nothing; the loop then is plain autoregressive decoding of the target.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specdesk.core.sampling import SamplingConfig, process_logits, sample
from specdesk.core.sequence import ModelSequence


@dataclass
class Proposal:
    tokens: torch.Tensor  # (m,) int64, m <= k, on the target's device
    probs: torch.Tensor | None = None  # (m, V) the draft's processed distributions; None = point masses
    # the draft's probability of each proposed token (only when the caller asked, see Drafter.propose)
    confidences: tuple[float, ...] = ()

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


KeepDrafting = Callable[[int, float], bool]  # (tokens drafted so far, the last one's probability) -> go on?


class Drafter:
    name = "base"
    reports_confidence = False  # whether propose() honours ``keep`` (a model has probabilities; a lookup has not)

    def start(self, prefix_ids: list[int], capacity: int) -> None:  # noqa: B027 - optional hook
        """A new generation; ``prefix_ids`` are the prompt tokens except the last."""

    def propose(self, ids: list[int], k: int, sampling: SamplingConfig,
                generator: torch.Generator | None, keep: KeepDrafting | None = None) -> Proposal:
        """Up to k guesses. With ``keep`` (drafters that report confidence), drafting stops early after
        any token for which keep(j, p) is false, p being the draft's probability of its j-th token."""
        raise NotImplementedError

    def commit(self, valid_len: int) -> None:  # noqa: B027 - optional hook
        """Positions [0, valid_len) of the committed sequence are final; forget anything past them."""


class NoDrafter(Drafter):
    name = "none"

    def __init__(self, device: torch.device) -> None:
        self._empty = torch.empty(0, dtype=torch.long, device=device)

    def propose(self, ids, k, sampling, generator, keep=None) -> Proposal:
        return Proposal(self._empty)


class NgramDrafter(Drafter):
    """Prompt lookup decoding (Saxena, 2023), with an incremental n-gram index.

    For n from ``max_n`` down to ``min_n``, the last n committed tokens are looked up in a table of
    earlier n-grams -> the positions after their latest occurrences; the first hit's continuation (up
    to k tokens) is the proposal. Of an n-gram's recent occurrences (up to ``RECENT``), the latest one
    followed by at least k tokens wins, else the one followed by the most: in a repeating run the very
    latest occurrence ends just before the cursor and would offer a single token. The table is updated
    only with new tokens, so a step's work does not grow with the context. No model, no extra memory.
    """

    name = "ngram"
    RECENT = 8

    def __init__(self, device: torch.device, max_n: int = 4, min_n: int = 2) -> None:
        if not (1 <= min_n <= max_n):
            raise ValueError("need 1 <= min_n <= max_n")
        self.device = device
        self.max_n, self.min_n = max_n, min_n
        self._tables: dict[int, dict[tuple[int, ...], list[int]]] = {}
        self._indexed = 0

    def start(self, prefix_ids: list[int], capacity: int) -> None:
        self._tables = {n: {} for n in range(self.min_n, self.max_n + 1)}
        self._indexed = 0

    def _index(self, ids: list[int]) -> None:
        # Position j starts the continuation of the n-gram ids[j-n:j]; the current suffix (j = len)
        # has no continuation yet and is not indexed, so a lookup never finds itself.
        for j in range(max(1, self._indexed), len(ids)):
            for n, table in self._tables.items():
                if j >= n:
                    positions = table.setdefault(tuple(ids[j - n:j]), [])
                    positions.append(j)
                    if len(positions) > self.RECENT:
                        del positions[0]
        self._indexed = max(self._indexed, len(ids))

    def lookup(self, ids: list[int], k: int) -> list[int]:
        self._index(ids)
        end = len(ids)
        for n in range(self.max_n, self.min_n - 1, -1):
            if end < n:
                continue
            positions = self._tables[n].get(tuple(ids[-n:]))
            if positions:
                pos = next((p for p in reversed(positions) if end - p >= k), positions[0])
                return ids[pos:pos + k]
        return []

    def propose(self, ids, k, sampling, generator, keep=None) -> Proposal:
        guess = self.lookup(ids, k) if k > 0 else []
        return Proposal(torch.tensor(guess, dtype=torch.long, device=self.device))


class ModelDrafter(Drafter):
    """A small causal LM sharing the target's tokenizer.

    ``vocab`` is the shared tokenizer vocabulary (draft logits beyond it are padding rows and are
    never proposed); ``target_vocab`` is the width of the target's distributions, so the draft's
    probabilities are zero-padded to it when sampling.
    """

    name = "model"
    reports_confidence = True

    def __init__(self, model, vocab: int, target_vocab: int, lean: bool = True) -> None:
        self.model = model
        self.vocab = vocab
        self.target_vocab = target_vocab
        self.seq = ModelSequence(model, lean)
        self.device = self.seq.device

    @property
    def lean_reason(self) -> str | None:
        return self.seq.lean_reason

    @property
    def uses_lean_path(self) -> bool:
        return self.seq.uses_lean_path

    def start(self, prefix_ids: list[int], capacity: int) -> None:
        self.seq.start(prefix_ids, capacity)

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: (n,) -> logits (vocab,) of the last position."""
        return self.seq.feed(ids)[: self.vocab]

    def propose(self, ids, k, sampling, generator, keep=None) -> Proposal:
        if k <= 0:
            return Proposal(torch.empty(0, dtype=torch.long, device=self.device))
        logits = self._forward(torch.tensor(ids[self.seq.length:], dtype=torch.long, device=self.device))
        tokens, probs, confidences = [], [], []
        for i in range(k):
            if sampling.greedy:
                if keep is None:
                    tok = logits.argmax().view(1)
                else:
                    q, tok = logits.softmax(-1).max(-1)
                    tok = tok.view(1)
            else:
                p = process_logits(logits, sampling)  # (vocab,)
                tok = sample(p, generator).view(1)
                probs.append(p)
                q = p[tok[0]]
            tokens.append(tok)
            if keep is not None:
                confidences.append(float(q))  # a host read: on a GPU one sync per drafted token
                if not keep(i + 1, confidences[-1]):
                    break
            if i + 1 < k:
                logits = self._forward(tok)
        out = torch.cat(tokens)
        conf = tuple(confidences)
        if sampling.greedy:
            return Proposal(out, confidences=conf)
        p = torch.stack(probs)  # (m, vocab)
        if self.target_vocab > self.vocab:
            p = torch.nn.functional.pad(p, (0, self.target_vocab - self.vocab))
        return Proposal(out, p, conf)

    def commit(self, valid_len: int) -> None:
        self.seq.crop(valid_len)
