"""The target model's side of the loop: prefill once, verify k+1 tokens per step, roll back.

The sequence runs on fastdraft.LeanDecoder when the architecture allows (the same numbers as
transformers' forward at a third less time per call on the demo pair; tests hold it to greedy parity
with ``generate``), else through transformers with a preallocated cache (core/sequence.py).
"""

from __future__ import annotations

import torch

from specdesk.core.sequence import ModelSequence


class TargetRunner:
    def __init__(self, model, vocab: int, lean: bool = True) -> None:
        self.model = model
        self.vocab = vocab  # the tokenizer's vocabulary: logits past it are padding rows
        self.seq = ModelSequence(model, lean)
        self.device = self.seq.device

    @property
    def lean_reason(self) -> str | None:
        return self.seq.lean_reason

    @property
    def uses_lean_path(self) -> bool:
        return self.seq.uses_lean_path

    def prefill(self, ids: list[int], capacity: int) -> int:
        """Fill the KV cache with ``ids`` (all committed tokens but the last); returns how many of them were kept
        from the last generation instead of read (see :meth:`remember`)."""
        return self.seq.start(ids, capacity)

    def remember(self, ids: list[int]) -> None:
        """The generation is over, ``ids`` its committed sequence: keep the cache for a next prompt that starts so."""
        self.seq.remember(ids)

    def verify(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens: (m,) = last committed token + drafts -> logits (m, vocab) for the next position of each."""
        return self.seq.feed(tokens, every=True)[:, : self.vocab]

    def verify_ids(self, tokens: list[int]) -> torch.Tensor:
        """As :meth:`verify` for the tokens as ints (the decode loop's form)."""
        logits = self.seq.feed_ids(tokens, every=True)
        return logits if logits.shape[-1] == self.vocab else logits[:, : self.vocab]

    def verify_top_ids(self, tokens: list[int]) -> list[int]:
        """Greedy's reading of :meth:`verify_ids`: each position's argmax over the vocabulary, as ints."""
        return self.seq.feed_ids_top(tokens, every=True, limit=self.vocab)[0]

    @property
    def takes_trees(self) -> bool:
        """Whether this sequence verifies token trees now (the lean decoder only)."""
        return self.seq.decoder is not None

    def verify_tree(self, tree) -> torch.Tensor:
        """A tree.TreeLayout -> logits (n, vocab) after each of its rows."""
        return self.seq.decoder.forward_tree(tree.tokens, tree.depths, tree.allowed)[:, : self.vocab]

    def settle_tree(self, fed: int, kept: int, leaf_row: int | None) -> None:
        """After a tree of ``fed`` rows: keep row 0 and the first ``kept`` chain rows, then the leaf at
        ``leaf_row`` (moved to the slot after them) when one was accepted."""
        dec = self.seq.decoder
        p0 = dec.length - fed
        if leaf_row is not None:
            dec.adopt(p0 + leaf_row, p0 + kept + 1)
            kept += 1
        dec.crop(p0 + kept + 1)

    def rollback(self, n: int) -> None:
        """Forget the last n cached positions (rejected drafts); called after every verify (n may be 0)."""
        self.seq.crop(self.seq.length - n)

    @property
    def cache_len(self) -> int:
        return self.seq.length

    def kv_reserved_bytes(self) -> int:
        return self.seq.kv_reserved_bytes()

    def kv_bytes(self) -> int:
        return self.seq.kv_bytes()
