"""Incremental detokenization: text for new tokens without re-decoding the whole output.

A token can end in the middle of a UTF-8 character, and some tokenizers render a token differently
depending on its left neighbour; so new text is decoded with a few tokens of left context and held
back while it ends in an incomplete character (the approach of vLLM and Hugging Face's TextStreamer).
The work per call depends on the window, never on the length of the output.
"""

from __future__ import annotations

LEFT_CONTEXT = 6


class IncrementalDetokenizer:
    def __init__(self, tokenizer, context_ids: list[int] | tuple[int, ...] = ()) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = list(context_ids[-LEFT_CONTEXT:])
        self.prefix = 0  # start of the decode window
        self.read = len(self.ids)  # tokens before this index have been turned into text

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def push(self, new_ids: list[int] | tuple[int, ...]) -> str:
        """Append tokens; return the text they complete (possibly empty, held back for now)."""
        self.ids.extend(new_ids)
        return self._advance(final=False)

    def flush(self) -> str:
        """Whatever text is still held back (e.g. a trailing incomplete character)."""
        return self._advance(final=True)

    def _advance(self, final: bool) -> str:
        if self.read >= len(self.ids):
            return ""
        before = self._decode(self.ids[self.prefix:self.read])
        full = self._decode(self.ids[self.prefix:])
        if len(full) <= len(before) and not final:
            return ""
        if full.endswith("\ufffd") and not final:
            return ""
        new = full[len(before):]
        # Keep a little left context for the next window, so the window never grows.
        self.prefix = max(self.read, len(self.ids) - LEFT_CONTEXT)
        self.read = len(self.ids)
        return new
