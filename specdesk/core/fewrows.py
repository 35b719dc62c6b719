"""Matrix products over a few rows on a CPU: ``w @ x.T`` where it beats ``F.linear``, chosen by measuring.

Decoding multiplies every weight matrix by 1 row (plain decoding, a draft's step) or k + 1 rows (a verify pass).
On this project's 2-core AMD EPYC (Zen 4, MKL with ``MKL_CBWR=AVX2``), ``F.linear`` on one row reads the weights
at about 11 GB/s (a matrix-vector kernel), while the same product written as ``torch.mm(w, x.T)`` over 2 rows
runs MKL's matrix-matrix kernel at 25-35 GB/s: a float32 forward pass of SmolLM2-135M over 1 position took
55 ms as ``F.linear`` and 26 ms this way, over 5 positions 73 and 43 ms; over 9 positions ``F.linear`` was
faster again (67 vs 73 ms). Other CPUs and libraries (Intel's AVX-512 and AMX paths) may differ, so nothing
is assumed: the first lean decoder of a model times both ways on that model (a few forward passes over 1, 3,
5 and 8 positions, best of 2, into its own still empty buffers, ~1 s on SmolLM2) and keeps the largest row count up to which the product
form won by at least 5%, and at every smaller count tried. ``SPECDESK_FEW_ROWS=N`` sets it instead (0: never).

Both forms compute the same sums in another order: logits differ by float32 rounding (~5e-5 on SmolLM2's
logits of magnitude ~20), as a verify pass over k + 1 positions already differs from one-position passes.
"""

from __future__ import annotations

import logging
import os
import time

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

TRIED = (1, 3, 5, 8)  # row counts timed: plain decoding, verify passes at k = 2, 4, 7
MIN_GAIN = 0.95  # the product form must take at most 95% of F.linear's time
CALIBRATION_LIMIT_BYTES = 4 * 2**30  # larger models: too slow to time; F.linear as before
ATTR = "_specdesk_few_rows"


def mm_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, w, b) for x (n, in) as torch.mm(w, x.T), one row padded to two (MKL's matrix-vector kernel
    is the slow one) -> (n, out), contiguous."""
    n = x.shape[0]
    xt = torch.cat([x, x]).t() if n == 1 else x.t()
    out = torch.mm(w, xt)[:, :n].t().contiguous()
    return out if b is None else out + b


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, rows: int) -> torch.Tensor:
    """F.linear, through :func:`mm_linear` for a 2-D x of at most ``rows`` rows."""
    if x.dim() == 2 and x.shape[0] <= rows:
        return mm_linear(x, w, b)
    return F.linear(x, w, b)


def forced_rows() -> int | None:
    text = os.environ.get("SPECDESK_FEW_ROWS", "").strip()
    if not text:
        return None
    try:
        return max(0, int(text))
    except ValueError:
        log.warning("SPECDESK_FEW_ROWS=%r is not a whole number: ignored", text)
        return None


def rows_for(model, dec) -> int:
    """The row count up to which ``model``'s lean decoders use the product form (measured once per model object,
    on ``dec``, a new LeanDecoder of it whose buffers hold nothing yet)."""
    forced = forced_rows()
    if forced is not None:
        return forced
    cached = model.__dict__.get(ATTR)
    if cached is not None:
        return cached
    if dec.capacity < max(TRIED):  # too short a sequence to time in: F.linear this once, measure another time
        return 0
    rows = 0
    params = list(model.parameters())
    size = sum(p.numel() * p.element_size() for p in params)
    # float32 only: the slow one-row kernel is MKL's sgemv; bfloat16 products (q4's head) run oneDNN's instead,
    # where the product form measured slower
    if params and params[0].device.type == "cpu" and params[0].dtype == torch.float32 \
            and size <= CALIBRATION_LIMIT_BYTES:
        rows = _measure(dec)
    model.__dict__[ATTR] = rows
    return rows


@torch.inference_mode()
def _measure(dec) -> int:
    # any ids will do, within the vocabulary (a tiny test model has 8 tokens: id 8 failed whenever the timings
    # went on to the 8-row pass)
    ids = torch.arange(1, max(TRIED) + 1, device=dec.embed.device) % dec.embed.shape[0]

    def best(rows: int, n: int) -> float:
        dec.few_rows = rows
        times = []
        for _ in range(2):
            dec.crop(0)
            t0 = time.perf_counter()
            dec.forward(ids[:n], every=True)
            times.append(time.perf_counter() - t0)
        dec.crop(0)
        return min(times)

    best(0, 1), best(max(TRIED), 1)  # first calls pay one-off costs
    rows = 0
    found = []
    for n in TRIED:
        a, b = best(0, n), best(max(TRIED), n)
        found.append(f"{n}: {a * 1e3:.1f} / {b * 1e3:.1f} ms")
        if b > MIN_GAIN * a:
            break
        rows = n
    log.info("few-row products (F.linear / w @ x.T): %s -> up to %d rows", ", ".join(found), rows)
    return rows
