"""The benchmark's Markdown and JSON reports (plain strings and dicts; printing is the caller's job)."""

from __future__ import annotations

from specdesk.core.bench.analysis import Goal, Row, summaries


def _f(x, fmt: str = "{:.2f}", none: str = "-") -> str:
    return none if x is None else fmt.format(x)


def _positions(xs) -> str:
    """Acceptance at draft positions 1, 2, ... as '0.31, 0.44, 0.52' ('-' for a position never reached)."""
    return ", ".join(_f(x) for x in xs) if xs else "-"


def summary_table(rows: list[Row]) -> list[str]:
    """Per category: the draft at its best fixed k, k=auto against it, prompt lookup and the draft sampled."""
    sums = summaries(rows)
    if not sums:
        return []
    t = next((s.sampled_temperature for s in sums if s.sampled_temperature is not None), None)
    out = ["", "## Summary", "",
           "Greedy unless said. Best fixed k: the draft's fixed-k row with the highest speed-up; its acceptance, "
           "tokens per target pass and acceptance at draft positions 1..k (of the steps that drafted a position "
           "with every earlier one accepted, the share that accepted it). k=auto / best: the ratio of their "
           "speed-ups." + (f" Sampled: the draft's best row at temperature {t:g}." if t is not None else "")
           + " Draft+lookup: drafter model+lookup at k=auto (prompt lookup's continuation where the text repeats, "
           "the draft elsewhere). Tree: the draft's sibling-tree rows (greedy; the draft's runner-up tokens "
           "checked beside its chain in the same pass): the best fixed-k tree row and its tokens per pass, tree "
           "k=auto, tree with lookup.", "",
           "| category | plain tok/s | best fixed k | its tok/s | its speed-up | k=auto speed-up | k=auto / best "
           "| prompt lookup, best | draft+lookup | sampled, best | acceptance | tokens/pass | k=auto tokens/pass "
           "| acceptance by draft position | tree, best | tree tokens/pass | tree k=auto | tree+lookup |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for s in sums:
        lookup = f"{s.lookup_speedup:.2f}x ({s.lookup})" if s.lookup else "-"
        sampled = f"{s.sampled_speedup:.2f}x ({s.sampled})" if s.sampled else "-"
        out.append(f"| {s.category} | {_f(s.plain_tokens_per_s, '{:.1f}')} | {s.best_k or '-'} "
                   f"| {_f(s.best_k_tokens_per_s, '{:.1f}')} | {_f(s.best_k_speedup, '{:.2f}x')} "
                   f"| {_f(s.auto_speedup, '{:.2f}x')} | {_f(s.auto_vs_best_k)} | {lookup} "
                   f"| {_f(s.hybrid_speedup, '{:.2f}x')} | {sampled} "
                   f"| {_f(s.best_k_acceptance)} | {_f(s.best_k_tokens_per_pass)} | {_f(s.auto_tokens_per_pass)} "
                   f"| {_positions(s.best_k_position_acceptance)} "
                   f"| {f'{s.tree_best_speedup:.2f}x ({s.tree_best})' if s.tree_best else '-'} "
                   f"| {_f(s.tree_best_tokens_per_pass)} | {_f(s.tree_auto_speedup, '{:.2f}x')} "
                   f"| {_f(s.tree_hybrid_speedup, '{:.2f}x')} |")
    return out


def markdown(rows: list[Row], goal_list: list[Goal], meta: dict) -> str:
    out = [f"# specdesk bench: {meta.get('target')} + {meta.get('draft')}", ""]
    if meta.get("loaded"):  # quantization, dtype
        out += ["Loaded as: " + "; ".join(f"{role} [{how}]" for role, how in meta["loaded"].items()) + ".", ""]
    cpu = f"CPU: {meta['cpu']}; " if meta.get("cpu") else ""  # figures differ by CPU (AVX2, AVX-512, AMX paths)
    out.append(f"Device: {meta.get('device')}; {cpu}{meta.get('cpu_threads')} threads; torch {meta.get('torch')}, "
               f"transformers {meta.get('transformers')}; mode: {meta.get('mode')}; repeats {meta.get('repeats')}; "
               f"max new tokens {meta.get('max_new_tokens')}; wall time {meta.get('seconds', 0):.0f} s."
               + (f" Kernels: {meta['cpu_kernels']}." if meta.get("cpu_kernels") else ""))
    out.append("")
    out.append("tok/s: median over runs (decode only for specdesk, whole call for transformers). After 1st step: "
               "tokens after the first step over the time after it, the same measure for every method (transformers' "
               "first step holds both models' prefill). "
               "Speed-up: median of paired ratios to plain decoding of the same prompt and repeat. "
               "Predicted: Leviathan et al.'s E = (1 - a^(k+1)) / (1 - a) with the measured per-token acceptance a, "
               "draft and verify costs. Identical: greedy outputs token-identical to plain decoding. "
               "hf-assisted k=N: transformers drafting exactly N tokens a step; hf-assisted default: its own "
               "rule (up to 20 tokens, cut where the draft's confidence falls under 0.4). "
               "Tokens/pass: tokens emitted per target forward pass. By position: acceptance at draft positions "
               "1, 2, ... given the earlier ones accepted.")
    out += summary_table(rows)
    for temp in sorted({r.temperature for r in rows}):
        for cat in sorted({r.category for r in rows}):
            sel = [r for r in rows if r.category == cat and r.temperature == temp]
            if not sel:
                continue
            out += ["", f"## {cat}, temperature {temp:g}", "",
                    "| method | tok/s | after 1st step tok/s | whole-call tok/s | speed-up | whole-call speed-up | acceptance | a | tokens/pass "
                    "| predicted | efficiency | identical | mean k | by position |",
                    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
            for r in sel:
                out.append(f"| {r.method} | {r.tokens_per_s:.1f} | {_f(r.steady_tokens_per_s, '{:.1f}')} "
                           f"| {r.wall_tokens_per_s:.1f} | {_f(r.speedup, '{:.2f}x')} "
                           f"| {_f(r.wall_speedup, '{:.2f}x')} | {_f(r.acceptance_rate)} | {_f(r.alpha)} "
                           f"| {_f(r.mean_accepted_length)} | {_f(r.predicted_speedup, '{:.2f}x')} "
                           f"| {_f(r.efficiency)} | {r.identical or '-'} | {_f(r.mean_k, '{:.1f}')} "
                           f"| {_positions(r.position_acceptance)} |")
    if meta.get("also"):
        out += ["", "## Also measured", ""] + [f"- {line}" for line in meta["also"]]
    if goal_list:
        out += ["", "## Goals", "", "| goal | target | measured | met |", "|---|---|---|---|"]
        for g in goal_list:
            out.append(f"| {g.name} | {g.target} | {g.measured} | {'yes' if g.met else '**no**'} |")
    return "\n".join(out) + "\n"


def to_json(rows: list[Row], goal_list: list[Goal], meta: dict, runs: list) -> dict:
    return {"meta": meta, "summary": [s.to_dict() for s in summaries(rows)], "rows": [r.to_dict() for r in rows],
            "goals": [g.to_dict() for g in goal_list],
            "runs": [r.to_dict() for r in runs]}
