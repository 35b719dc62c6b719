"""Can this draft serve this target? Same token -> id mapping over the shared vocabulary, same special tokens.

When not, say exactly why: the first token id whose text differs, with both models' text for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdesk.core.errors import IncompatibleDraft


@dataclass(frozen=True)
class Compatibility:
    ok: bool
    reason: str = ""
    shared_vocab: int = 0
    first_mismatch: int | None = None

    def raise_if_bad(self) -> None:
        if not self.ok:
            raise IncompatibleDraft(self.reason)


def _id_to_token(tokenizer, n: int) -> list[str | None]:
    table: list[str | None] = [None] * n
    for tok, i in tokenizer.get_vocab().items():
        if 0 <= i < n:
            table[i] = tok
    return table


def _shown(tokenizer, token_id: int, token: str | None) -> str:
    if token is None:
        return "no token"
    text = tokenizer.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    return f"{token!r} (text {text!r})" if text != token else repr(token)


def check_tokenizers(target_tok, draft_tok, target_name: str = "target", draft_name: str = "draft") -> Compatibility:
    """Compare two tokenizers; the result's reason is one line naming the first difference."""
    for role in ("eos", "bos"):
        t_id = getattr(target_tok, f"{role}_token_id")
        d_id = getattr(draft_tok, f"{role}_token_id")
        if t_id != d_id:
            t_tok = getattr(target_tok, f"{role}_token")
            d_tok = getattr(draft_tok, f"{role}_token")
            label = "end-of-sequence" if role == "eos" else "beginning-of-sequence"
            return Compatibility(False, f"incompatible draft: different {label} token: {target_name} uses "
                                        f"{t_tok!r} (id {t_id}), {draft_name} uses {d_tok!r} (id {d_id})")
    n = min(len(target_tok), len(draft_tok))
    t_table, d_table = _id_to_token(target_tok, n), _id_to_token(draft_tok, n)
    for i in range(n):
        if t_table[i] != d_table[i]:
            return Compatibility(
                False,
                f"incompatible draft: token id {i} is {_shown(target_tok, i, t_table[i])} in {target_name} "
                f"but {_shown(draft_tok, i, d_table[i])} in {draft_name}",
                shared_vocab=n, first_mismatch=i)
    return Compatibility(True, shared_vocab=n)
