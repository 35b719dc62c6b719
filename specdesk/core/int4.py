"""4-bit weights in groups of 32 on the CPU (the ``q4`` quantization): GGUF Q4_1's layout, torch's int4 kernel.

A float32 forward pass of SmolLM2-135M reads ~540 MB of weights; on a 2-core CPU that is most of its time. Here
every linear layer of the decoder keeps 4-bit codes with a scale and an offset per group of 32 input weights
(w = scale * (q - 8) + zero, the form ``torch.ops.aten._weight_int4pack_mm_for_cpu`` computes), about 0.63 bytes
per weight; activations are bfloat16 (the kernel's fast path). The output head gets 8-bit codes through the same
kernel (Q8Linear: GGUF's Q8_0, which llama.cpp gives the head of a Q4_1 file); embeddings and norms stay bfloat16.

Weights that came from a Q4_1 GGUF file are already on such a grid (Q4_1 stores a minimum and a step per block of
32, with the block's own minimum and maximum among its codes), so re-quantizing them recovers the file's codes; only
the step and offset are rounded to bfloat16 (relative 2**-9). Any other weights are quantized like Q4_1 would.

The kernel computes each row of its input independently (bit for bit the same whether a row comes alone or among
k others: tests/test_int4.py), so a verify pass over k + 1 positions gives the logits one-position steps would.
"""

from __future__ import annotations

import torch
from torch import nn

GROUP = 32
FUSED = "_specdesk_q4_fused"
KERNEL = "_weight_int4pack_mm_for_cpu"


def available() -> bool:
    """This torch has the CPU int4 kernel (torch >= 2.5)."""
    return hasattr(torch.ops.aten, KERNEL) and hasattr(torch.ops.aten, "_convert_weight_to_int4pack_for_cpu")


def fits(lin: nn.Module) -> bool:
    """A plain nn.Linear whose shape the kernel takes (inputs in whole groups, outputs a multiple of 16)."""
    return (type(lin) is nn.Linear and lin.in_features % GROUP == 0 and lin.out_features % 16 == 0
            and not lin._forward_hooks and not lin._forward_pre_hooks)


def quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """w (N, K) -> codes (N, K) int32 in 0..15, step (N, K/32) and minimum (N, K/32), float32: w ~ min + step * q."""
    n, k = w.shape
    g = w.detach().float().reshape(n, k // GROUP, GROUP)
    lo, hi = g.amin(-1), g.amax(-1)
    step = (hi - lo) / 15
    safe = torch.where(step > 0, step, torch.ones_like(step))
    q = torch.round((g - lo[..., None]) / safe[..., None]).clamp_(0, 15).to(torch.int32)
    return q.reshape(n, k), step, lo


def quantize8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w (N, K) -> codes (N, K) in -127..127 (float32) and d (N, K/32), float32: w ~ d * q, GGUF Q8_0's form (a Q8_0
    tensor's own d comes back: its largest code is +-127)."""
    n, k = w.shape
    g = w.detach().float().reshape(n, k // GROUP, GROUP)
    d = g.abs().amax(-1) / 127
    safe = torch.where(d > 0, d, torch.ones_like(d))
    return torch.round(g / safe[..., None]).clamp_(-127, 127).reshape(n, k), d


class Int4Linear(nn.Module):
    """A linear layer on 4-bit codes: y = x @ W.T (+ bias), x in bfloat16 (any leading shape)."""

    def __init__(self, packed: torch.Tensor, scales_zeros: torch.Tensor, in_features: int,
                 bias: torch.Tensor | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, scales_zeros.shape[1]
        self.register_buffer("packed", packed)  # (N, K/2) uint8, the kernel's own layout
        self.register_buffer("scales_zeros", scales_zeros)  # (K/32, N, 2) bfloat16: step, zero
        self.bias = None if bias is None else nn.Parameter(bias.detach().to(torch.bfloat16), requires_grad=False)

    @classmethod
    def from_linear(cls, lin: nn.Linear) -> Int4Linear:
        q, step, lo = quantize(lin.weight)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        # zero = min + 8 step, so that min + step * q = step * (q - 8) + zero
        scales = torch.stack([step.t(), (lo + 8 * step).t()], dim=-1).to(torch.bfloat16).contiguous()
        return cls(packed, scales, lin.in_features, lin.bias)

    def stored_bytes(self) -> int:
        """Bytes it holds of its own: its codes and scales."""
        return sum(t.numel() * t.element_size() for t in (self.packed, self.scales_zeros))

    @staticmethod
    def _kernel_input(x: torch.Tensor) -> torch.Tensor:
        """x (n, in_features) -> what the kernel multiplies (Q8Linear feeds it twice)."""
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = self._kernel_input(x.reshape(-1, self.in_features).to(torch.bfloat16).contiguous())
        y = getattr(torch.ops.aten, KERNEL)(x2, self.packed, GROUP, self.scales_zeros)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features)

    def codes(self) -> torch.Tensor:
        """The 4-bit codes, (N, K) int32 in 0..15, read back from the kernel's layout (tests/test_int4.py checks it
        against what was packed), which follows the vector width torch's CPU kernels were dispatched for: whole
        blocks of B rows (64 with AVX-512, 32 with AVX2) as (K, B / 2) bytes, row j in the low nibble and row j + B / 2
        in the high one; the last N % B rows, and every row without either, as (K, rows / 2) bytes, rows 2j and 2j + 1."""
        n, k = self.out_features, self.scales_zeros.shape[0] * GROUP
        flat = self.packed.reshape(-1)
        width = {"AVX512": 64, "AVX2": 32}.get(torch.backends.cpu.get_cpu_capability())
        blocks = n // width if width else 0
        half = (width or 2) // 2
        main = flat[:blocks * k * half].reshape(blocks, k, half)
        parts = [torch.cat([main & 15, main >> 4], dim=2).permute(0, 2, 1).reshape(blocks * half * 2, k)]
        rest = n - blocks * half * 2
        if rest:
            tail = flat[blocks * k * half:].reshape(k, rest // 2)
            parts.append(torch.stack([tail & 15, tail >> 4], dim=2).reshape(k, rest).t())
        return torch.cat(parts).to(torch.int32)

    def kernel_call(self):
        """x -> self(x) for x (n, K) bfloat16 and contiguous, as the lean decoder feeds it: the kernel alone
        (the module's reshapes and casts are ~4 of a layer's ~75 small operations that bound a one-row pass)."""
        if self.bias is not None:
            return self
        op, prepare = getattr(torch.ops.aten, KERNEL), self._kernel_input
        packed, scales = self.packed, self.scales_zeros
        return lambda x: op(prepare(x), packed, GROUP, scales)

    def split_call(self):
        """As :meth:`kernel_call`, with a few rows split over calls where that measured faster (:func:`row_plan`;
        each row is computed alone anyway, so the output is bit for bit one call's)."""
        call = self.kernel_call()
        plan = self.__dict__.get("_row_plan")
        if plan is None:
            plan = self._row_plan = row_plan(time_rows(call, self.in_features))
        if not plan:
            return call

        def split(x: torch.Tensor) -> torch.Tensor:
            sizes = plan.get(x.shape[0])
            if sizes is None:
                return call(x)
            return torch.cat([call(part) for part in x.split(sizes)])
        return split

    def dequantized(self) -> torch.Tensor:
        """The weight the kernel multiplies by, (N, K) float32: step * (q - 8) + zero, step and zero as stored."""
        step, zero = (t.float().t().repeat_interleave(GROUP, dim=1) for t in self.scales_zeros.unbind(-1))
        return step * (self.codes().float() - 8) + zero

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, q4 groups of {GROUP}"


class Q8Linear(Int4Linear):
    """8-bit codes with a step per group of 32 (GGUF Q8_0's layout: w = d * q, q in -127..127) through the same
    int4 kernel, which has no 8-bit sibling on the CPU: q + 128 = 16 a + b splits each code into two 4-bit ones, and
    one kernel call over [x, x] (2K inputs) sums x @ (16 d a - 128 d).T and x @ (d b).T in its float32 accumulator.
    About 1.1 bytes per weight against bfloat16's 2: the output head of a q4 target (SmolLM2-135M's 49152 x 576:
    ~3.4 ms -> ~1.6 ms per one-position pass on 2 cores). A Q8_0 GGUF tensor keeps its own codes; only d is rounded
    to bfloat16 (relative 2**-9, as a bfloat16 copy of the weights would be). Row-invariant like the int4 layers."""

    @classmethod
    def from_linear(cls, lin: nn.Linear) -> Q8Linear:
        n, k = lin.weight.shape
        q, d = quantize8(lin.weight)
        u = (q + 128).to(torch.int32)  # 1..255
        codes = torch.cat([u // 16, u % 16], dim=1)  # (N, 2K): high nibbles, then low ones
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
        db = d.to(torch.bfloat16).float()
        # step * (code - 8) + zero: high part 16 d (a - 8) + 0 = 16 d a - 128 d; low part d (b - 8) + 8 d = d b
        hi = torch.stack([16 * db, torch.zeros_like(db)], dim=-1)
        lo = torch.stack([db, 8 * db], dim=-1)
        scales = torch.cat([hi, lo], dim=1).transpose(0, 1).to(torch.bfloat16).contiguous()  # (2K/32, N, 2)
        return cls(packed, scales, k, lin.bias)

    @staticmethod
    def _kernel_input(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x], dim=1)  # (n, 2K): against the high halves, then the low ones

    def dequantized(self) -> torch.Tensor:
        both = super().dequantized()  # (N, 2K): the high parts, then the low ones
        return both[:, :self.in_features] + both[:, self.in_features:]

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, q8 groups of {GROUP}"


def _rows_of_16(codes: torch.Tensor) -> torch.Tensor:
    """(N, K) codes -> (N/16, K/32, 8, 64): per block of 16 outputs and group of 32 inputs, chunk j holds inputs
    32g + 4j .. 32g + 4j + 3 of each output in turn (output c at bytes 4c .. 4c + 3): core/kernels/q4gemm.c's order."""
    n, k = codes.shape
    return codes.reshape(n // 16, 16, k // GROUP, 8, 4).permute(0, 2, 3, 1, 4).reshape(n // 16, k // GROUP, 8, 64)


def _rows_back(chunks: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`_rows_of_16`: (N/16, K/32, 8, 64) -> (N, K)."""
    nb, g = chunks.shape[:2]
    return chunks.reshape(nb, g, 8, 16, 4).permute(0, 3, 1, 2, 4).reshape(nb * 16, g * GROUP)


class _Native:
    """specdesk's own kernel (core/kernels/q4gemm.c) for a layer's product: activations quantized to 8 bits per
    row and group of 32, integer dot products, as llama.cpp computes a Q4_1 or Q8_0 tensor. Row-invariant like
    torch's kernel (each row by the same instructions alone or among others, any thread count: tests/test_int4.py),
    and a row costs far less: SmolLM2's gate/up on 2 Xeon cores 49 -> 18 us for one row, 174 -> 45 us for five;
    its 8-bit head 1.50 -> 0.53 ms and 5.5 -> 0.79 ms."""

    KIND = 0  # 4 or 8: which of the kernel's layouts ``packed`` and ``scales_zeros`` hold
    out_map: torch.Tensor | None = None  # (N,) int64 where the rows are stored in another order (share_rows)

    def kernel_call(self):
        return self if self.bias is not None else self._product()

    def _product(self):
        """x -> x @ W.T through the kernel (no bias)."""
        from specdesk.core import kernels

        gemm = kernels.library().sd_gemm_map
        packed, scales, kind = self.packed, self.scales_zeros, self.KIND
        k, n = self.in_features, self.out_features
        w_ptr, s_ptr = packed.data_ptr(), scales.data_ptr()
        out_map = self.out_map  # stored row j is output out_map[j] (share_rows)
        map_ptr = None if out_map is None else out_map.data_ptr()
        threads = torch.get_num_threads

        def call(x: torch.Tensor) -> torch.Tensor:
            if x.dtype != torch.bfloat16 or not x.is_contiguous():
                x = x.to(torch.bfloat16).contiguous()
            m = x.shape[0]
            y = torch.empty(m, n, dtype=torch.bfloat16)
            if gemm(kind, x.data_ptr(), m, k, w_ptr, s_ptr, n, y.data_ptr(), n, map_ptr, threads()) != 0:
                raise MemoryError("out of memory in the q4 kernel")
            return y
        call.keep = (packed, scales, out_map)  # the pointers' tensors live as long as the call
        return call

    def split_call(self):
        return self.kernel_call()  # a row costs little here: nothing to split

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = self._product()(x.reshape(-1, self.in_features))
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features)


class NativeQ4Linear(_Native, Int4Linear):
    """An Int4Linear (the same codes, steps and zeros, bit for bit) in specdesk's own kernel's layout: ``packed``
    (N/16, K/32, 4, 64) uint8, chunk t's low nibbles the codes of chunk t of :func:`_rows_of_16` and its high ones
    chunk t + 4's; ``scales_zeros`` (N/16, K/32, 2, 16) bfloat16, 16 steps then 16 zeros."""

    KIND = 4

    def __init__(self, packed: torch.Tensor, scales_zeros: torch.Tensor, in_features: int,
                 bias: torch.Tensor | None = None) -> None:
        nn.Module.__init__(self)
        self.in_features, self.out_features = in_features, packed.shape[0] * 16
        self.register_buffer("packed", packed)
        self.register_buffer("scales_zeros", scales_zeros)
        self.bias = None if bias is None else nn.Parameter(bias.detach().to(torch.bfloat16), requires_grad=False)

    @classmethod
    def from_parts(cls, codes: torch.Tensor, step: torch.Tensor, zero: torch.Tensor, in_features: int,
                   bias: torch.Tensor | None = None) -> NativeQ4Linear:
        """codes (N, K) in 0..15, step and zero (N, K/32) (rounded to bfloat16 here)."""
        chunks = _rows_of_16(codes.to(torch.uint8))
        packed = (chunks[:, :, :4] | (chunks[:, :, 4:] << 4)).contiguous()
        n, g = step.shape
        scales = torch.stack([step, zero], dim=-1).to(torch.bfloat16).reshape(n // 16, 16, g, 2)
        return cls(packed, scales.permute(0, 2, 3, 1).contiguous(), in_features, bias)

    @classmethod
    def from_linear(cls, lin: nn.Linear) -> NativeQ4Linear:
        q, step, lo = quantize(lin.weight)
        return cls.from_parts(q, step, lo + 8 * step, lin.in_features, lin.bias)

    def codes(self) -> torch.Tensor:
        return _rows_back(torch.cat([self.packed & 15, self.packed >> 4], dim=2)).to(torch.int32)

    def dequantized(self) -> torch.Tensor:
        nb, g = self.scales_zeros.shape[:2]
        step, zero = (t.float().reshape(nb * 16, g).repeat_interleave(GROUP, dim=1)
                      for t in self.scales_zeros.permute(0, 3, 1, 2).unbind(-1))
        return step * (self.codes().float() - 8) + zero


class NativeQ8Linear(_Native, Q8Linear):
    """A Q8Linear's codes (GGUF Q8_0: w = d * q, q in -127..127, d per group of 32) in specdesk's own kernel's
    layout: ``packed`` (N/16, K/32, 8, 64) int8 in :func:`_rows_of_16`'s order, ``scales_zeros`` (N/16, K/32, 16)
    bfloat16, the steps d (no zeros: the name is kept for the code that counts a q4 layer's bytes)."""

    KIND = 8

    __init__ = NativeQ4Linear.__init__

    @classmethod
    def from_linear(cls, lin: nn.Linear) -> NativeQ8Linear:
        n, k = lin.weight.shape
        q, d = quantize8(lin.weight)
        q = q.to(torch.int8)
        scales = d.to(torch.bfloat16).reshape(n // 16, 16, k // GROUP).transpose(1, 2).contiguous()
        return cls(_rows_of_16(q).contiguous(), scales, k, lin.bias)

    borrowed = False  # a view of another head's rows (share_rows): its memory is that head's

    def _in_output_order(self, rows: torch.Tensor) -> torch.Tensor:
        if self.out_map is None:
            return rows
        return torch.empty_like(rows).index_copy_(0, self.out_map, rows)

    def codes(self) -> torch.Tensor:
        """The 8-bit codes, (N, K) int32 in -127..127 (unlike Q8Linear's nibbles), row i output i's."""
        return self._in_output_order(_rows_back(self.packed).to(torch.int32))

    def steps(self) -> torch.Tensor:
        """(N, K/32) float32: each row's d per group, row i output i's."""
        nb, g = self.scales_zeros.shape[:2]
        return self._in_output_order(self.scales_zeros.float().transpose(1, 2).reshape(nb * 16, g))

    def dequantized(self) -> torch.Tensor:
        return self.steps().repeat_interleave(GROUP, dim=1) * self.codes().float()

    def dequantized_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """``dequantized()[ids]`` (the same values) without widening every row: a draft's 8,192 rows of SmolLM2's
        49,152-row head took 0.2 s the long way at every load."""
        ids = ids.to(torch.int64).cpu()
        if self.out_map is not None:  # output i is stored row where[i]
            where = torch.empty_like(self.out_map)
            where[self.out_map] = torch.arange(self.out_map.numel())
            ids = where[ids]
        nb, g = self.packed.shape[:2]
        blocks, cols = ids // 16, ids % 16
        codes = self.packed.view(nb, g, 8, 16, 4)[blocks, :, :, cols, :]  # (m, G, 8, 4): inputs 32g + 4j + i
        steps = self.scales_zeros[blocks, :, cols].float()  # (m, G)
        return steps.repeat_interleave(GROUP, dim=1) * codes.reshape(ids.numel(), -1).to(torch.int32).float()

    def stored_bytes(self) -> int:
        """What this head holds of its own: codes and steps, or for a view of another head's rows (a draft's reduced
        head sharing its target's) the column map the shared head gained for it."""
        return self.map_bytes if self.borrowed else super().stored_bytes()


def share_rows(head: NativeQ8Linear, ids: torch.Tensor) -> tuple[NativeQ8Linear, NativeQ8Linear] | None:
    """(head with rows ``ids`` stored first, a view of those rows) or None where it cannot be done.

    A distilled draft's reduced head holds the target head's rows ``ids`` with the very same codes and steps (both
    are the target's weights quantized alike); kept apart they were two copies, 4.7 MB for SmolLM2's draft, read
    every drafted token where the target's whole head is read every pass, and on a CPU whose cache barely holds the
    target that extra traffic cost the target's next pass more than the draft's head itself took. With the rows
    ``ids`` first (the rest after them in their order) the target's head writes its outputs through a column map,
    still in vocabulary order, bit for bit, and the draft's head is its first rows."""
    n, m = head.out_features, int(ids.numel())
    if type(head) is not NativeQ8Linear or head.bias is not None or head.out_map is not None or m == 0 or m % 16:
        return None
    ids = ids.to(torch.int64).cpu()
    rest = torch.ones(n, dtype=torch.bool)
    rest[ids] = False
    order = torch.cat([ids, rest.nonzero().flatten()])  # stored row j is output order[j]
    if order.numel() != n:  # ids repeat a row
        return None
    codes = _rows_back(head.packed)[order]
    g = head.in_features // GROUP
    steps = head.scales_zeros.transpose(1, 2).reshape(n, g)[order]
    shared = NativeQ8Linear(_rows_of_16(codes).contiguous(), steps.reshape(n // 16, 16, g).transpose(1, 2).contiguous(),
                            head.in_features)
    shared.out_map = order  # a plain attribute: it stays on the CPU, as the kernel does
    return shared, first_rows(shared, m)


def first_rows(shared: NativeQ8Linear, m: int) -> NativeQ8Linear:
    """A view of the first ``m`` (a multiple of 16) stored rows of a head that share_rows made: outputs in stored
    order, no memory of its own but the column map it is counted for."""
    view = NativeQ8Linear(shared.packed[: m // 16], shared.scales_zeros[: m // 16], shared.in_features)
    view.borrowed, view.map_bytes = True, shared.out_map.numel() * shared.out_map.element_size()
    return view

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, q8 groups of {GROUP} (own kernel)"


def native() -> bool:
    """Whether q4 models get specdesk's own kernel (core/kernels): built here, and not turned off."""
    from specdesk.core import kernels

    return kernels.available()


SPLIT_ROWS = 16  # passes of up to this many rows may be split (longer ones, prefill, go in one call)


@torch.inference_mode()
def time_rows(call, in_features: int, repeats: int = 3) -> dict[int, float]:
    """Seconds per call of 1..SPLIT_ROWS rows (the fastest of ``repeats``)."""
    import time

    x = torch.randn(SPLIT_ROWS, in_features, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    call(x), call(x[:1])  # first calls pay one-off costs
    out = {}
    for n in range(1, SPLIT_ROWS + 1):
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            call(x[:n])
            best = min(best, time.perf_counter() - t0)
        out[n] = best
    return out


def row_plan(cost: dict[int, float], margin: float = 0.9) -> dict[int, tuple[int, ...]]:
    """Row counts better done as several calls: n -> the calls' sizes, where the cheapest split (by ``cost``, the
    seconds of one call of 1..len(cost) rows) takes under ``margin`` of one call. The Q8 head on AMX: 1 row 1.5 ms,
    4 rows 2.4, 5 rows 5.6 (the kernel takes another path from 5 rows), so 5 rows go as 4 + 1."""
    best: dict[int, tuple[float, tuple[int, ...]]] = {0: (0.0, ())}
    for n in range(1, len(cost) + 1):
        best[n] = min((best[n - m][0] + cost[m], best[n - m][1] + (m,)) for m in range(1, n + 1))
    return {n: sizes for n, (t, sizes) in best.items() if len(sizes) > 1 and t < margin * cost[n]}


def fuse(mods: list) -> Int4Linear | None:
    """One Int4Linear computing the given ones side by side (q/k/v, gate/up: one kernel call instead of several),
    or None. The kernel packs rows in blocks of 64, so only layers with a multiple of 64 outputs join up (the
    fused outputs are then bit for bit the separate ones: tests/test_int4.py; 64 is a multiple of AVX2's 32 too)."""
    if len(mods) < 2 or not any(all(type(m) is kind for m in mods) for kind in (Int4Linear, NativeQ4Linear,
                                                                                   NativeQ8Linear)):
        return None
    k, kind = mods[0].in_features, type(mods[0])
    block = 64 if kind is Int4Linear else 16  # own kernel: blocks of 16 outputs, codes and scales alike
    if any(m.in_features != k or m.out_features % block for m in mods):
        return None
    # biases (Qwen2's q/k/v) join too where every layer has one: each output gets its own layer's bias, added alike
    biased = [m.bias is not None for m in mods]
    if any(biased) and not (all(biased) and kind is not Int4Linear):
        return None
    bias = torch.cat([m.bias for m in mods]) if all(biased) else None
    scales = torch.cat([m.scales_zeros for m in mods], dim=1 if kind is Int4Linear else 0)
    return kind(torch.cat([m.packed for m in mods]), scales, k, bias)


def quant_targets(model: nn.Module, head: str = "q8", layers: str = "q4") -> dict[str, type]:
    """Which modules :func:`quantize_model` replaces, by name, and the class each becomes: the output head (``head``
    "q8": an 8-bit class; "q4": a 4-bit one; "none": left) and every linear layer of the decoder blocks that the
    kernel takes (``layers`` "q4" or "q8", the same classes). The same on a model with empty (meta) parameters, so a
    stored q4 model (models/q4store) is rebuilt module for module."""
    own = native()
    kinds = {"q8": NativeQ8Linear if own else Q8Linear, "q4": NativeQ4Linear if own else Int4Linear, "none": None}
    layer_kind, kind = kinds[layers], kinds[head]
    names = {id(m): n for n, m in model.named_modules()}
    out: dict[str, type] = {}
    if kind is not None and fits(model.lm_head):
        out[names[id(model.lm_head)]] = kind
    layers = model.get_decoder().layers if hasattr(model, "get_decoder") else model.model.layers
    for block in layers:
        for m in block.modules():
            if fits(m):
                out[names[id(m)]] = layer_kind
    return out


def quantize_model(model: nn.Module, head: str = "q8", layers: str = "q4", progress=None) -> int:
    """Every linear layer of the decoder blocks that the kernel takes becomes an Int4Linear (``layers`` "q8": a
    Q8Linear, GGUF Q8_0's layout: the ``q8`` quantization, about a float model's precision), the output head a
    Q8Linear (``head`` "q8", a target's: 8 bits keep its logits as a Q8_0 file has them) or an Int4Linear ("q4", a
    draft's own copy of some of the target's rows, where 4 bits cost acceptance, not exactness) or stays ("none");
    everything else (embeddings, norms) becomes bfloat16. A tied head is untied: the embeddings stay bfloat16
    beside it. Returns how many layers were quantized. ``progress(done, total)`` hears of every twentieth of them
    (a 7B model's ~220 layers take minutes on a small CPU)."""
    targets = quant_targets(model, head, layers)
    every = max(1, len(targets) // 20)
    for i, (name, kind) in enumerate(targets.items(), 1):
        model.set_submodule(name, kind.from_linear(model.get_submodule(name)))
        if progress is not None and (i % every == 0 or i == len(targets)):
            progress(i, len(targets))
    fuse_model(model)
    model.to(torch.bfloat16)  # the rest; Int4Linear's packed codes are integers and stay as they are
    return len(targets)


def fuse_model(model: nn.Module) -> None:
    """Each block's q/k/v and gate/up, where :func:`fuse` joins them, computed in one kernel call."""
    layers = model.get_decoder().layers if hasattr(model, "get_decoder") else model.model.layers
    for block in layers:
        att, mlp = getattr(block, "self_attn", None), getattr(block, "mlp", None)
        for owner, names in ((att, ("q_proj", "k_proj", "v_proj")), (mlp, ("gate_proj", "up_proj"))):
            mods = [getattr(owner, n, None) for n in names]
            joined = fuse(mods)
            if joined is None:
                continue
            # the layers' codes become views of the joined ones (no second copy); their scales stay their own
            row, per = 0, 16 if isinstance(joined, _Native) else 1  # own kernel: one packed entry per 16 outputs
            for m in mods:
                m.packed = joined.packed[row // per:(row + m.out_features) // per]
                row += m.out_features
            object.__setattr__(owner, FUSED, joined)  # not a submodule: its codes are counted once, via the views


def stored(model: nn.Module) -> tuple[int, int]:
    """(weights, bytes) of ``model``'s q4 layers: in x out each, and their codes and scales as held."""
    mods = [m for m in model.modules() if isinstance(m, Int4Linear)]
    return (sum(m.in_features * m.out_features for m in mods),
            sum(m.stored_bytes() for m in mods))


def fused(owner: nn.Module) -> Int4Linear | None:
    """The joined q/k/v (of an attention module) or gate/up (of an MLP) that quantize_model made, if any."""
    return owner.__dict__.get(FUSED)
