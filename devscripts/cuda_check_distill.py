"""Check ``specdesk distill`` on a CUDA machine with an 8B-shaped target (Llama 3 8B's shapes, random weights).

    python devscripts/cuda_check_distill.py                 # 8B shapes, bf16, on cuda: data, training, load, parity
    python devscripts/cuda_check_distill.py --small --device cpu   # the same path on a small target, on the CPU

Builds the target folder (random weights, bf16: ~16 GB on disk in a temporary folder, the demo tokenizer's 4,096
tokens padded to the 8B vocabulary's 128,256 rows), runs the distiller on it for a few minutes (the target answers
the prompts in bf16 on the GPU, the draft trains under bf16 autocast), loads the draft as the target's draft and
checks greedy output token for token against plain decoding. Prints one JSON object: times per phase, the draft's
size against the target's, GPU memory peak, parity. Exits 1 on a parity failure. Written on a CPU-only machine: not
run there (the CUDA path of the distiller is exercised only by this script).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

SHAPES_8B = dict(hidden=4096, layers=32, heads=32, kv_heads=8, intermediate=14336, vocab_rows=128256)
SMALL = dict(hidden=128, layers=4, heads=4, kv_heads=2, intermediate=256, vocab_rows=4096)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true", help="a small target instead of 8B shapes")
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--prompts", type=int, default=128)
    args = ap.parse_args()

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: nothing to check (use --device cpu --small on the CPU)", file=sys.stderr)
        return 0
    from conftest import make_llama

    import specdesk
    from specdesk.core.distill.pipeline import DistillConfig, distill

    tmp = Path(tempfile.mkdtemp(prefix="specdesk-distill-check-"))
    report: dict = {"device": args.device, "shapes": SMALL if args.small else SHAPES_8B}
    try:
        t0 = time.perf_counter()
        shapes = SMALL if args.small else SHAPES_8B
        torch.set_default_dtype(torch.bfloat16)  # built and saved in bf16 (8B shapes: 16 GB, not 32)
        try:
            # initialised on the GPU where there is one: 8B random normals on the CPU take about a minute
            with torch.device(args.device):
                target = make_llama(tmp / "target", init_std=0.02, **shapes)
        finally:
            torch.set_default_dtype(torch.float32)
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
        report["build_s"] = round(time.perf_counter() - t0, 1)
        if args.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        cfg = DistillConfig(target=str(target), out=tmp / "draft", minutes=args.minutes, device=args.device,
                            train_prompts=args.prompts, held_out_prompts=32, max_new_tokens=64, answer_batch=32,
                            head_vocab=2048)
        phases: dict[str, float] = {}
        last, t = None, time.perf_counter()
        for ev in distill(cfg):
            if ev.phase != last:
                now = time.perf_counter()
                if last is not None:
                    phases[last] = round(now - t, 1)
                last, t = ev.phase, now
            final = ev
        report["phases_s"] = phases
        report["steps"], report["agreement"] = final.step, final.agreement
        if args.device.startswith("cuda"):
            report["gpu"] = torch.cuda.get_device_name()
            report["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        t0 = time.perf_counter()
        spec = specdesk.load(str(target), str(tmp / "draft"), drafter="model", device=args.device)
        plain = specdesk.load(str(target), drafter="none", device=args.device)
        report["load_pair_and_plain_s"] = round(time.perf_counter() - t0, 1)
        report["draft_bytes"], report["target_bytes"] = spec.draft.weight_bytes, spec.target.weight_bytes
        from cuda_check_engine import divergence

        ok, report["divergences"] = True, []
        for prompt in ("def f(x):", "import os\n", "class A:\n"):
            a = spec.generate(prompt, max_new_tokens=48, k=4).token_ids
            b = plain.generate(prompt, max_new_tokens=48).token_ids
            ok &= a == b
            if a != b:  # against the plain engine's own tokens, scored by the target model
                report["divergences"].append(divergence(plain.target.model, plain.encode(prompt), b, a))
        report["greedy_parity"] = ok
        print(json.dumps(report, indent=2))
        return 0 if ok else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
