"""Sibling trees: the draft's runner-up tokens checked beside its chain, in the same target pass.

A chain drafts d_1..d_m; at depth i the draft has also ranked other tokens. A tree of widths (w_1, w_2, ...)
adds the draft's next w_i - 1 choices at depth i as leaves: each sits at the position of d_i and sees the
committed tokens and d_1..d_{i-1}, as d_i does. The target runs the chain and the leaves in one pass (a tree
attention mask); greedy verification walks the chain while the target agrees, and where it first disagrees,
at depth i, the target's token t may be one of depth i's leaves: then that leaf was computed with the right
context, its logits give one more token (the bonus after t), and its keys and values move into place. Without
the leaf, t is still emitted (as the correction), so a leaf only ever adds that one bonus token: the output is
the target's greedy decoding either way.

When it pays: where a pass over 9-10 positions costs about what one over 5 does (expected on a GPU, where a
pass reads the weights once for many positions, not measured here: no GPU; a CPU whose few-row products are
slow anyway: SmolLM2-135M on 2 cores with F.linear, 49 ms against 51-58 ms, where a tree of 4,2
took k=auto from 1.11x to 1.22x of plain decoding). Where passes over more positions cost more (the same CPU
with core/fewrows.py's faster one- to five-row products) it does not, so a chain stays the default and a tree
is asked for (``tree="4,2"``, ``--tree 4,2``, the app's Tree choice). The runner-ups come free from the draft's
logits. Greedy only: sampled verification of several candidates per position needs a different rule
(SpecInfer's), so sampled decoding drafts a plain chain.

Layout of one pass (n = 1 + m + leaves): row 0 the last committed token, rows 1..m the chain, then each
depth's leaves in depth order. ``depths`` is a row's position offset from row 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from specdesk.core.errors import BadSetting

if TYPE_CHECKING:
    import torch

MAX_WIDTH = 8
# the shape measured on SmolLM2-135M (docs/draft-notebook.md, "Sibling trees"): bench's tree rows, the app's choice
SUGGESTED = (4, 2)


def parse_widths(text: str | tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """"4,2" -> (4, 2); "" or "none" -> () (a plain chain). Raises ValueError on anything else."""
    if isinstance(text, (tuple, list)):
        widths = tuple(int(w) for w in text)
    else:
        text = text.strip().lower()
        if text in ("", "none", "off", "chain"):
            return ()
        try:
            widths = tuple(int(part) for part in text.split(","))
        except ValueError:
            raise ValueError(f"{text!r} is not a comma-separated list of whole numbers") from None
    if any(not 1 <= w <= MAX_WIDTH for w in widths):
        raise ValueError(f"each depth takes 1 to {MAX_WIDTH} candidates, got {widths_text(widths)}")
    while widths and widths[-1] == 1:  # trailing 1s are the chain anyway
        widths = widths[:-1]
    return widths


def leaf_count(widths: tuple[int, ...], k: int) -> int:
    """Leaves a tree adds to a step drafting k tokens: the most extra positions a verify pass holds."""
    return sum(w - 1 for w in widths[:k])


def checked_widths(value: str | tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """:func:`parse_widths` for a value a user gave: a bad one is a one-line BadSetting."""
    try:
        return parse_widths(value)
    except (TypeError, ValueError) as e:
        raise BadSetting(f"tree widths: {e} (e.g. 4,2, or none)") from None


def widths_text(widths: tuple[int, ...]) -> str:
    """(4, 2) -> "4,2" (the form ``parse_widths`` reads); () -> ""."""
    return ",".join(map(str, widths))


@dataclass
class TreeLayout:
    tokens: torch.Tensor  # (n,) int64: last committed token, the chain, the leaves
    depths: torch.Tensor  # (n,) int64: position offset of each row from row 0
    allowed: torch.Tensor  # (n, n) bool: the fed rows each row attends to (its ancestors and itself)
    leaf_depth: list[int]  # per leaf (row 1 + m + j): the chain depth (1-based) it stands beside
    leaf_tokens: list[int]


def layout(last: torch.Tensor, chain: torch.Tensor, leaves: tuple[torch.Tensor, ...]) -> TreeLayout:
    """last (1,), chain (m,), leaves[i] (w_i - 1,) the runner-ups at depth i + 1 (len(leaves) <= m)."""
    import torch  # here, not at the top: the command line's parser reads this module's shapes (no torch: -1.8 s)

    m = int(chain.shape[0])
    counts = [int(t.shape[0]) for t in leaves]
    n = 1 + m + sum(counts)
    device = chain.device
    tokens = torch.cat([last, chain, *leaves]) if counts else torch.cat([last, chain])
    leaf_depth = [i + 1 for i, c in enumerate(counts) for _ in range(c)]
    depths = torch.tensor(list(range(m + 1)) + leaf_depth, dtype=torch.long, device=device)
    allowed = torch.zeros(n, n, dtype=torch.bool)
    allowed[: m + 1, : m + 1] = torch.ones(m + 1, m + 1, dtype=torch.bool).tril()
    for j, d in enumerate(leaf_depth):
        row = 1 + m + j
        allowed[row, :d] = True  # the last committed token and d_1..d_{d-1}
        allowed[row, row] = True
    return TreeLayout(tokens, depths, allowed.to(device), leaf_depth,
                      torch.cat(leaves).tolist() if counts else [])


def verify_greedy_tree(target_argmax: list[int], chain: list[int], tree: TreeLayout) -> tuple[int, int, list[int],
                                                                                                int | None]:
    """(accepted chain tokens, accepted in all, emitted tokens, row of the kept leaf or None).

    target_argmax: (n,) the target's argmax after each row of ``tree``; chain: the m drafted tokens."""
    m = len(chain)
    a = 0
    while a < m and target_argmax[a] == chain[a]:
        a += 1
    if a == m:
        return a, a, chain + [target_argmax[m]], None
    want = target_argmax[a]  # the target's token at depth a + 1
    for j, (d, tok) in enumerate(zip(tree.leaf_depth, tree.leaf_tokens)):
        if d == a + 1 and tok == want:
            row = 1 + m + j
            return a, a + 1, chain[:a] + [want, target_argmax[row]], row
    return a, a, chain[:a] + [want], None
