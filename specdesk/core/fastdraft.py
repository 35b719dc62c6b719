"""A lean forward pass for Llama-family models, used by the draft and by the target.

The draft runs k times per step and the target once, each over a handful of positions, so fixed
per-call cost decides the speed. transformers' generic forward spends most of a small model's time
outside the matrix products (mask building, rotary tables, cache bookkeeping: measured ~5 ms of a
16 ms demo-target forward on 2 CPU cores). This module runs the same architecture (Llama, Mistral,
Qwen2: RMSNorm, rotary attention with GQA, SwiGLU MLP) with a preallocated KV buffer, rotary tables
computed once, and (for small unquantized models) fused QKV / gate-up products.

Linear layers are plain weights, or bitsandbytes modules called as they are (4-bit, 8-bit), so the
same quantized kernels run as under transformers. Tests check the logits against transformers' to
1e-4 and greedy decoding against ``generate`` token for token. Models it cannot run exactly (other
activations, custom layers, per-layer sliding windows) fall back to the transformers forward;
:func:`unsupported_reason` says why. A model whose every layer slides (Mistral v0.1) runs here for sequences
shorter than its window, where the window changes nothing (:func:`sliding_window`).
"""

from __future__ import annotations

import ctypes

import torch
import torch.nn.functional as F

from specdesk.core import fewrows, int4
from specdesk.core.loading import LEAN_TYPES

SUPPORTED_TYPES = set(LEAN_TYPES)
FUSE_LIMIT_BYTES = 512 * 2**20  # fusing copies the linear weights; only worth it (and cheap) for small drafts


def _plain(lin) -> bool:
    return type(lin) is torch.nn.Linear


def _runnable(lin) -> bool:
    """A plain linear, a bitsandbytes layer or a q4 layer (called as a module: its own kernels, its own dtype
    handling)."""
    return _plain(lin) or isinstance(lin, int4.Int4Linear) or type(lin).__module__.startswith("bitsandbytes.")


def _linears(layer) -> list:
    att, mlp = layer.self_attn, layer.mlp
    return [att.q_proj, att.k_proj, att.v_proj, att.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]


def unsupported_reason(model) -> str | None:
    cfg = model.config
    if cfg.model_type not in SUPPORTED_TYPES:
        return f"architecture {cfg.model_type!r} has no lean path"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"activation {cfg.hidden_act!r}"
    if cfg.model_type == "qwen2" and getattr(cfg, "use_sliding_window", False):
        return "sliding-window attention on some layers"
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) == "dynamic":
        return "dynamic rotary scaling"
    for layer in model.model.layers:
        for lin in _linears(layer):
            if not _runnable(lin):
                return f"custom linear layers ({type(lin).__name__})"
        if layer.mlp.gate_proj.bias is not None:
            return "MLP biases"
    if not (type(model.lm_head) is torch.nn.Linear or isinstance(model.lm_head, int4.Int4Linear)):
        return "custom output layer"
    return None


def sliding_window(model) -> int | None:
    """The attention window of a model whose every layer slides (Mistral's ``sliding_window``), else None.

    Position i attends to keys j with i - window < j <= i (transformers' ``sliding_window_overlay``), so a
    sequence shorter than the window never meets it: the lean decoder runs such sequences with plain causal
    attention, bit for bit, and longer ones go through transformers (``sequence.ModelSequence`` decides).
    """
    cfg = model.config
    if cfg.model_type == "qwen2":  # qwen2's window is off unless use_sliding_window (then no lean path at all)
        return None
    window = getattr(cfg, "sliding_window", None)
    return int(window) if window else None


class _FewRows:
    """A decoder's few-row limit, held apart so that its layers' closures do not hold the decoder itself (a
    cycle would keep each generation's decoder, and a small model's fused weight copies, alive until the garbage
    collector's next full pass)."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n


def _call(lin, few: _FewRows, head: bool = False):
    """A function x -> lin(x): the weights of a plain layer (no module hooks; few-row products up to
    ``few.n``, core/fewrows.py), a q4/q8 layer's kernel, else the module."""
    if _plain(lin):
        w, b = lin.weight, lin.bias
        return lambda x: fewrows.linear(x, w, b, few.n)
    if head and type(lin) is int4.Q8Linear:  # a q4 target's head: a few rows over several calls where faster
        # (measured once; a q8 model's layers, in torch's kernel where the own one does not build, are not split)
        return lin.split_call()
    if isinstance(lin, int4.Int4Linear):
        return lin.kernel_call()
    return lin


def _layer_table(lib, layers: list, products: list):
    """The kernels library's sd_layer array for these layers (and the library), or None unless every layer's
    products are the own kernel's (q/k/v and gate/up joined)."""
    from specdesk.core import kernels

    if len(products) != len(layers):
        return None
    table = (kernels.Layer * len(layers))()
    for row, entry, mods in zip(table, layers, products):
        if not all(isinstance(m, int4._Native) for m in mods):
            return None
        for name, mod in zip(("qkv", "o", "gu", "down"), mods):
            bias = 0 if mod.bias is None else mod.bias.data_ptr()
            setattr(row, name, kernels.Linear(mod.KIND, mod.packed.data_ptr(), mod.scales_zeros.data_ptr(), bias,
                                              mod.out_features))
        row.ln1, row.ln2 = entry["ln1"].data_ptr(), entry["ln2"].data_ptr()
        row.kc, row.vc = entry["k"].data_ptr(), entry["v"].data_ptr()
        entry["modules"] = mods  # the pointers' tensors live as long as the decoder
    return table, lib


def _ends(lib, model, embed: torch.Tensor, norm: torch.Tensor):
    """layers.c's sd_ends for this model (and the tensors its pointers need alive), or None unless its head is the
    own kernel's product without a bias."""
    from specdesk.core import kernels

    head = model.lm_head
    if not (isinstance(head, int4._Native) and head.bias is None and embed.is_contiguous() and norm.is_contiguous()
            and norm.dtype == torch.bfloat16 and hasattr(lib, "sd_forward_ids")):
        return None
    keep = (head.packed, head.scales_zeros, head.out_map, embed, norm)
    ends = kernels.Ends(embed.data_ptr(), embed.shape[0], norm.data_ptr(),
                        kernels.Linear(head.KIND, head.packed.data_ptr(), head.scales_zeros.data_ptr(), 0,
                                       head.out_features),
                        0 if head.out_map is None else head.out_map.data_ptr())
    return ends, keep


class LeanDecoder:
    """One sequence: feed tokens, get next-token logits (of the last or of every fed position), crop on rejection.

    fuse: concatenate q/k/v and gate/up weights into new tensors (one matrix product each instead of
    three and two). None = only when every linear is plain and the layers weigh under FUSE_LIMIT_BYTES.
    few_rows: products over at most this many rows run as ``w @ x.T`` (core/fewrows.py); None = as measured
    for this model.
    """

    def __init__(self, model, capacity: int, fuse: bool | None = None, keep_hidden: bool = False,
                 few_rows: int | None = None) -> None:
        self._few = few = _FewRows(few_rows or 0)
        cfg = model.config
        inner = model.model
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.scale = self.head_dim ** -0.5
        self.eps = cfg.rms_norm_eps
        self.embed = inner.embed_tokens.weight
        self.final_norm = inner.norm.weight
        self.head = _call(model.lm_head, few, head=True)  # a plain head through fewrows.linear, a q4/q8 one its kernel
        self.capacity = capacity
        self.length = 0
        device, dtype = self.embed.device, self.embed.dtype
        # keep_hidden: every fed position's final-norm output (the features an EAGLE head reads), (capacity, hidden)
        self.hidden = torch.zeros(capacity, cfg.hidden_size, device=device, dtype=dtype) if keep_hidden else None
        all_plain = all(_plain(lin) for layer in inner.layers for lin in _linears(layer))
        if fuse is None:
            fuse = sum(p.numel() * p.element_size() for p in inner.layers.parameters()) <= FUSE_LIMIT_BYTES
        self.fused = bool(fuse and all_plain)
        self.layers = []
        products = []  # per layer its q/k/v, o, gate/up and down modules where each is one of the own kernel's
        for layer in inner.layers:
            att, mlp = layer.self_attn, layer.mlp
            qkv = [att.q_proj, att.k_proj, att.v_proj]
            gu = [mlp.gate_proj, mlp.up_proj]
            entry = {
                "ln1": layer.input_layernorm.weight, "ln2": layer.post_attention_layernorm.weight,
                "o": _call(att.o_proj, few), "down": _call(mlp.down_proj, few),
                "k": torch.zeros(1, self.n_kv, capacity, self.head_dim, device=device, dtype=dtype),
                "v": torch.zeros(1, self.n_kv, capacity, self.head_dim, device=device, dtype=dtype),
            }
            if self.fused:
                w_qkv = torch.cat([m.weight for m in qkv]).detach()
                biases = [m.bias for m in qkv]
                b_qkv = torch.cat(biases).detach() if biases[0] is not None else None
                w_gu = torch.cat([m.weight for m in gu]).detach()
                entry["qkv"] = [lambda x, w=w_qkv, b=b_qkv: fewrows.linear(x, w, b, few.n)]
                entry["gu"] = [lambda x, w=w_gu: fewrows.linear(x, w, None, few.n)]
            else:
                fq, fg = int4.fused(att), int4.fused(mlp)  # q4 layers joined when quantized (core/int4.py)
                entry["qkv"] = [_call(m, few) for m in ([fq] if fq is not None else qkv)]
                entry["gu"] = [_call(m, few) for m in ([fg] if fg is not None else gu)]
                products.append((fq, att.o_proj, fg, mlp.down_proj))
            self.layers.append(entry)
        # Rotary tables for every position of this generation, from the model's own rotary module.
        pos = torch.arange(capacity, device=device)[None]
        cos, sin = inner.rotary_emb(self.embed[:1][None], pos)  # (1, capacity, head_dim) each
        self.cos, sin = cos[0].to(dtype), sin[0].to(dtype)
        half = self.head_dim // 2
        # rotate_half(t) * sin == roll(t, half) * (sin with its first half negated), bit for bit
        self.sin_signed = torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)
        # bfloat16/float16 on a CPU: the CPU attention kernel's sums depend on how many rows and keys a call has,
        # and at 8 bits of mantissa that flips the rounding of some outputs: a verify pass would then differ from
        # one-position steps. Passes that return every position's logits (verifies, trees: _rows) and one-position
        # steps attend one position per call, over exactly the keys a one-position step at that position sees:
        # the same call, bit for bit, in bfloat16 (~3x faster than float64 for one position). Other passes (a
        # prompt's prefill, a draft catching up) attend in float64 in one call, rounded back (~15% faster than
        # position by position over 64): what they leave in the cache is the same for every decoding mode.
        self.attn64 = device.type == "cpu" and dtype in (torch.bfloat16, torch.float16)
        # specdesk's own kernels for bfloat16 on a CPU, where they build: every pass position by position (prefills
        # too, see _rows), in one call a layer (core/kernels/attention.c: float32, each position alone by the same
        # instructions, whatever else the call holds); RMSNorm, rotary embedding with the cache write, and SwiGLU's
        # product in one call each (rows.c: ~25 small operations a layer -> 4)
        lib = None
        if self.attn64 and dtype == torch.bfloat16:
            from specdesk.core import kernels

            lib = kernels.library()
        self._rmsnorm = None if lib is None else lib.sd_rmsnorm
        self._rows_kernel = lib if self.head_dim % 2 == 0 else None
        self._attend = None
        if lib is not None and self.head_dim % 16 == 0 and self.n_heads % self.n_kv == 0:
            self._attend = lib.sd_attend
        # ... and with all of them, the layers of those passes in one call (layers.c: Python's ~15 calls a layer
        # were ~20% of a SmolLM2 step); the same kernels in the same order, so the same bits. False: call them one
        # by one (the tests compare the two).
        self._layers_c = None
        if self._attend is not None and self._rows_kernel is not None and hasattr(lib, "sd_forward"):
            self._layers_c = _layer_table(lib, self.layers, products)
        self.layers_in_one_call = self._layers_c is not None
        # forward_ids' path: the rotary tables' rows by address (contiguous (capacity, head_dim) tables)
        self._fast_ids = self.layers_in_one_call and self.embed.dtype == torch.bfloat16
        if self._fast_ids:
            self.cos, self.sin_signed = self.cos.contiguous(), self.sin_signed.contiguous()
            self._cos_ptr, self._sin_ptr = self.cos.data_ptr(), self.sin_signed.data_ptr()
            self._rot_row = self.head_dim * self.cos.element_size()
            self._no_extras = (ctypes.c_int64 * 1)()
        # ... and with a q4/q8 head of the own kernel's, the embedding rows, final norm, head and (greedy) argmax in
        # that call too (layers.c's sd_forward_ids)
        self._ends = _ends(lib, model, self.embed, self.final_norm) if self._fast_ids else None
        self._head_n = model.lm_head.out_features
        self._reused: torch.Tensor | None = None  # forward_ids(reuse=True)'s logits
        if few_rows is None:  # measured on this decoder's own (still empty) buffers, once per model
            self.few_rows = fewrows.rows_for(model, self)

    @property
    def few_rows(self) -> int:
        return self._few.n

    @few_rows.setter
    def few_rows(self, n: int) -> None:
        self._few.n = n

    def _rows(self, n: int, every: bool) -> bool:
        """Whether a pass of n positions attends position by position (bfloat16 on a CPU: see __init__). With the
        own attention kernel every pass goes so, prefills too (each position alone is what the kernel does at any
        length; with the layers in one call a 1,000-token SmolLM2 prompt prefilled in 1.17 s against 1.49 through
        float64 attention, and a draft catching up on 2-3 tokens 0.50 ms against 0.71); without it, which way
        depends on n alone, as before."""
        return self.attn64 and (every or n == 1 or self._attend is not None)

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if self._rmsnorm is not None and x.is_contiguous():
            out = torch.empty_like(x)
            self._rmsnorm(x.data_ptr(), x.numel() // x.shape[-1], x.shape[-1], w.data_ptr(), self.eps, out.data_ptr())
            return out
        xf = x.float()
        return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    @staticmethod
    def _linear_many(x: torch.Tensor, fns: list) -> torch.Tensor:
        if len(fns) == 1:
            return fns[0](x)
        return torch.cat([f(x) for f in fns], dim=-1)

    def _rotate(self, t: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
        """t * cos + rotate_half(t) * sin (transformers' apply_rotary_pos_emb) in three operations."""
        return t * cos + t.roll(self.head_dim // 2, -1) * sin_signed

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, every: bool = False) -> torch.Tensor:
        """ids: (n,) int64 on the model's device -> logits of the last position (V,), or of all, (n, V)."""
        return self.forward_embeds(self.embed[ids], every)

    @torch.inference_mode()
    def forward_ids(self, ids: list[int], every: bool = False, reuse: bool = False) -> torch.Tensor:
        """As :meth:`forward` for token ids given as ints: the decode loop's steps (a drafted token, a verify's
        k + 1 positions). With the layers in one call, the same kernel calls on the same values (so the same bits)
        with the few tensor operations around them cut down: after a target pass has pushed the interpreter's and
        torch's own code and data out of the CPU's caches, each costs ~10-20 us (q4 SmolLM2 on a 2-core AMD EPYC:
        ~0.07 ms of a draft forward's ~0.35 went to the work around its kernels). ``reuse`` (the last position's
        logits only): they land in one buffer the decoder keeps, overwritten by the next such call (a sampled draft
        reads each row at once; a new tensor cost ~40 us a drafted token right after a target pass)."""
        if not self._fast_ids or self.hidden is not None:
            return self.forward(torch.tensor(ids, dtype=torch.long, device=self.embed.device), every)
        if self._ends is not None:
            if reuse and not every:
                if self._reused is None:
                    self._reused = torch.empty((self._head_n,), dtype=torch.bfloat16)
                logits = self._reused
            else:
                logits = torch.empty((len(ids), self._head_n) if every else (self._head_n,), dtype=torch.bfloat16)
            self._whole_pass(ids, every, self._head_n, logits.data_ptr(), None, None)
            return logits
        p0, prefix, offsets = self._step_plan(len(ids))
        x = self.embed[ids]  # (n, hidden): a copy, which the layers kernel updates in place
        rot = p0 * self._rot_row
        self._layers_call(x, p0, self._cos_ptr + rot, self._sin_ptr + rot, ctypes.addressof(prefix),
                          ctypes.addressof(offsets), ctypes.addressof(self._no_extras))
        self.length = p0 + len(ids)
        return self._head(self._norm(x if every or len(ids) == 1 else x[-1:], self.final_norm), every)

    def _step_plan(self, n: int) -> tuple[int, ctypes.Array, ctypes.Array]:
        """(first slot, prefix, offsets): the attention plan (sd_attend's) of n positions fed after the sequence,
        position t seeing slots 0 .. p0 + t as a one-position step would (forward's spans)."""
        if n == 0:
            raise ValueError("no token to feed")
        p0 = self.length
        if p0 + n > self.capacity:
            raise RuntimeError("context longer than the preallocated buffer")
        return p0, (ctypes.c_int64 * n)(*range(p0 + 1, p0 + n + 1)), (ctypes.c_int64 * (n + 1))()

    @torch.inference_mode()
    def top_ids(self, ids: list[int], every: bool = False, prob: bool = False,
                limit: int | None = None) -> tuple[list[int], list[float] | None]:
        """As :meth:`forward_ids`, but what greedy decoding reads of the logits, as ints: each returned row's argmax
        over its first ``limit`` logits (all: None), and with ``prob`` that logit's probability under softmax (as
        kernels.argmax_list and kernels.top_probability give them). With the head in the layers' call, that call
        computes them and no logits tensor is made."""
        limit = self._head_n if limit is None else min(limit, self._head_n)
        if self._ends is None or self.hidden is not None:
            from specdesk.core import kernels

            logits = self.forward_ids(ids, every)
            return kernels.tops(logits[..., :limit] if limit < logits.shape[-1] else logits, prob)
        rows = len(ids) if every else 1
        top = (ctypes.c_int64 * rows)()
        top_p = (ctypes.c_float * rows)() if prob else None
        self._whole_pass(ids, every, limit, None, ctypes.addressof(top), ctypes.addressof(top_p) if prob else None)
        return list(top), (list(top_p) if prob else None)

    def _whole_pass(self, ids: list[int], every: bool, limit: int, logits, top, top_p) -> None:
        """One call of layers.c's sd_forward_ids: embedding rows, layers, final norm, head (into ``logits``, an
        address, or None) and, at ``top`` / ``top_p`` (addresses or None), each row's argmax over ``limit`` logits
        and its probability."""
        n = len(ids)
        p0, prefix, offsets = self._step_plan(n)
        token_ids = (ctypes.c_int64 * n)(*ids)
        rot = p0 * self._rot_row
        table, lib = self._layers_c
        rc = lib.sd_forward_ids(ctypes.addressof(token_ids), n, ctypes.addressof(self._ends[0]), every, limit, logits,
                                top, top_p, table, len(self.layers), self.embed.shape[1], self.n_heads, self.n_kv,
                                self.head_dim, self._cos_ptr + rot, self._sin_ptr + rot, self.capacity * self.head_dim,
                                p0, ctypes.addressof(prefix), ctypes.addressof(offsets),
                                ctypes.addressof(self._no_extras), self.scale, self.eps, torch.get_num_threads())
        if rc == -2:
            raise IndexError(f"token id out of range 0 .. {self._ends[0].rows - 1}")
        if rc != 0:
            raise MemoryError("out of memory in the decoder's layers kernel")
        self.length = p0 + n

    @torch.inference_mode()
    def forward_embeds(self, x: torch.Tensor, every: bool = False) -> torch.Tensor:
        """x: (n, hidden) input vectors (token embeddings, or an EAGLE head's fused inputs) -> logits as forward."""
        n = x.shape[0]
        p0 = self.length
        if self._rows(n, every):  # position t sees keys 0 .. p0 + t, as a one-position step would
            return self._run(x, self.cos[p0:p0 + n], self.sin_signed[p0:p0 + n], None, every,
                             [p0 + t + 1 for t in range(n)])
        keep = None
        if n > 1:
            keep = torch.ones(n, p0 + n, dtype=torch.bool, device=x.device).tril(diagonal=p0)
        return self._run(x, self.cos[p0:p0 + n], self.sin_signed[p0:p0 + n], keep, every)

    @torch.inference_mode()
    def forward_tree(self, ids: torch.Tensor, depths: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """A token tree in one pass: ids (n,) fed into slots length..length+n-1, token j at position
        length + depths[j] (n,), attending to every cached position and to the fed tokens allowed[j] (n, n, bool)
        marks (its ancestors and itself) -> logits (n, V). :meth:`adopt` then moves a kept branch into place."""
        p0 = self.length
        pos = depths + p0
        n = ids.shape[0]
        if self._rows(n, True):  # each node sees the cache, then its ancestors and itself in order
            spans = []
            for j in range(n):
                fed = allowed[j].nonzero().flatten()
                contiguous = int(fed[-1]) + 1 == fed.numel()  # slots 0 .. j: a chain node, a slice of the cache
                spans.append(p0 + fed.numel() if contiguous else (p0, p0 + fed))
            return self._run(self.embed[ids], self.cos[pos], self.sin_signed[pos], None, True, spans)
        keep = torch.cat([torch.ones(n, p0, dtype=torch.bool, device=ids.device), allowed], dim=1)
        return self._run(self.embed[ids], self.cos[pos], self.sin_signed[pos], keep, True)

    def take(self, other: "LeanDecoder", n: int) -> None:
        """Start from ``other``'s first ``n`` positions (keys, values, hidden states): a larger buffer for a
        sequence that goes on from what a smaller one read."""
        for L, M in zip(self.layers, other.layers):
            L["k"][:, :, :n] = M["k"][:, :, :n]
            L["v"][:, :, :n] = M["v"][:, :, :n]
        if self.hidden is not None and other.hidden is not None:
            self.hidden[:n] = other.hidden[:n]
        self.length = n

    def adopt(self, src: int, dst: int) -> None:
        """Copy slot ``src``'s keys and values (and hidden state) to slot ``dst``: a tree node kept off the chain."""
        for L in self.layers:
            L["k"][:, :, dst] = L["k"][:, :, src]
            L["v"][:, :, dst] = L["v"][:, :, src]
        if self.hidden is not None:
            self.hidden[dst] = self.hidden[src]

    def _run(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keep: torch.Tensor | None,
             every: bool, spans: list | None = None) -> torch.Tensor:
        """x (n, hidden) into slots length..length+n-1 with rotary tables cos/sin (n, head_dim); keep (n, end):
        which keys each row sees (None: one row, every key). spans: instead of keep, row by row attention; per row
        the keys it sees, an int e (slots 0 .. e-1) or (e, slots): slots 0 .. e-1, then the given ones in order."""
        n = x.shape[0]
        p0 = self.length
        end = p0 + n
        if end > self.capacity:
            raise RuntimeError("context longer than the preallocated buffer")
        hq, hk, hd = self.n_heads, self.n_kv, self.head_dim
        mask = None
        if keep is not None:  # additive float mask: the same result as a boolean one, ~12% less attention time on a CPU
            mask = torch.zeros(n, end, dtype=torch.float64 if self.attn64 else x.dtype,
                               device=x.device).masked_fill_(~keep, float("-inf"))
        # GQA over several positions: the g query heads sharing a KV head attend as one head of g*n rows
        # (bit-identical to enable_gqa; ~25% less attention time at 1,300 keys on a CPU, none at n = 1)
        group = hq // hk if n > 1 and hq != hk and spans is None else 1
        if group > 1:
            mask = mask.repeat(group, 1)  # (group * n, end): row i * n + t is position t's mask
        plan = self._attend_plan(spans) if spans is not None and self._attend is not None else None
        rows_kernel = self._rows_kernel
        if rows_kernel is not None:
            cos, sin = cos.contiguous(), sin.contiguous()
        one_call = plan is not None and self.layers_in_one_call
        if one_call:
            x = x.to(self.embed.dtype).clone(memory_format=torch.contiguous_format)  # updated in place
            self._layers_call(x, p0, cos.data_ptr(), sin.data_ptr(), *plan[1:4])
        for L in (() if one_call else self.layers):
            h = self._norm(x, L["ln1"])
            qkv = self._linear_many(h, L["qkv"])  # (n, (hq + 2 hk) * hd)
            if rows_kernel is not None:  # rotary embedding and cache write in one call: q as (n, hq, hd)
                q_rows = torch.empty(n, hq, hd, dtype=x.dtype)
                rows_kernel.sd_rope_kv(qkv.contiguous().data_ptr(), n, hq, hk, hd, cos.data_ptr(), sin.data_ptr(),
                                       q_rows.data_ptr(), L["k"].data_ptr(), L["v"].data_ptr(),
                                       self.capacity * hd, p0)
                q = q_rows.transpose(0, 1)  # (hq, n, hd), a view
            else:
                qk, v = qkv.split([(hq + hk) * hd, hk * hd], dim=-1)
                qk = self._rotate(qk.view(n, hq + hk, hd).transpose(0, 1), cos, sin)  # (hq + hk, n, hd)
                q, k = qk[:hq], qk[hq:]
                L["k"][0, :, p0:end] = k
                L["v"][0, :, p0:end] = v.view(n, hk, hd).transpose(0, 1)
            if plan is not None:
                att = self._own_attention(q, L["k"], L["v"], plan)
            elif spans is not None:
                att = self._rows_attention(q, L["k"], L["v"], spans)
            else:
                att = self._attention(q, L["k"][:, :, :end], L["v"][:, :, :end], mask, group).to(x.dtype)
            x = x + L["o"](att)
            h = self._norm(x, L["ln2"])
            gu = self._linear_many(h, L["gu"])
            if rows_kernel is not None:
                act = torch.empty(n, gu.shape[1] // 2, dtype=x.dtype)
                rows_kernel.sd_silu_mul(gu.contiguous().data_ptr(), n, act.shape[1], act.data_ptr())
            else:
                gate, up = gu.chunk(2, dim=-1)
                act = F.silu(gate) * up
            x = x + L["down"](act)
        self.length = end
        if self.hidden is not None:
            normed = self._norm(x, self.final_norm)  # (n, hidden)
            self.hidden[p0:end] = normed
            return self._head(normed if every else normed[-1:], every)
        return self._head(self._norm(x if every else x[-1:], self.final_norm), every)

    def _layers_call(self, x: torch.Tensor, p0: int, cos: int, sin: int, prefix: int, offsets: int,
                     extras: int) -> None:
        """Every layer in one call of layers.c on x (n, hidden) bfloat16, updated in place, its rows going to cache
        slots p0 ..; cos, sin: addresses of the rows' rotary tables; prefix, offsets, extras: addresses of the
        attention plan's arrays (sd_attend's)."""
        table, lib = self._layers_c
        if lib.sd_forward(x.data_ptr(), x.shape[0], table, len(self.layers), x.shape[1], self.n_heads, self.n_kv,
                          self.head_dim, cos, sin, self.capacity * self.head_dim, p0, prefix, offsets, extras,
                          self.scale, self.eps, torch.get_num_threads()) != 0:
            raise MemoryError("out of memory in the decoder's layers kernel")

    def _attention(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None,
                   group: int) -> torch.Tensor:
        """q (hq, n, hd), keys/values (1, hk, end, hd) -> (n, hq * hd), every row in one call (float64 where
        ``attn64``); group > 1: the g query heads sharing a KV head as one head of g*n rows, ``mask`` repeated so."""
        hq, hk, hd = self.n_heads, self.n_kv, self.head_dim
        n = q.shape[1]
        if self.attn64:
            q, keys, values = q.double(), keys.double(), values.double()
        if group > 1:
            att = F.scaled_dot_product_attention(q.reshape(1, hk, group * n, hd), keys, values,
                                                 attn_mask=mask, scale=self.scale).reshape(1, hq, n, hd)
        else:
            att = F.scaled_dot_product_attention(q[None], keys, values, attn_mask=mask, scale=self.scale,
                                                 enable_gqa=hq != hk)  # (1, hq, n, hd)
        return att[0].transpose(0, 1).reshape(n, hq * hd)

    @staticmethod
    def _attend_plan(spans: list) -> tuple:
        """spans -> what attention.c reads: per position the contiguous slots it sees, offsets into the further
        slots (a tree node's ancestors) and those slots, int64 tensors (and the tensors the pointers need alive)."""
        prefix, offsets, extras = [], [0], []
        for span in spans:
            if isinstance(span, int):
                prefix.append(span)
            else:
                prefix.append(span[0])
                extras.extend(span[1].tolist())
            offsets.append(len(extras))
        held = [torch.tensor(v or [0], dtype=torch.int64) for v in (prefix, offsets, extras)]
        return (len(spans), *(t.data_ptr() for t in held), held)

    def _own_attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       plan: tuple) -> torch.Tensor:
        """q (hq, n, hd) -> (n, hq * hd): every position in one call of specdesk's kernel, each alone."""
        hq, hk, hd = self.n_heads, self.n_kv, self.head_dim
        n, prefix, offsets, extras, _ = plan
        rows = q.transpose(0, 1).contiguous()  # (n, hq, hd): no copy when q came from the rotary kernel
        out = torch.empty(n, hq * hd, dtype=q.dtype)
        if self._attend(rows.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), k_cache.shape[2] * hd, n, hq, hk,
                        hd, prefix, offsets, extras, self.scale, out.data_ptr(), torch.get_num_threads()) != 0:
            raise MemoryError("out of memory in the attention kernel")
        return out

    def _rows_attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        spans: list) -> torch.Tensor:
        """q (hq, n, hd) -> attention output (n, hq * hd), one call per position over the keys ``spans`` gives it.
        The g query heads sharing a KV head attend as one head of g rows (bit-identical to enable_gqa)."""
        hq, hk, hd = self.n_heads, self.n_kv, self.head_dim
        rows = q.transpose(0, 1).contiguous().view(len(spans), 1, hk, hq // hk, hd)  # same layout at any n
        outs = []
        for t, span in enumerate(spans):
            if isinstance(span, int):
                keys, values = k_cache[:, :, :span], v_cache[:, :, :span]
            else:
                slots = torch.cat([torch.arange(span[0], device=span[1].device), span[1]])
                keys, values = k_cache.index_select(2, slots), v_cache.index_select(2, slots)
            outs.append(F.scaled_dot_product_attention(rows[t], keys, values, scale=self.scale))  # (1, hk, g, hd)
        att = outs[0] if len(outs) == 1 else torch.cat(outs)
        return att.reshape(len(spans), hq * hd)

    def _head(self, h: torch.Tensor, every: bool) -> torch.Tensor:
        """h (n, hidden) -> logits (n, V); the last position's alone, (V,), when not ``every``."""
        out = self.head(h)
        return out if every else out[0]

    def crop(self, length: int) -> None:
        self.length = min(self.length, length)

    def kv_bytes(self) -> int:
        """Bytes of the filled part of the KV buffers (what a transformers cache would hold)."""
        return sum(L[name][:, :, : self.length].numel() * L[name].element_size()
                   for L in self.layers for name in ("k", "v"))

    def kv_reserved_bytes(self) -> int:
        """Bytes of the KV buffers (and the hidden-state buffer, when kept), the whole capacity."""
        hidden = self.hidden.numel() * self.hidden.element_size() if self.hidden is not None else 0
        return hidden + sum(L[name].numel() * L[name].element_size() for L in self.layers for name in ("k", "v"))
