"""Train specdesk's bundled demo pair from scratch on the CPU.

Corpus: the Python sources of the running interpreter's standard library (PSF licence):
every ``Lib/**/*.py`` except test suites, ``site-packages`` and ``__pycache__``. The modules in
``HELD_OUT`` are kept out of the tokenizer and of both models' training; they are the evaluation set.

Steps (each resumable from checkpoints in ``--work``):
1. a byte-level BPE tokenizer (4096 tokens) on the training files;
2. ``demo-target``: a 12-layer, 256-wide Llama (GQA, 9.4M non-embedding parameters), next-token loss;
3. ``demo-draft``: a 2-layer, 192-wide Llama (0.8M non-embedding parameters), distilled from the target:
   forward KL from the target's full next-token distribution on the same corpus;
4. both written as Hugging Face folders to ``--out``.

The shape follows the CPU's costs (see the model cards): a forward pass of a small model on 2 cores
is dominated by fixed per-layer work, so the target is deep (its cost per token is high) and the draft
is shallow (cheap), while two draft layers are enough for the "copy what came before" heads that code needs.

    python devscripts/train_demo.py --out resources/models --work build/demo-train

Fixed seeds. About 75 minutes on a quiet 2-core x86-64 CPU (3.4 s per target step x 800, 1.6 s per draft
step x 1000, plus tokenizer and held-out evaluations); the shipped run took longer because other jobs shared
the CPU (the model cards give its measured times). Interrupted runs resume from the last checkpoint.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from specdesk.core.bench.suite import HELD_OUT_MODULES as HELD_OUT  # noqa: E402  (one list for training and eval)

EXCLUDED_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__"}
EOS = "<|endoftext|>"
VOCAB = 4096
SEQ = 512

TARGET_CFG = dict(hidden_size=256, num_hidden_layers=12, intermediate_size=768,
                  num_attention_heads=4, num_key_value_heads=2)
DRAFT_CFG = dict(hidden_size=192, num_hidden_layers=2, intermediate_size=512,
                 num_attention_heads=3, num_key_value_heads=1)


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def corpus_files() -> tuple[list[Path], list[Path]]:
    """(training files, held-out files), sorted so every run sees the same order."""
    lib = stdlib_dir()
    train, held = [], []
    for p in sorted(lib.rglob("*.py")):
        rel = p.relative_to(lib)
        if EXCLUDED_DIRS.intersection(rel.parts):
            continue
        (held if str(rel) in HELD_OUT else train).append(p)
    return train, held


def read(p: Path) -> str:
    return p.read_text(encoding="utf-8", errors="replace")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------- tokenizer

def build_tokenizer(files: list[Path], out: Path) -> None:
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    if (out / "tokenizer.json").exists():
        return
    tok = ByteLevelBPETokenizer(add_prefix_space=False)
    tok.train([str(p) for p in files], vocab_size=VOCAB, min_frequency=2, special_tokens=[EOS],
              show_progress=False)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok._tokenizer, bos_token=EOS, eos_token=EOS,
                                   unk_token=EOS, pad_token=EOS, model_max_length=2048)
    fast.save_pretrained(out)


def encode(files: list[Path], tok_dir: Path, cache: Path) -> np.ndarray:
    """The corpus as one uint16 token stream, documents separated by EOS."""
    if cache.exists():
        return np.load(cache)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_dir)
    eos = tok.convert_tokens_to_ids(EOS)
    ids: list[int] = []
    for p in files:
        ids.extend(tok(read(p), add_special_tokens=False)["input_ids"])
        ids.append(eos)
    arr = np.asarray(ids, dtype=np.uint16)
    np.save(cache, arr)
    return arr


def batches(data: np.ndarray, batch: int, seed: int, start_step: int):
    """Random windows of SEQ+1 tokens; the generator is re-seeded per step so resuming is exact."""
    step = start_step
    while True:
        rng = np.random.default_rng([seed, step])
        starts = rng.integers(0, len(data) - SEQ - 1, size=batch)
        x = np.stack([data[s:s + SEQ + 1] for s in starts]).astype(np.int64)
        yield step, torch.from_numpy(x)
        step += 1


# ----------------------------------------------------------------------------- models

def llama(cfg: dict, tok_dir: Path):
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tok_dir)
    eos = tok.convert_tokens_to_ids(EOS)
    config = LlamaConfig(vocab_size=len(tok), max_position_embeddings=2048, rope_theta=10000.0,
                         tie_word_embeddings=True, bos_token_id=eos, eos_token_id=eos,
                         pad_token_id=eos, rms_norm_eps=1e-5, **cfg)
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config)


def lr_at(step: int, total: int, peak: float, warmup: int = 40) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def make_opt(model, lr: float):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": rest, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))


def train(name: str, model, data: np.ndarray, steps: int, batch: int, peak_lr: float, work: Path,
          seed: int, teacher=None, ckpt_every: int = 50) -> dict:
    """Train `model` (next-token loss, or forward KL to `teacher` when given); resumable."""
    ckpt = work / f"{name}.ckpt.pt"
    opt = make_opt(model, peak_lr)
    start, elapsed, losses = 0, 0.0, []
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start, elapsed, losses = state["step"], state["elapsed"], state["losses"]
        log(f"{name}: resumed at step {start}")
    if start >= steps:
        return {"steps": steps, "seconds": elapsed, "final_train_loss": float(np.mean(losses[-20:]))}
    model.train()
    t0 = time.perf_counter() - elapsed
    for step, xy in batches(data, batch, seed, start):
        if step >= steps:
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, peak_lr)
        x, y = xy[:, :-1], xy[:, 1:]
        logits = model(input_ids=x).logits  # (B, SEQ, V)
        if teacher is None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        else:
            with torch.no_grad():
                t_logp = F.log_softmax(teacher(input_ids=x).logits, dim=-1)
            loss = F.kl_div(F.log_softmax(logits, dim=-1), t_logp, log_target=True, reduction="batchmean") / x.shape[1]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        done = step + 1
        if done % 10 == 0:
            log(f"{name}: step {done}/{steps} loss {np.mean(losses[-10:]):.3f} "
                f"({time.perf_counter() - t0:.0f}s)")
        if done % ckpt_every == 0 or done == steps:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": done,
                        "elapsed": time.perf_counter() - t0, "losses": losses}, ckpt)
    return {"steps": steps, "seconds": time.perf_counter() - t0,
            "final_train_loss": float(np.mean(losses[-20:]))}


@torch.no_grad()
def held_out_loss(model, data: np.ndarray) -> float:
    """Mean next-token cross-entropy (nats) over the held-out stream in non-overlapping windows."""
    model.eval()
    total, count = 0.0, 0
    for s in range(0, len(data) - SEQ - 1, SEQ):
        xy = torch.from_numpy(data[s:s + SEQ + 1].astype(np.int64))[None]
        logits = model(input_ids=xy[:, :-1]).logits
        total += float(F.cross_entropy(logits[0], xy[0, 1:], reduction="sum"))
        count += SEQ
    return total / count


def save(model, tok_dir: Path, out: Path, info: dict) -> None:
    from transformers import AutoTokenizer, GenerationConfig

    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(tok_dir).save_pretrained(out)
    eos = model.config.eos_token_id
    GenerationConfig(bos_token_id=eos, eos_token_id=eos, pad_token_id=eos).save_pretrained(out)
    (out / "training.json").write_text(json.dumps(info, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("resources/models"))
    ap.add_argument("--work", type=Path, default=Path("build/demo-train"))
    ap.add_argument("--target-steps", type=int, default=800)
    ap.add_argument("--draft-steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=4)
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    args.work.mkdir(parents=True, exist_ok=True)
    tok_dir = args.work / "tokenizer"
    train_files, held_files = corpus_files()
    log(f"corpus: {len(train_files)} training files, {len(held_files)} held out ({', '.join(HELD_OUT)})")
    t_start = time.perf_counter()
    build_tokenizer(train_files, tok_dir)
    data = encode(train_files, tok_dir, args.work / "train.npy")
    held = encode(held_files, tok_dir, args.work / "held.npy")
    log(f"tokens: train {len(data):,}, held out {len(held):,}")

    torch.manual_seed(1)
    target = llama(TARGET_CFG, tok_dir)
    t_info = train("target", target, data, args.target_steps, args.batch, 1.5e-3, args.work, seed=1)
    target.eval()
    t_info["held_out_loss"] = held_out_loss(target, held)
    log(f"target held-out loss {t_info['held_out_loss']:.3f}")

    torch.manual_seed(2)
    draft = llama(DRAFT_CFG, tok_dir)
    for p in target.parameters():
        p.requires_grad_(False)
    d_info = train("draft", draft, data, args.draft_steps, args.batch, 3e-3, args.work, seed=2, teacher=target)
    d_info["held_out_loss"] = held_out_loss(draft, held)
    log(f"draft held-out loss {d_info['held_out_loss']:.3f}")

    common = {"corpus": f"CPython {sys.version.split()[0]} Lib/**/*.py", "training_files": len(train_files),
              "held_out": list(HELD_OUT), "train_tokens": int(len(data)), "held_out_tokens": int(len(held)),
              "seq_len": SEQ, "batch": args.batch, "torch": torch.__version__,
              "total_seconds": time.perf_counter() - t_start}
    save(target, tok_dir, args.out / "demo-target", {**common, **t_info, "objective": "next-token cross-entropy"})
    save(draft, tok_dir, args.out / "demo-draft",
         {**common, **d_info, "objective": "forward KL to demo-target's next-token distribution"})
    log(f"done in {time.perf_counter() - t_start:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
