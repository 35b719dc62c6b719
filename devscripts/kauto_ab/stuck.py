"""The draft+lookup k=auto controller's pass costs (1-5 positions), draft cost, acceptance and speed factor after each
phase: 8 chat prompts quiet, twice beside a busy loop, three times quiet again (SmolLM2 q4 with its draft). Run before
the speed factor, its plain-pass cost stayed at 19.8 ms after the busy phases (docs/draft-notebook.md's figure); with it, 3.8-3.9:

    python devscripts/kauto_ab/stuck.py PATH/SmolLM2-135M-Instruct.Q4_1.gguf
"""

import sys, subprocess, specdesk
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite
G = sys.argv[1]
e = specdesk.load(G, "resources/models/smollm2-135m-instruct-draft", drafter="model", device="cpu", target_quant="q4")
e.warm_up()
prompts = [prompt_ids(e, p) for p in chat_suite(8)]
def state(c):
    return "v1-5 %s draft %.2f acc %s speed %.2f" % ([round((c.verify_cost(m) or 0)*1e3, 2) for m in range(1, 6)], (c.draft_cost or 0)*1e3, [round(a, 2) for a in c.acceptances(3)], getattr(c, "speed", 1.0))
for phase in ("quiet", "hog", "hog", "quiet", "quiet", "quiet"):
    hog = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: pass"]) if phase == "hog" else None
    try:
        toks = secs = drafted = 0
        for ids in prompts:
            for d in ("model+lookup",):
                r = e.generate(ids, drafter=d, k="auto", max_new_tokens=96)
                toks += r.stats.new_tokens; secs += r.stats.decode_seconds; drafted += r.stats.drafted
        c = e._adaptive[("model+lookup", "greedy")]
        print(phase, "%.0f tok/s drafted %d |" % (toks / secs, drafted), state(c), flush=True)
    finally:
        if hog: hog.kill()
