"""Training the draft: forward KL to the target's top-k distributions on its own replies, held-out agreement.

Only the draft's own layers and final norm learn; the borrowed embedding and head stay frozen. Each step takes
``batch`` random replies (prompt as context, loss on reply positions only). The target's distribution at each
position is its top-k, restricted to the draft's head tokens and renormalised; the loss is the cross-entropy of
the draft's distribution against it (forward KL up to a constant).

Held-out agreement is teacher-forced: the share of reply positions where the draft's top token is the target's.
On the target's greedy replies it also gives greedy speculative decoding's accepted lengths exactly: a step that
starts at position i accepts the run of consecutive agreements from i (up to k), because accepted tokens are the
reply's own; so :func:`tokens_per_pass` at k=4 is what greedy decoding of these prompts would see (up to rounding
differences between batched and one-by-one passes).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import torch

from specdesk.core.distill.batchgen import pad_rows
from specdesk.core.distill.data import Sample
from specdesk.core.distill.draft import build_draft, own_state


def greedy_passes(ok, n: int, k: int, reached: list[int] | None = None, accepted: list[int] | None = None) -> int:
    """Target passes greedy decoding takes over a reply of n tokens drafting k per step, where ok(i, pos) says
    whether the i-th drafted token (0-based) of a step starting at reply position pos is the target's token.
    With ``reached``/``accepted`` (length k), counts per draft position the steps that drafted it with every
    earlier one accepted, and those that accepted it."""
    pos = passes = 0
    while pos < n:
        run = 0
        while run < k and pos + run < n and ok(run, pos):
            if reached is not None:
                reached[run] += 1
                accepted[run] += 1
            run += 1
        if reached is not None and run < k and pos + run < n:
            reached[run] += 1
        pos += run + 1
        passes += 1
    return passes


def tokens_per_pass(agree: list[bool], k: int) -> float:
    """Emitted tokens per target pass when greedy decoding drafts k tokens per step over these agreements."""
    return len(agree) / max(greedy_passes(lambda i, pos: agree[pos + i], len(agree), k), 1)


def choose_head(samples: list[Sample], size: int, vocab: int, always: set[int]) -> torch.Tensor | None:
    """The ``size`` tokens most frequent in the replies (plus ``always``, the stop tokens), sorted; None = all."""
    if size <= 0 or size >= vocab:
        return None
    counts = Counter()
    for s in samples:
        counts.update(s.reply)
    chosen = [t for t in always if t < vocab]
    for t, _ in counts.most_common():
        if len(chosen) >= size:
            break
        if t not in always:
            chosen.append(t)
    rest = iter(i for i in range(vocab) if i not in set(chosen))
    while len(chosen) < size:  # fewer distinct reply tokens than the head's size: fill in id order
        chosen.append(next(rest))
    return torch.tensor(sorted(chosen), dtype=torch.long)


def _batch(samples: list[Sample], device) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int]]]:
    """Right-padded inputs (prompt + reply[:-1]), mask, and each row's (first label position, reply length)."""
    ids, mask = pad_rows([s.prompt + s.reply[:-1] for s in samples], left=False)
    spans = [(len(s.prompt) - 1, len(s.reply)) for s in samples]
    return ids.to(device), mask.to(device), spans


class Trainer:
    def __init__(self, cfg, target, work, device: str) -> None:
        self.cfg = cfg
        self.work = work
        self.device = device
        self.bf16 = next(target.model.parameters()).dtype == torch.bfloat16
        self.train = [s for name in work.train_shards() for s in work.load_shard(name) if s.reply]
        self.held = [s for s in work.load_shard("held-out") if s.reply]
        self.train_tokens = sum(len(s.reply) for s in self.train)
        self.held_tokens = sum(len(s.reply) for s in self.held)
        self.step = 0
        self.elapsed = 0.0
        self.curve: list[tuple[int, float, float, float]] = []  # (step, seconds, agreement, tokens/pass at k=4)
        self.last_agreement: float | None = None
        self.per_position: list[float] = []
        vocab = int(target.model.config.vocab_size)
        ckpt = work.load_checkpoint() if cfg.resume else None
        if ckpt is not None:
            self.head_ids = ckpt["head_ids"]
        elif getattr(cfg, "init_from", None):  # a head or draft started from a draft keeps that draft's head tokens
            from safetensors import safe_open

            from specdesk.core.distill.draft import HEAD_IDS_KEY

            with safe_open(str(Path(cfg.init_from) / "model.safetensors"), "pt") as f:
                self.head_ids = f.get_tensor(HEAD_IDS_KEY) if HEAD_IDS_KEY in f.keys() else None
        else:
            self.head_ids = choose_head(self.train, cfg.head_vocab, vocab, set(target.eos_ids))
        self.draft = self._build(target)
        for p in self.draft.parameters():
            p.data = p.data.float() if p.requires_grad else p.data
        self.params = [p for n, p in self.draft.named_parameters() if p.requires_grad]
        self.opt = self._optimizer()
        self.rng = torch.Generator().manual_seed(cfg.seed + 17)
        pos = torch.full((vocab,), -1, dtype=torch.long)
        if self.head_ids is None:
            pos = torch.arange(vocab)
        else:
            pos[self.head_ids] = torch.arange(self.head_ids.numel())
        self.pos = pos.to(device)
        self.head_dev = self.head_ids.to(device) if self.head_ids is not None else None
        if ckpt is not None:
            self.draft.load_state_dict(ckpt["draft"], strict=False)
            self.opt.load_state_dict(ckpt["optimizer"])
            self.rng.set_state(ckpt["rng"])
            self.step, self.elapsed = ckpt["step"], ckpt["elapsed"]
            self.curve = [tuple(c) for c in ckpt["curve"]]
            self.per_position = ckpt.get("per_position", [])
            self.last_agreement = self.curve[-1][2] if self.curve else None

    def _build(self, target):
        return build_draft(target.model, self.cfg.layers, self.head_ids, init_from=getattr(self.cfg, "init_from", None))

    def _optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.params, lr=self.cfg.lr, weight_decay=0.0, betas=(0.9, 0.98))

    def _train_loss(self, pick: list[int]) -> torch.Tensor:
        """The loss on the training replies at indices ``pick``."""
        return self.loss([self.train[i] for i in pick])

    def curve_tuple(self) -> tuple[tuple[int, float, float], ...]:
        return tuple((s, t, a) for s, t, a, *_ in self.curve)

    @property
    def tokens_per_pass(self) -> float | None:
        return self.curve[-1][3] if self.curve else None

    def _autocast(self):
        if self.device.startswith("cuda"):
            return torch.autocast("cuda", dtype=torch.bfloat16)
        if self.bf16:  # the target (whose embeddings and head the draft borrows, frozen) answered in bfloat16
            return torch.autocast("cpu", dtype=torch.bfloat16)
        import contextlib

        return contextlib.nullcontext()

    def _logits(self, ids, mask):
        with self._autocast():
            out = self.draft.model(input_ids=ids, attention_mask=mask)
            return self.draft.lm_head(out.last_hidden_state).float()  # (B, T, K)

    def loss(self, samples: list[Sample]) -> torch.Tensor:
        ids, mask, spans = _batch(samples, self.device)
        logits = self._logits(ids, mask)
        total, count = 0.0, 0
        for i, (start, n) in enumerate(spans):
            s = samples[i]
            logq = logits[i, start:start + n].log_softmax(-1)  # (n, K)
            idx = self.pos[s.top_ids.to(self.device).long()]  # (n, topk) head positions, -1 outside the head
            p = s.top_logp.to(self.device).float().exp() * (idx >= 0)
            p = p / p.sum(-1, keepdim=True).clamp_min(1e-9)
            total = total - (p * logq.gather(-1, idx.clamp_min(0))).sum()
            count += n
        return total / max(count, 1)

    @torch.no_grad()
    def evaluate(self, k: int = 4) -> tuple[float, float, list[float]]:
        """Held-out agreement, greedy tokens per target pass at k, and per-position acceptance (positions 1..k)."""
        self.draft.eval()
        agree_all: list[bool] = []
        tpp_num, tpp_den = 0, 0
        reached = [0] * k
        accepted = [0] * k
        for b0 in range(0, len(self.held), 16):
            chunk = self.held[b0:b0 + 16]
            ids, mask, spans = _batch(chunk, self.device)
            logits = self._logits(ids, mask)
            for i, (start, n) in enumerate(spans):
                top = logits[i, start:start + n].argmax(-1)
                guess = self.head_dev[top] if self.head_dev is not None else top
                truth = chunk[i].top_ids[:, 0].to(self.device).long()
                agree = (guess == truth).tolist()
                agree_all += agree
                tpp_num += n
                tpp_den += greedy_passes(lambda i, pos: agree[pos + i], n, k, reached, accepted)
        self.draft.train()
        per_pos = [a / r if r else 0.0 for a, r in zip(accepted, reached)]
        return sum(agree_all) / max(len(agree_all), 1), tpp_num / max(tpp_den, 1e-9), per_pos

    def _lr(self) -> float:
        cfg = self.cfg
        frac = 0.0
        if cfg.steps:
            frac = max(frac, self.step / cfg.steps)
        if cfg.minutes:
            frac = max(frac, self.elapsed / (cfg.minutes * 60))
        warm = min(1.0, (self.step + 1) / 30)
        return cfg.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))

    def _done(self) -> bool:
        cfg = self.cfg
        return bool((cfg.steps and self.step >= cfg.steps) or (cfg.minutes and self.elapsed >= cfg.minutes * 60))

    def checkpoint(self) -> None:
        self.work.save_checkpoint({"draft": own_state(self.draft), "optimizer": self.opt.state_dict(),
                                   "rng": self.rng.get_state(), "step": self.step, "elapsed": self.elapsed,
                                   "curve": self.curve, "head_ids": self.head_ids, "per_position": self.per_position})

    def _measure(self) -> None:
        agreement, tpp, self.per_position = self.evaluate()
        self.last_agreement = agreement
        self.curve.append((self.step, round(self.elapsed, 1), round(agreement, 4), round(tpp, 4)))

    def run(self, cancel) -> Iterator:
        cfg = self.cfg
        if not self.train:
            from specdesk.core.errors import BadSetting

            raise BadSetting("no training data: the target gave no replies")
        if not self.curve:
            self._measure()  # the starting point of the learning curve
        self.draft.train()
        last_ckpt = time.perf_counter()
        loss_avg = None
        while not self._done() and not cancel.is_set():
            t0 = time.perf_counter()
            pick = torch.randint(0, len(self.train), (cfg.batch,), generator=self.rng).tolist()
            for g in self.opt.param_groups:
                g["lr"] = self._lr() * g.get("lr_scale", 1.0)
            loss = self._train_loss(pick)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.params, 1.0)
            self.opt.step()
            self.step += 1
            value = float(loss.detach())
            loss_avg = value if loss_avg is None else 0.9 * loss_avg + 0.1 * value
            if self.step % cfg.eval_every == 0:
                self._measure()
            self.elapsed += time.perf_counter() - t0
            if time.perf_counter() - last_ckpt >= cfg.checkpoint_s:
                self.checkpoint()
                last_ckpt = time.perf_counter()
            yield self._event(loss_avg)
        if not self.curve or self.curve[-1][0] != self.step:
            self._measure()
        self.checkpoint()
        yield self._event(loss_avg)

    def _event(self, loss):
        from specdesk.core.distill.pipeline import DistillEvent

        cfg = self.cfg
        fracs, etas = [], []
        per_step = self.elapsed / max(self.step, 1)
        if cfg.steps:
            fracs.append(self.step / cfg.steps)
            etas.append((cfg.steps - self.step) * per_step)
        if cfg.minutes:
            fracs.append(self.elapsed / (cfg.minutes * 60))
            etas.append(cfg.minutes * 60 - self.elapsed)
        frac = min(1.0, max(fracs))
        eta = max(0.0, min(etas))
        total = cfg.steps if cfg.steps and not cfg.minutes else None
        agree = f"{self.last_agreement:.3f}" if self.last_agreement is not None else "-"
        loss_text = f"{loss:.3f}" if loss is not None else "-"
        return DistillEvent("train", f"step {self.step}: loss {loss_text}, held-out agreement {agree}",
                            fraction=frac, step=self.step, total_steps=total, eta_s=eta, agreement=self.last_agreement,
                            loss=loss, tokens=self.train_tokens, elapsed_s=self.elapsed, curve=self.curve_tuple())
