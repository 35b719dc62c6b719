"""A sampled k=2 step's work besides the passes (the draft's two tokens, the target's three distributions, the rule), as it was
(torch forms, the draft's rows widened to the vocabulary) against now (rows.c; the reduced head's rows as they are), with
SmolLM2's shapes (49,152 tokens, an 8,192-token draft head), and one plain sampled token each way:

    python devscripts/sampled_step.py
"""
import time, torch, statistics as st
from specdesk.core.sampling import SamplingConfig, process_logits, sample, make_generator
from specdesk.core.acceptance import verify_sampled
torch.set_num_threads(2)
V, H = 49152, 8192
cfg = SamplingConfig(temperature=0.7)
g = make_generator(torch.device("cpu"), 1)
head = torch.randperm(V, generator=torch.Generator().manual_seed(0))[:H]
tl = (torch.randn(3, V) * 3).bfloat16()
dl = [(torch.randn(H) * 3).bfloat16() for _ in range(2)]
def old_process(x): return (x.float() / cfg.temperature).softmax(-1)
def old_sample(p, gen=None):
    flat = p.reshape(-1, p.shape[-1]); cum = flat.cumsum(-1); total = cum[:, -1:]
    u = torch.rand(flat.shape[0], 1, generator=g, dtype=cum.dtype) * total
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cum, u, right=True).reshape(p.shape[:-1])
import specdesk.core.acceptance as acc
def old_step():
    ps, toks = [], []
    for d in dl:
        p = old_process(d); t = old_sample(p); ps.append(p); toks.append(head[t])
    p = torch.stack(ps); full = torch.zeros(2, V).index_copy_(1, head, p)
    return verify_sampled(old_process(tl), full, torch.stack(toks).view(-1), g)
def new_step():
    ps, toks, cols = [], [], []
    for d in dl:
        p = process_logits(d, cfg); t = sample(p, g); ps.append(p); cols.append(t.view(1)); toks.append(head[t].view(1))
    p = torch.stack(ps)
    return verify_sampled(process_logits(tl, cfg), p, torch.cat(toks), g, draft_ids=head, draft_pos=torch.cat(cols))
# old verify_sampled's sample is the new kernel one: patch it to the torch form for the old arm
def T(f, n=1500):
    xs = []
    for _ in range(n):
        t0 = time.perf_counter(); f(); xs.append(time.perf_counter() - t0)
    return round(st.median(xs) * 1e6, 1)
import specdesk.core.sampling as sm
for _ in range(3):
    acc.sample = old_sample; o = T(old_step)
    acc.sample = sm.sample; n = T(new_step)
    print("old", o, "us  new", n, "us per sampled k=2 step")
print("plain sampled token: old", T(lambda: old_sample(old_process(tl[:1]))), "new", T(lambda: sample(process_logits(tl[:1], cfg), g)))
pt = process_logits(tl, cfg); d0 = process_logits(dl[0], cfg)
print("process 3 rows", T(lambda: process_logits(tl, cfg)), "kernel softmax direct", T(lambda: __import__('specdesk.core.kernels', fromlist=['x']).softmax(tl, 0.7)))
print("process draft", T(lambda: process_logits(dl[0], cfg)), "sample draft", T(lambda: sample(d0, g)), "sample V", T(lambda: sample(pt[0], g)))
toks = head[:2]; pos = torch.tensor([0, 1]); p2 = torch.stack([d0, d0])
print("verify_sampled reduced", T(lambda: verify_sampled(pt, p2, toks, g, draft_ids=head, draft_pos=pos)))
from specdesk.core.acceptance import residual_distribution, accept_probability
print("residual reduced", T(lambda: residual_distribution(pt[0], p2[0], head)), "accept", T(lambda: accept_probability(pt[:2], p2, toks, pos)))
from specdesk.core import kernels
print("rand", T(lambda: torch.rand(1, 1, generator=g)), "sample_rows", T(lambda: kernels.sample_rows(pt[:1], torch.tensor([0.3]))))
