"""Write the demo pair's model cards (README.md in each folder) from what training and evaluation recorded.

    python devscripts/eval_demo.py --json resources/models/demo-target/eval.json
    python devscripts/write_cards.py

Reads each folder's training.json (written by train_demo.py) and demo-target/eval.json (written by
eval_demo.py); every figure in the cards comes from those two files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "resources" / "models"


def params(folder: Path) -> tuple[int, int]:
    """(all parameters, non-embedding parameters) from the safetensors header."""
    sys.path.insert(0, str(ROOT))
    from specdesk.core.stheader import read_header

    tensors = read_header(folder / "model.safetensors")
    total = sum(t.numel for t in tensors.values())
    emb = sum(t.numel for n, t in tensors.items() if "embed_tokens" in n or "lm_head" in n)
    return total, total - emb


def minutes(s: float) -> str:
    return f"{s / 60:.0f} min"


def card(name: str, folder: Path, train: dict, ev: dict, other: dict) -> str:
    cfg = json.loads((folder / "config.json").read_text())
    total, non_emb = params(folder)
    size = (folder / "model.safetensors").stat().st_size
    acc = ev["acceptance"]
    rows = "\n".join(f"| {k} | {v['acceptance_rate']:.3f} | {v['tokens_per_step']:.2f} |" for k, v in acc.items())
    speed = ev.get("speed", {})
    srows = "\n".join(f"| {m} | {v['tokens_per_s']:.1f} | {v['speedup']:.2f}x |" for m, v in speed.items())
    role = ("the model whose output specdesk reproduces exactly" if name == "demo-target" else
            "it proposes tokens for demo-target to check, and was distilled to imitate it")
    objective = train["objective"]
    lines = [
        f"# {name}",
        "",
        f"specdesk's bundled demo {('target' if name == 'demo-target' else 'draft')} model; {role}. A small Python "
        "code model trained from scratch on the CPU, for demonstrating and testing speculative decoding on any "
        "machine with no download. It writes Python-looking code, often repetitive; it is not a useful code "
        "assistant.",
        "",
        "## Corpus and licence",
        "",
        f"- {train['corpus']}: {train['training_files']} files of the Python standard library's own sources "
        f"(every `Lib/**/*.py` except test suites, `idle_test`, `site-packages`), {train['train_tokens']:,} tokens.",
        "- Licence: the corpus is under the Python Software Foundation License; these weights are released under "
        "the same terms.",
        f"- Held out of the tokenizer and of both models' training (the evaluation set): "
        f"{', '.join(train['held_out'])} ({train['held_out_tokens']:,} tokens).",
        "",
        "## Model",
        "",
        f"- Llama architecture: {cfg['num_hidden_layers']} layers, hidden size {cfg['hidden_size']}, "
        f"{cfg['num_attention_heads']} attention heads, {cfg['num_key_value_heads']} key/value heads (GQA), "
        f"MLP {cfg['intermediate_size']}, RoPE, tied input/output embeddings, context {cfg['max_position_embeddings']}.",
        f"- Tokenizer: byte-level BPE, {cfg['vocab_size']} tokens, `<|endoftext|>` as the only special token "
        "(shared by both models).",
        f"- Parameters: {total:,} in all, {non_emb:,} outside the embeddings; float32 safetensors, "
        f"{size / 1e6:.1f} MB on disk.",
        f"- The pair: demo-target has {other['ratio']:.1f}x the draft's non-embedding parameters.",
        "",
        "## Training",
        "",
        f"- Objective: {objective}.",
        f"- {train['steps']} steps of {train['batch']} x {train['seq_len']} tokens, AdamW (betas 0.9/0.95, weight "
        "decay 0.1), warm-up then cosine decay, gradient clipping 1.0; fixed seeds; float32 on the CPU.",
        f"- Time: {minutes(train['seconds'])} measured on a 2-core x86-64 CPU while other jobs shared it "
        f"(see the README for the quiet-machine estimate). Final training loss {train['final_train_loss']:.3f}.",
        f"- Held-out loss: {train['held_out_loss']:.3f} nats per token (cross-entropy on the held-out modules).",
        "- Rebuild both from scratch: `python devscripts/train_demo.py --out resources/models` (resumable from "
        "checkpoints in `build/demo-train`).",
        "",
        "## Speculative decoding figures (held-out modules, greedy)",
        "",
        f"Prompts: {ev['prompt_tokens']} tokens from the middle of each held-out module; {ev['new_tokens']} new "
        "tokens each. Acceptance = accepted / drafted draft tokens; tokens/step = tokens per target forward pass.",
        "",
        "| k | acceptance | tokens/step |",
        "|---:|---:|---:|",
        rows,
        "",
    ]
    if speed:
        lines += [
            f"Speed on a 2-core CPU ({ev['threads']} threads), all methods interleaved in one process, "
            f"{ev['repeats']} repeats; speed-up = median of paired ratios to plain decoding (decode time).",
            "",
            "| method | tokens/s (median) | speed-up |",
            "|---|---:|---:|",
            srows,
            "",
            f"Best fixed k: {ev['best_fixed_k']}.",
            "",
        ]
    lines += [
        "Reproduce: `python devscripts/eval_demo.py` (all figures; `--acceptance-only` for the deterministic "
        "acceptance table). The figures above are in `demo-target/eval.json`.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    ev = json.loads((MODELS / "demo-target" / "eval.json").read_text())
    trains = {n: json.loads((MODELS / n / "training.json").read_text()) for n in ("demo-target", "demo-draft")}
    ratio = params(MODELS / "demo-target")[1] / params(MODELS / "demo-draft")[1]
    for name in trains:
        (MODELS / name / "README.md").write_text(card(name, MODELS / name, trains[name], ev, {"ratio": ratio}))
        print(f"wrote {MODELS / name / 'README.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
