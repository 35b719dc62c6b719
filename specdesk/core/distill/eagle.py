"""Training an EAGLE head (core/eagle.py) on the target's own replies and hidden states.

Data: the same shards as a draft's (the target's replies and top-k log-probabilities), plus the target's final
hidden state at every position, computed once by a teacher-forced pass of the target's lean decoder (the very
features the drafter reads at run time) and cached in the work folder.

Loss, for a sample with tokens S (prompt then reply) and features f: row j reads (f_j, S[j+1]); at step 1 its
output predicts S[j+2] and estimates f_{j+1}. "Training-time test" (EAGLE-3): step s+1 reads the head's own
step-s estimate with the true next token (drafting goes on only while drafts are right, so the true token is
what the head would see), and attends to the rows built from real features up to j plus its own earlier steps,
exactly the rows it would see while drafting. Every step's distribution is fitted to the target's (forward KL on
its top-k, restricted to the head's tokens) and step 1's estimate to f_{j+1} (smooth L1, as EAGLE).

Held-out figures simulate greedy drafting exactly the same way: with the true tokens as inputs, step s at row j
is what drafting from j would compute at its s-th token, so a run of agreements from j gives the accepted length.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from specdesk.core.distill.batchgen import pad_rows
from specdesk.core.distill.draft import FC, build_eagle
from specdesk.core.distill.layers import head_shape, rotary_qkv
from specdesk.core.distill.train import Trainer, greedy_passes
from specdesk.core.errors import BadSetting


@torch.inference_mode()
def target_features(target_model, samples) -> list[torch.Tensor]:
    """The target's final hidden state (after its final norm, what its head reads) at every position of prompt +
    reply, float16: one batched teacher-forced pass, right-padded (a causal model's real positions never see the
    padding after them). Batched by 16, SmolLM2 in bfloat16 gives ~22 replies/s on 2 Xeon cores, one lean decoder
    per reply ~8."""
    device = next(target_model.parameters()).device
    seqs = [s.prompt + s.reply for s in samples]
    ids, mask = pad_rows(seqs, left=False)
    h = target_model.model(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False).last_hidden_state
    return [h[i, :len(q)].to("cpu", torch.float16).clone() for i, q in enumerate(seqs)]


def unrolled_logits(draft, feats: torch.Tensor, toks: torch.Tensor, steps: int):
    """feats (B, N, H): f_j; toks (B, N): S[j+1] (padded). Returns per step s = 1..steps the head's logits
    (B, N, K) of row j's s-th draft (predicting S[j+s+1]), and step 1's feature estimates (B, N, H)."""
    shape = nh, nkv, hd = head_shape(draft.config)
    scale = hd ** -0.5
    emb = draft.model.embed_tokens.weight
    fc = getattr(draft, FC)
    B, N, _ = feats.shape
    x = fc(torch.cat([feats, emb[toks]], dim=-1))
    causal = torch.ones(N, N, dtype=torch.bool, device=x.device).tril()
    layers = list(draft.model.layers)
    keys: list[list[torch.Tensor]] = [[] for _ in layers]  # per layer, per step: (B, nh, N, hd)
    values: list[list[torch.Tensor]] = [[] for _ in layers]
    outs, first = [], None
    for s in range(steps):
        cos, sin = draft.model.rotary_emb(x, (torch.arange(N, device=x.device) + s)[None])  # (1, N, hd)
        cos, sin = cos[:, None], sin[:, None]
        for li, layer in enumerate(layers):
            att, mlp = layer.self_attn, layer.mlp
            q, k, v = rotary_qkv(att, layer.input_layernorm(x), cos, sin, shape)
            keys[li].append(k.repeat_interleave(nh // nkv, dim=1))
            values[li].append(v.repeat_interleave(nh // nkv, dim=1))
            ks, vs = keys[li], values[li]
            scores = [(q @ ks[0].transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))]  # real rows <= j
            scores += [(q * ks[b]).sum(-1, keepdim=True) * scale for b in range(1, s + 1)]  # its own earlier steps
            p = torch.cat(scores, dim=-1).softmax(-1)
            o = p[..., :N] @ vs[0]
            for b in range(1, s + 1):
                o = o + p[..., N + b - 1:N + b] * vs[b]
            x = x + att.o_proj(o.transpose(1, 2).reshape(B, N, nh * hd))
            x = x + mlp(layer.post_attention_layernorm(x))
        g = draft.model.norm(x)
        outs.append(draft.lm_head(g).float())
        if s == 0:
            first = g
        if s + 1 < steps:  # row j's next input: its own estimate, and the true token S[j+s+2]
            nxt = torch.cat([toks[:, s + 1:], toks[:, -1:].expand(-1, s + 1)], dim=1)
            x = fc(torch.cat([g, emb[nxt]], dim=-1))
    return outs, first


class EagleTrainer(Trainer):
    steps_unrolled = 3
    feature_shard = 512  # replies per cached features file
    reg_weight = 1.0

    def __init__(self, cfg, target, work, device: str) -> None:
        super().__init__(cfg, target, work, device)
        self.features: dict[str, list[torch.Tensor]] = {}
        if cfg.init_from:
            # Started from a trained draft: no feature regression (its outputs are not the target's features, and
            # pulling them there undid the draft: held-out agreement 0.355 -> 0.258 in 50 steps at lr 1e-3, SmolLM2);
            # the unrolled steps' losses teach it to use its own estimates (as EAGLE-3 does without regression).
            self.reg_weight = 0.0

    def _build(self, target):
        return build_eagle(target.model, self.head_ids, layers=self.cfg.layers, init_from=self.cfg.init_from)

    def _optimizer(self) -> torch.optim.Optimizer:
        if not self.cfg.init_from:
            return super()._optimizer()
        # Started from a draft, the fusion layer (at [0 | I]) moves 10x slower: Adam moves every weight about lr per
        # step whatever its gradient, and at the draft's rate the zero feature half filled with noise (agreement
        # 0.355 -> 0.330 in 50 steps at lr 2e-4, SmolLM2)
        fc = getattr(self.draft, FC).weight
        rest = [p for p in self.params if p is not fc]
        return torch.optim.AdamW([{"params": rest}, {"params": [fc], "lr_scale": 0.1}], lr=self.cfg.lr,
                                 weight_decay=0.0, betas=(0.9, 0.98))

    def _train_loss(self, pick: list[int]) -> torch.Tensor:
        return self.loss([self.train[i] for i in pick], [self.features["train"][i] for i in pick])

    def compute_features(self, target, cancel) -> Iterator[tuple[int, int]]:
        """Load the cached features or compute them (yielding (done, total) samples). Cached in the work folder
        in shards of ``feature_shard`` replies, each written as soon as it is done (a cancelled run keeps them),
        and read back memory-mapped: the page cache holds them, not the process (SmolLM2's 7,684 replies are
        1.4 GB of features; an 8B target's hidden size makes that ~10 GB)."""
        old = self.work.root / "features.pt"  # one file, as runs before the shards wrote it
        if old.exists():
            feats = torch.load(old, mmap=True, weights_only=False)
            if len(feats["train"]) == len(self.train) and len(feats["held"]) == len(self.held):
                self.features = feats
                return
        total = len(self.train) + len(self.held)
        per = self.feature_shard
        shards = [(split, i, data[b:b + per]) for split, data in (("held", self.held), ("train", self.train))
                  for i, b in enumerate(range(0, len(data), per))]
        done = 0
        for split, i, part in shards:
            if self.work.features_path(split, i).exists():
                done += len(part)
                continue
            feats: list[torch.Tensor] = []
            for b0 in range(0, len(part), 16):
                if cancel.is_set():
                    return
                feats += target_features(target.model, part[b0:b0 + 16])
                yield done + len(feats), total
            self.work.save_features(split, i, feats)
            done += len(part)
        self.features = {"held": [], "train": []}
        for split, i, part in shards:
            feats = self.work.load_features(split, i)
            if len(feats) != len(part):
                raise BadSetting(f"{self.work.features}: {split} shard {i} holds {len(feats)} replies' features, "
                                 f"not {len(part)}; delete the folder to compute them again")
            self.features[split] += feats

    def _inputs(self, samples, feats):
        """(B, N, H) features f_j, (B, N) tokens S[j+1], N = the longest sample's length - 1."""
        n = max(len(s.prompt) + len(s.reply) - 1 for s in samples)
        f = torch.zeros(len(samples), n, feats[0].shape[-1])
        t = torch.zeros(len(samples), n, dtype=torch.long)
        for b, (s, fs) in enumerate(zip(samples, feats)):
            seq = s.prompt + s.reply
            f[b, :len(seq) - 1] = fs[:len(seq) - 1].float()
            t[b, :len(seq) - 1] = torch.tensor(seq[1:])
        return f.to(self.device), t.to(self.device)

    def loss(self, samples, feats) -> torch.Tensor:
        f, t = self._inputs(samples, feats)
        with self._autocast():
            outs, first = unrolled_logits(self.draft, f, t, self.steps_unrolled)
        total, count, reg = 0.0, 0, 0.0
        for b, s in enumerate(samples):
            p, n = len(s.prompt), len(s.reply)
            idx = self.pos[s.top_ids.to(self.device).long()]  # (n, topk)
            prob = s.top_logp.to(self.device).float().exp() * (idx >= 0)
            prob = prob / prob.sum(-1, keepdim=True).clamp_min(1e-9)
            for step, logits in enumerate(outs, start=1):
                r0 = max(0, step - 1)  # reply index r is predicted by row j = r + p - 1 - step >= 0
                rows = torch.arange(r0, n, device=self.device) + p - 1 - step
                logq = logits[b, rows].log_softmax(-1)
                total = total - (prob[r0:] * logq.gather(-1, idx[r0:].clamp_min(0))).sum() / step
                count += (n - r0) / step
            rows = torch.arange(p - 1, p + n - 2, device=self.device)  # step 1's estimate of f_{j+1}
            if rows.numel():
                reg = reg + F.smooth_l1_loss(first[b, rows].float(), f[b, rows + 1], reduction="sum") / f.shape[-1]
        return total / max(count, 1) + self.reg_weight * reg / max(count, 1)

    @torch.no_grad()
    def evaluate(self, k: int = 4) -> tuple[float, float, list[float]]:
        """Held-out agreement at the first drafted token, greedy tokens per target pass at k, per-position
        acceptance; drafting from every reply position simulated as above (true tokens, own estimates)."""
        self.draft.eval()
        first_agree, first_n = 0, 0
        tpp_num, tpp_den = 0.0, 0.0
        reached, accepted = [0] * k, [0] * k
        for b0 in range(0, len(self.held), 8):
            samples = self.held[b0:b0 + 8]
            f, t = self._inputs(samples, self.features["held"][b0:b0 + 8])
            with self._autocast():
                outs, _ = unrolled_logits(self.draft, f, t, k)
            for b, s in enumerate(samples):
                p, n = len(s.prompt), len(s.reply)
                truth = s.top_ids[:, 0].to(self.device).long()  # (n,)
                # ok[step][r]: drafting from reply position r, the step-th draft equals the target's token r+step-1
                ok = []
                for step, logits in enumerate(outs, start=1):
                    r = torch.arange(0, n, device=self.device)
                    valid = r + step - 1 < n
                    rows = (r + p - 2).clamp(max=logits.shape[1] - 1)
                    guess = logits[b, rows].argmax(-1)
                    guess = self.head_dev[guess] if self.head_dev is not None else guess
                    want = truth[(r + step - 1).clamp(max=n - 1)]
                    ok.append(((guess == want) & valid).tolist())
                first_agree += sum(ok[0])
                first_n += n
                tpp_num += n
                tpp_den += greedy_passes(lambda i, pos: ok[i][pos], n, k, reached, accepted)
        self.draft.train()
        per_pos = [a / r if r else 0.0 for a, r in zip(accepted, reached)]
        return first_agree / max(first_n, 1), tpp_num / max(tpp_den, 1e-9), per_pos
