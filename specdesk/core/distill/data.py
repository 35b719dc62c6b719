"""Training data for a draft: the target's own replies to chat prompts, with its top-k distributions.

For every prompt the target answers (batched generation, greedy or at a temperature), and at every reply
position its raw logits are kept as the top ``topk`` token ids and log-probabilities (the soft labels of
forward-KL distillation, DistillSpec). A sample is the prompt's and the reply's token ids plus those labels for
the reply positions (the label of reply position j is the target's distribution for token j, given the prompt
and reply tokens before it). Generation yields :class:`DataProgress` events, like the decode loop.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from specdesk.core.distill import batchgen

TOPK = 64


@dataclass(frozen=True)
class DataProgress:
    split: str  # "train" or "held-out"
    done: int  # prompts answered
    total: int
    tokens: int  # reply tokens so far
    seconds: float


@dataclass
class Sample:
    prompt: list[int]
    reply: list[int]
    top_ids: torch.Tensor  # (len(reply), topk) int32: the target's top token ids at each reply position
    top_logp: torch.Tensor  # (len(reply), topk) float16: their log-probabilities (full softmax)
    temperature: float = 0.0

    def to_dict(self) -> dict:
        return {"prompt": self.prompt, "reply": self.reply, "top_ids": self.top_ids, "top_logp": self.top_logp,
                "temperature": self.temperature}

    @classmethod
    def from_dict(cls, d: dict) -> "Sample":
        return cls(d["prompt"], d["reply"], d["top_ids"], d["top_logp"], d.get("temperature", 0.0))


def chat_ids(tokenizer, text: str) -> list[int]:
    """A user message through the tokenizer's chat template (plain text for a model without one)."""
    if getattr(tokenizer, "chat_template", None):
        out = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True)
        if hasattr(out, "keys"):
            out = out["input_ids"]
        return [int(i) for i in out]
    return [int(i) for i in tokenizer(text)["input_ids"]]


@torch.inference_mode()
def answer(model, tokenizer, prompts: list[str], *, eos_ids: frozenset[int], max_new_tokens: int = 160,
           batch: int = 16, temperature: float = 0.0, seed: int = 0, topk: int = TOPK, split: str = "train",
           out: list[Sample] | None = None) -> Iterator[DataProgress]:
    """Let the target answer ``prompts`` in batches; append a :class:`Sample` per prompt to ``out``.

    A Llama-shaped target answers through :mod:`batchgen` (~4x faster than ``generate`` on the CPU); others through
    ``generate``. Greedy replies and labels are the same either way (tests/test_batchgen.py)."""
    out = [] if out is None else out
    device = next(model.parameters()).device
    pad = next(iter(sorted(eos_ids))) if eos_ids else 0
    t0 = time.perf_counter()
    tokens = 0
    gen = torch.Generator(device="cpu").manual_seed(seed)
    for b0 in range(0, len(prompts), batch):
        chunk = [chat_ids(tokenizer, p) for p in prompts[b0:b0 + batch]]
        batch_seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
        if batchgen.supported(model):
            res = batchgen.generate(model, chunk, max_new_tokens=max_new_tokens, eos_ids=eos_ids, pad=pad, topk=topk,
                                    temperature=temperature, generator=torch.Generator(device).manual_seed(batch_seed))
        else:
            torch.manual_seed(batch_seed)
            res = _generate(model, chunk, max_new_tokens=max_new_tokens, eos_ids=eos_ids, pad=pad, topk=topk,
                            temperature=temperature)
        for c, (reply, top_ids, top_logp) in zip(chunk, res):
            out.append(Sample(c, reply, top_ids, top_logp, temperature))
            tokens += len(reply)
        yield DataProgress(split, min(b0 + batch, len(prompts)), len(prompts), tokens, time.perf_counter() - t0)


def _generate(model, chunk: list[list[int]], *, max_new_tokens: int, eos_ids: frozenset[int], pad: int, topk: int,
              temperature: float) -> list[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """As :func:`batchgen.generate`, through Hugging Face's ``generate`` (any architecture)."""
    device = next(model.parameters()).device
    ids, mask = batchgen.pad_rows(chunk, pad, left=True)
    kw = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else \
        dict(do_sample=False, temperature=None, top_k=None, top_p=None)
    res = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=max_new_tokens,
                         eos_token_id=sorted(eos_ids) or None, pad_token_id=pad, output_logits=True,
                         return_dict_in_generate=True, **kw)
    new = res.sequences[:, ids.shape[1]:].cpu()
    logits = torch.stack(res.logits, dim=1)  # (B, new, V) raw logits at each generated position
    out = []
    for i in range(len(chunk)):
        reply = new[i].tolist()
        end = next((j + 1 for j, t in enumerate(reply) if t in eos_ids), len(reply))
        vals, idx = logits[i, :end].float().log_softmax(-1).topk(topk, dim=-1)
        out.append((reply[:end], idx.to(torch.int32).cpu(), vals.to(torch.float16).cpu()))
    return out
