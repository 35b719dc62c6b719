"""How close a quantized model stays to its float32 self: greedy replies of the float32 model, teacher-forced through
each quantization, and the share of positions whose next token (argmax) agrees, with the mean KL divergence of the
next-token distributions (nats a token, float32's against the quantized one's):

    python devscripts/quant_agreement.py TARGET [QUANTS] [--prompts N] [--tokens T]

TARGET: a float folder or GGUF file (loaded as float32 for the reference); QUANTS: comma-separated, default q4,q8.
The held-out chat prompts of the bench (``chat_suite``) through the target's chat template; every model runs its
Hugging Face forward over whole sequences (not the lean decoder), on the CPU. Written in the twenty-seventh sitting
(q8: `docs/draft-notebook.md`), where SmolLM2-135M-Instruct's Q4_1 weights gave q4 0.976 (KL 0.0033) and q8 0.966 (0.0043) over
8 prompts and 64 tokens.
"""

from __future__ import annotations

import argparse

import torch

import specdesk
from specdesk.core.bench.suite import chat_suite
from specdesk.core.loading import load_model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("target")
    p.add_argument("quants", nargs="?", default="q4,q8")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--tokens", type=int, default=64)
    args = p.parse_args()
    ref = specdesk.load(args.target, None, drafter="none", device="cpu", target_quant="none")
    seqs = []
    for prompt in chat_suite(args.prompts):
        ids = ref.chat_ids([{"role": "user", "content": prompt.text}])
        seqs.append((ids, ref.generate(ids, max_new_tokens=args.tokens).token_ids))
    for quant in args.quants.split(","):
        model = load_model(args.target, quant, device="cpu").model
        agree = total = 0
        kl = 0.0
        for ids, out in seqs:
            full = torch.tensor([ids + out])
            with torch.no_grad():
                a = model(full).logits[0, len(ids) - 1:-1].float()
                b = ref.target.model(full).logits[0, len(ids) - 1:-1].float()
            agree += int((a.argmax(-1) == b.argmax(-1)).sum())
            total += len(out)
            kl += float(torch.nn.functional.kl_div(a.log_softmax(-1), b.log_softmax(-1), log_target=True,
                                                   reduction="sum"))
        print(f"{quant}: next-token agreement with float32 {agree / total:.4f} over {total} positions, "
              f"mean KL {kl / total:.5f} nats a token")


if __name__ == "__main__":
    main()
