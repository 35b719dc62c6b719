"""Top-k and top-p sampling on a CPU in rows.c's calls (shipped: sd_process_bf16 for process_logits, and the draft's
chain and the one-call verification with them) against torch's form (sort, cumsum, scatter; the draft's chain and
the verification through the general forms, as at a temperature alone before), in one process:

    python devscripts/sampling_filters.py ab GGUF ROUNDS    # plain, draft k=1, k=auto and draft+lookup on the bench's
                                                            # 8 chat prompts at 0.7 alone, with top_p 0.9 and with
                                                            # top_k 40, both forms per prompt (which first alternates)

q4 target, the bundled draft, 96 new tokens. The two forms keep the same tokens but for which of tied tokens sits at
the top-p boundary, so their replies may part; tokens/s is what is compared.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import specdesk
from specdesk.core import kernels
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite
from specdesk.core.sampling import SamplingConfig

DRAFT = str(Path(__file__).resolve().parent.parent / "resources/models/smollm2-135m-instruct-draft")
NEW_PROCESS, NEW_ONE_CALL = kernels.process, SamplingConfig.one_call
CONFIGS = {"T=0.7": {}, "T=0.7 top_p=0.9": {"top_p": 0.9}, "T=0.7 top_k=40": {"top_k": 40}}
METHODS = [("plain", {"drafter": "none"}), ("k=1", {"drafter": "model", "k": 1}),
           ("k=auto", {"drafter": "model", "k": "auto"}), ("draft+lookup", {"drafter": "model+lookup", "k": "auto"})]


def use(form: str) -> None:
    """rows.c's forms ("c", shipped) or torch's ("torch": process_logits' torch code, and the one-call paths at a
    temperature alone only)."""
    old = form == "torch"
    kernels.process = (lambda *a: None) if old else NEW_PROCESS
    SamplingConfig.one_call = property(lambda s: not s.greedy and s.top_k == 0 and s.top_p >= 1.0) if old \
        else NEW_ONE_CALL


def ab(gguf: str, rounds: int) -> None:
    e = specdesk.load(gguf, DRAFT, drafter="model", device="cpu", target_quant="q4")
    e.reuse_cache = False
    e.warm_up()
    prompts = [prompt_ids(e, p) for p in chat_suite(8)]
    tot: dict = defaultdict(lambda: [0, 0.0])
    for rnd in range(rounds):
        for pi, ids in enumerate(prompts):
            for form in (["c", "torch"] if (rnd + pi) % 2 == 0 else ["torch", "c"]):
                use(form)
                for cfg, extra in CONFIGS.items():
                    for name, kw in METHODS:
                        r = e.generate(ids, max_new_tokens=96, temperature=0.7, seed=pi + 100 * rnd, **extra, **kw)
                        tot[(form, cfg, name)][0] += r.stats.new_tokens
                        tot[(form, cfg, name)][1] += r.stats.decode_seconds
    use("c")
    print(f"{rounds} rounds x 8 chat prompts, pooled tokens/s (x plain of the same form and sampling)")
    for cfg in CONFIGS:
        for name, _ in METHODS:
            row = []
            for form in ("torch", "c"):
                a, b = tot[(form, cfg, name)]
                pa, pb = tot[(form, cfg, "plain")]
                row.append(f"{form} {a / b:6.1f} ({a / b / (pa / pb):.3f}x)")
            print(f"{cfg:16s} {name:12s} " + "  ".join(row))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "ab":
        ab(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)
