"""The target's own phrases: an n-gram table of its replies, proposing where they are nearly always the same.

A chat model writes the same phrases again and again ("Here are some tips to", "I hope this helps!"). Counted over
the target's own replies (the data `specdesk distill` makes), the 1- to 4-token contexts after which the target
nearly always wrote one token give a continuation that costs no model pass to propose: a lookup per drafted token,
like prompt lookup's, but from what the target writes in general rather than from this context. Whatever it
proposes, verification keeps the output the target's own (a proposal is a guess, never a decision).

Kept: contexts seen at least ``min_count`` times whose most frequent next token had at least ``min_share`` of them
(SmolLM2-135M-Instruct's 1.5M reply tokens: 64,572 of 564,000 contexts at 6 and 0.6). A lookup takes the longest
kept context the sequence ends with. Contexts are stored as 64-bit hashes of their tokens (a collision, ~1 in 10^14
here, would only make a bad guess).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAX_N = 4
MIN_COUNT = 6
MIN_SHARE = 0.6
FILE = "phrases.safetensors"  # in a distilled draft's folder (`specdesk distill` writes it beside the weights)

_MASK = (1 << 64) - 1
_MUL = 0x100000001B3  # FNV-1a's 64-bit prime
_SEED = 0xCBF29CE484222325


def _mix(key: int, token: int) -> int:
    return ((key ^ (token + 1)) * _MUL) & _MASK


def context_keys(tail: Sequence[int], max_n: int = MAX_N) -> list[int]:
    """The keys of ``tail``'s last 1, 2, ... max_n tokens (the last token mixed in first)."""
    keys, key = [], _SEED
    for t in reversed(tail[-max_n:]):
        key = _mix(key, int(t))
        keys.append(key)
    return keys


class PhraseTable:
    """Kept contexts -> (next token, its share of the context's occurrences)."""

    def __init__(self, keys: np.ndarray, tokens: np.ndarray, shares: np.ndarray, *, max_n: int = MAX_N,
                 info: dict | None = None) -> None:
        self.keys = np.ascontiguousarray(keys, dtype=np.uint64)  # (E,)
        self.tokens = np.ascontiguousarray(tokens, dtype=np.int32)  # (E,)
        self.shares = np.ascontiguousarray(shares, dtype=np.uint8)  # (E,): share * 255, rounded down
        self.max_n = max_n
        self.info = dict(info or {})
        # a dict for lookups: ~0.3 us each where numpy's searchsorted on one key takes ~3
        self._next = dict(zip(self.keys.tolist(), self.tokens.tolist()))

    def __len__(self) -> int:
        return len(self._next)

    def resident_bytes(self) -> int:
        """The bytes this table holds in memory: its arrays, the lookup dict and the int objects in it (tokens from
        -5 to 256 are Python's shared ones). What the planner counts for it; tracemalloc agrees (tested)."""
        import sys

        # CPython allocates a one-digit int (|v| < 2**30) as the whole struct, 8-aligned (32 bytes where getsizeof
        # says 28); a longer one at its size
        small = -(-sys.getsizeof(1) // 8) * 8

        def size(v: int) -> int:
            return small if -(1 << 30) < v < (1 << 30) else sys.getsizeof(v)

        ints = sum(size(k) for k in self._next) + sum(size(t) for t in self._next.values() if not -5 <= t <= 256)
        return self.keys.nbytes + self.tokens.nbytes + self.shares.nbytes + sys.getsizeof(self._next) + ints

    def next_token(self, tail: Sequence[int]) -> int | None:
        """The next token after the longest kept context ``tail`` ends with, or None."""
        hit = None
        for key in context_keys(tail, self.max_n):
            tok = self._next.get(key)
            if tok is not None:
                hit = tok
        return hit

    def continuation(self, ids: Sequence[int], k: int) -> list[int]:
        """Up to k tokens, each the table's next token after the tokens before it (ids, then the ones proposed)."""
        out: list[int] = []
        tail = list(ids[-self.max_n:])
        for _ in range(k):
            tok = self.next_token(tail)
            if tok is None:
                break
            out.append(tok)
            tail = tail[1:] + [tok] if len(tail) >= self.max_n else tail + [tok]
        return out

    # ------------------------------------------------------------------ files

    def save(self, path: Path) -> None:
        from safetensors.numpy import save_file

        meta = {"max_n": str(self.max_n), **{k: str(v) for k, v in self.info.items()}}
        save_file({"keys": self.keys.view(np.int64), "tokens": self.tokens, "shares": self.shares}, str(path),
                  metadata=meta)
        from specdesk.core.userdirs import usual_mode

        usual_mode(Path(path))

    @classmethod
    def load(cls, path: Path) -> "PhraseTable":
        from safetensors import safe_open

        with safe_open(str(path), framework="numpy") as f:
            meta = dict(f.metadata() or {})
            keys, tokens, shares = f.get_tensor("keys"), f.get_tensor("tokens"), f.get_tensor("shares")
        max_n = int(meta.pop("max_n", MAX_N))
        info = {k: _number(v) for k, v in meta.items()}
        return cls(keys.view(np.uint64), tokens, shares, max_n=max_n, info=info)


def _number(text: str):
    """A metadata value as written (safetensors keeps strings): an int or a float where it reads as one."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def build(samples: Iterable[tuple[Sequence[int], Sequence[int]]], *, max_n: int = MAX_N, min_count: int = MIN_COUNT,
          min_share: float = MIN_SHARE) -> PhraseTable:
    """A table from (prompt, reply) token lists: the contexts of every reply token (its last max_n tokens, the
    prompt's last ones before the reply's first), counted with numpy (1.5M reply tokens: a few seconds)."""
    seqs = []
    n_replies = n_tokens = 0
    for prompt, reply in samples:
        if not reply:
            continue
        head = list(prompt[-max_n:])
        seq = [-1] * (max_n - len(head)) + head + list(reply)  # -1: before the sequence's start
        seqs.append(np.asarray(seq, dtype=np.int64))
        n_replies += 1
        n_tokens += len(reply)
    if not seqs:
        return PhraseTable(np.zeros(0, np.uint64), np.zeros(0, np.int32), np.zeros(0, np.uint8), max_n=max_n,
                           info={"replies": 0, "tokens": 0, "min_count": min_count, "min_share": min_share})
    all_keys, all_next = [], []
    for seq in seqs:
        m = len(seq) - max_n  # reply tokens: positions max_n .. len-1
        nxt = seq[max_n:]
        key = np.full(m, _SEED, dtype=np.uint64)
        for n in range(1, max_n + 1):
            prev = seq[max_n - n:len(seq) - n]  # the token n before each reply token
            live = prev >= 0
            key = (key ^ (prev + 1).astype(np.uint64)) * np.uint64(_MUL)  # wraps modulo 2^64, as _mix
            all_keys.append(key[live])
            all_next.append(nxt[live])
    keys = np.concatenate(all_keys)
    nxt = np.concatenate(all_next)
    # count (context, next token) pairs, then per context its total and its most frequent next token
    order = np.lexsort((nxt, keys))
    keys, nxt = keys[order], nxt[order]
    new_pair = np.ones(len(keys), dtype=bool)
    new_pair[1:] = (keys[1:] != keys[:-1]) | (nxt[1:] != nxt[:-1])
    starts = np.flatnonzero(new_pair)
    pair_keys, pair_next = keys[starts], nxt[starts]
    pair_count = np.diff(np.append(starts, len(keys)))
    new_key = np.ones(len(pair_keys), dtype=bool)
    new_key[1:] = pair_keys[1:] != pair_keys[:-1]
    group = np.cumsum(new_key) - 1  # each pair's context index
    totals = np.bincount(group, weights=pair_count).astype(np.int64)
    # the most frequent pair of each context (the smallest token id at a tie: lexsort's order, stable)
    by = np.lexsort((-pair_count, group))
    first = np.ones(len(by), dtype=bool)
    first[1:] = group[by][1:] != group[by][:-1]
    best = by[first]  # one pair index per context, in context order
    share = pair_count[best] / totals
    keep = (totals >= min_count) & (share >= min_share)
    info = {"replies": n_replies, "tokens": n_tokens, "min_count": min_count, "min_share": min_share}
    return PhraseTable(pair_keys[best][keep], pair_next[best][keep], np.floor(share[keep] * 255), max_n=max_n,
                       info=info)


def read(path: Path, remedy: str) -> PhraseTable:
    """The table in file ``path``; one that does not read raises BadModel, saying what to do (``remedy``)."""
    from specdesk.core.errors import BadModel

    try:
        return PhraseTable.load(path)
    except Exception as exc:  # safetensors' errors, a missing array, a bad header
        raise BadModel(f"{path} is not a readable phrase table ({exc}); {remedy}") from exc


def find(folder: Path) -> PhraseTable | None:
    """The phrase table in a draft's folder, or None where it has none. A file that does not read raises BadModel."""
    path = Path(folder) / FILE
    return read(path, "delete it, or rebuild the draft") if path.is_file() else None


def own_table_path(target_path: Path) -> Path:
    """Where `specdesk distill --phrases-only` keeps a target's table: the user's data folder, one file per target
    path (a moved or replaced model only loses the table's speed; verification keeps any output exact)."""
    import hashlib

    from specdesk.core import userdirs

    path = Path(target_path).resolve()
    key = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    return userdirs.data_dir() / "phrases" / f"{path.name.removesuffix('.gguf')}-{key}.safetensors"


def own_table_for(target: str, draft: str | None, drafter: str | None) -> Path | None:
    """The file of the table `specdesk distill --phrases-only` made for ``target``, where a request drafts with it:
    no draft given (after the bundled one was looked for), the drafter left out or "phrases", not the demo target.
    The engine loads it and the planner counts it by this one rule; None otherwise, or where there is none."""
    from specdesk.core.errors import SpecdeskError
    from specdesk.core.loading import resolve
    from specdesk.core.pairing import PHRASES

    if draft is not None or drafter not in (None, PHRASES) or target == "demo-target":
        return None
    try:
        path = own_table_path(resolve(target))
    except SpecdeskError:  # loading the target says what is wrong with it
        return None
    return path if path.is_file() else None


@dataclass(frozen=True)
class OwnTable:
    """What the model list says of a target's `specdesk distill --phrases-only` table."""

    path: Path
    contexts: int
    replies: int

    def describe(self) -> str:
        return f"{self.contexts:,} contexts from {self.replies:,} of its replies"


def own_table(target: str) -> OwnTable | None:
    """The table `specdesk distill --phrases-only` made for ``target`` where a load without a draft takes it (no draft
    distilled for the target, discovery.own_draft: that one comes first), read for the model list and the picker;
    else None. One that does not read raises BadModel."""
    from specdesk.core.discovery import own_draft

    path = own_table_for(target, None, None)
    if path is None or own_draft(target) is not None:
        return None
    table = read(path, "delete it, or run `specdesk distill --phrases-only` again")
    return OwnTable(path, len(table), int(table.info.get("replies", 0)))


_RESIDENT: dict[tuple, int] = {}


def resident_bytes(where: Path) -> int:
    """The memory the phrase table in folder ``where`` (or the table file ``where``) takes once loaded (0 where there
    is none, or one that does not read: loading says so), remembered per file (the planner asks for every setting it
    tries)."""
    path = Path(where) / FILE if Path(where).is_dir() else Path(where)
    try:
        st = path.stat()
    except OSError:
        return 0
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _RESIDENT:
        try:
            _RESIDENT[key] = PhraseTable.load(path).resident_bytes()
        except Exception:  # a broken file: loading the draft reports it in one line
            _RESIDENT[key] = 0
    return _RESIDENT[key]


def work_dir_samples(folder: Path) -> Iterator[tuple[list[int], list[int]]]:
    """(prompt, reply) of every training reply a `specdesk distill` work folder holds (its data shards)."""
    from specdesk.core.distill.workdir import WorkDir

    work = WorkDir(folder)
    for name in work.train_shards():
        for s in work.load_shard(name):
            yield s.prompt, s.reply


def from_work_dirs(dirs: Iterable[Path], **settings) -> PhraseTable:
    """A table from the training replies of `specdesk distill` work folders."""
    return build((pair for d in dirs for pair in work_dir_samples(d)), **settings)
