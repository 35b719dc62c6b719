"""Real per-step costs on a CUDA GPU with models shaped like Llama-3-8B (target, nf4) and Llama-3.2-1B (draft).

Weights are random (no download is possible or needed): acceptance is meaningless, costs are real.
Measures, on the GPU:
- the target's verify cost for m = 1..9 positions (one forward pass over m new tokens),
- the draft's cost per drafted token (specdesk's lean path or transformers' forward),
- plain decoding's tokens/s against the memory-bandwidth bound (weight bytes read per token),
- the quick benchmark's methods on these models (speeds only; random models accept little),
and prints the speed-up each acceptance rate would give at each k from those measured costs.

    python devscripts/cuda_bench.py                 # on a CUDA machine (about 5 minutes on an H200)
    python devscripts/cuda_bench.py --tiny --device cpu   # a scaled-down smoke run anywhere
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LLAMA3_8B = dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                 intermediate_size=14336, vocab_size=128256, rope_theta=500000.0, tie_word_embeddings=False,
                 max_position_embeddings=8192)
LLAMA32_1B = dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                  intermediate_size=8192, vocab_size=128256, rope_theta=500000.0, tie_word_embeddings=True,
                  max_position_embeddings=8192)
TINY_T = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=512, vocab_size=8192, tie_word_embeddings=False, max_position_embeddings=2048)
TINY_D = dict(hidden_size=128, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
              intermediate_size=256, vocab_size=8192, tie_word_embeddings=True, max_position_embeddings=2048)
BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12, "L40S": 0.864e12, "RTX 4090": 1.008e12}


def random_model(cfg: dict, device: str, dtype, quant: str):
    """A randomly initialised LlamaForCausalLM, built layer by layer on the device (nf4: quantized as built)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**cfg)
    config._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model = model.to_empty(device=device).to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
        for name, mod in model.named_modules():
            if "norm" in name and hasattr(mod, "weight"):
                mod.weight.fill_(1.0)
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    model.model.rotary_emb = LlamaRotaryEmbedding(config).to(device)  # its buffers were left on meta
    if quant in ("nf4", "fp4"):
        import bitsandbytes as bnb

        for layer in model.model.layers:
            for parent in (layer.self_attn, layer.mlp):
                for child_name, child in list(parent.named_children()):
                    if isinstance(child, torch.nn.Linear):
                        q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=False,
                                              compute_dtype=dtype, quant_type=quant, device="cpu")
                        q.weight = bnb.nn.Params4bit(child.weight.data.cpu(), requires_grad=False,
                                                     quant_type=quant).to(device)
                        setattr(parent, child_name, q)
        torch.cuda.empty_cache() if device.startswith("cuda") else None
    model.eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def loaded(model, tokenizer, name: str, quant: str, device: str):
    from specdesk.core.loading import LoadedModel

    rows = model.get_input_embeddings().weight.shape[0]
    return LoadedModel(name=name, path=Path("."), model=model, tokenizer=tokenizer, quant=quant, double_quant=False,
                       dtype=str(next(model.parameters()).dtype), device=device, vocab=min(len(tokenizer), rows),
                       embedding_rows=rows, eos_ids=frozenset(), params=sum(p.numel() for p in model.parameters()),
                       weight_bytes=int(model.get_memory_footprint()))


def timed(fn, sync, repeats: int) -> float:
    fn()
    sync()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="small shapes (a smoke test on any machine)")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()

    import torch

    from specdesk.core.engine import Engine
    from specdesk.core.loading import load_tokenizer, bundled_models_dir

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here (use --tiny --device cpu for a smoke run)", file=sys.stderr)
        return 0
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    dtype = torch.bfloat16 if cuda else torch.float32
    t_cfg, d_cfg = (TINY_T, TINY_D) if args.tiny else (LLAMA3_8B, LLAMA32_1B)
    quant = "nf4" if cuda else "none"
    target = random_model(t_cfg, args.device, dtype, quant)
    draft = random_model(d_cfg, args.device, dtype, "none")
    tok = load_tokenizer(bundled_models_dir() / "demo-target")
    engine = Engine(loaded(target, tok, "llama-3-8b-shaped (random)", quant, args.device),
                    loaded(draft, tok, "llama-3.2-1b-shaped (random)", "none", args.device), "model")
    out: dict = {"device": torch.cuda.get_device_name() if cuda else "cpu", "target_quant": quant,
                 "target_weight_bytes": engine.target.weight_bytes, "draft_weight_bytes": engine.draft.weight_bytes,
                 "lean_draft": engine.describe()["lean_draft"],
                 "lean_target": engine.describe()["lean_target"], "context": args.context}

    # verify cost for m new positions after a context of args.context tokens, through the engine's target
    # runner (its lean path when the architecture allows, as in decoding)
    ctx = torch.randint(0, 4000, (1, args.context), device=args.device)
    runner = engine._runner
    runner.prefill(ctx[0].tolist(), args.context + 16)
    verify = {}
    for m in range(1, 10):
        x = torch.randint(0, 4000, (m,), device=args.device)

        def step():
            runner.verify(x)
            runner.rollback(m)

        verify[m] = timed(step, sync, 10)
    out["verify_seconds_by_positions"] = verify
    # draft cost per token through the engine's drafter (lean path when the architecture allows)
    drafter = engine._model_drafter
    drafter.start(ctx[0].tolist()[:-1], args.context + 64)
    from specdesk.core.sampling import SamplingConfig

    ids = ctx[0].tolist()

    def draft_step():
        drafter.propose(ids, 4, SamplingConfig(), None)
        drafter.commit(len(ids) - 1)  # keep all but the last context token, as after a real step

    out["draft_seconds_per_token"] = timed(draft_step, sync, 10) / 4
    # plain decoding vs the bandwidth bound
    r = engine.generate(ids, drafter="none", max_new_tokens=args.max_new_tokens)
    out["plain_tokens_per_s"] = r.stats.tokens_per_second
    name = out["device"]
    bw = next((v for k, v in BANDWIDTH.items() if k in name), None)
    if bw:
        out["bandwidth_bound_tokens_per_s"] = bw / engine.target.weight_bytes
        out["fraction_of_bound"] = out["plain_tokens_per_s"] / out["bandwidth_bound_tokens_per_s"]
    for k in (2, 4, 6):
        rk = engine.generate(ids, k=k, max_new_tokens=args.max_new_tokens)
        out[f"draft_k{k}_tokens_per_s"] = rk.stats.tokens_per_second
    # what each acceptance rate would give, from these costs
    c_plain = verify[1]
    table = {}
    for a in (0.5, 0.6, 0.7, 0.8, 0.9):
        row = {}
        for k in (1, 2, 4, 6, 8):
            e = (1 - a ** (k + 1)) / (1 - a)
            row[k] = e * c_plain / (k * out["draft_seconds_per_token"] + verify[min(k + 1, 9)])
        table[a] = row
    out["predicted_speedup_by_acceptance_and_k"] = table
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
