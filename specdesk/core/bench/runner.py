"""Running the benchmark: every method on every prompt, interleaved so machine drift cancels.

For each repeat and prompt, all methods run back to back (in an order rotated each time), so each
method's run has a plain-decoding run of the same prompt minutes or seconds away; speed-ups are the
medians of those paired ratios.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from specdesk.core.bench.suite import Prompt
from specdesk.core.tree import SUGGESTED, widths_text

PLAIN = "plain"


@dataclass(frozen=True)
class Method:
    name: str
    kind: str  # "specdesk", "hf-assisted" or "hf-lookup"
    drafter: str = "none"
    k: int | str = 0
    tree: tuple[int, ...] = ()  # greedy sibling tree widths (core/tree.py); () = a chain


@dataclass
class Run:
    category: str
    prompt: str
    method: str
    kind: str
    k: int | str
    temperature: float
    repeat: int
    new_tokens: int
    wall_s: float  # the whole call: prefill + decode (the only time Hugging Face's generate offers)
    decode_s: float | None = None
    # after the first step (which holds both models' prefill in transformers' generate): the steady decode
    # rate, measured the same way for every method, so specdesk and transformers compare like for like
    steady_s: float | None = None
    steady_tokens: int = 0
    forwards: int | None = None
    drafted: int | None = None
    accepted: int | None = None
    draft_s: float | None = None
    verify_s: float | None = None
    successes: float = 0.0  # per-token acceptance trials (see adaptive.py): successes / trials
    trials: float = 0.0
    chosen_k: list[int] = field(default_factory=list)
    # per draft position i (0-based): steps that drafted position i with positions before it all accepted,
    # and steps that accepted it (acceptance at position i+1 = accepted / reached)
    position_reached: list[int] = field(default_factory=list)
    position_accepted: list[int] = field(default_factory=list)
    token_ids: tuple[int, ...] = ()

    @property
    def wall_tps(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def decode_tps(self) -> float | None:
        if self.decode_s is None:
            return None
        return self.new_tokens / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def steady_tps(self) -> float | None:
        if not self.steady_s or self.steady_tokens <= 0:
            return None
        return self.steady_tokens / self.steady_s

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "token_ids"}
        d["token_ids"] = list(self.token_ids)
        return d


def default_methods(ks: tuple[int, ...], hf_ks: tuple[int, ...], lookup_k: int, has_draft: bool,
                    with_hf: bool = True, hf_default: bool = False, hf_assisted: bool = True,
                    tree: tuple[int, ...] = SUGGESTED, has_phrases: bool = False) -> list[Method]:
    """``hf_assisted``: False leaves out transformers' assisted generation (a draft it cannot use). ``tree``: the
    draft's sibling-tree rows (fixed k from 2 to 4 among ``ks``, k=auto, with lookup) use these widths; () = none.
    Tree rows apply to greedy decoding only (sampled decoding drafts a chain), so they run greedy. ``has_phrases``:
    the draft has a table of the target's phrases, measured as drafter "phrases" (no model pass) beside lookup."""
    methods = [Method(PLAIN, "specdesk", "none", 0)]
    if has_draft:
        methods += [Method(f"draft k={k}", "specdesk", "model", k) for k in ks]
        methods.append(Method("draft k=auto", "specdesk", "model", "auto"))
        methods.append(Method("draft+lookup k=auto", "specdesk", "model+lookup", "auto"))
        if tree:
            name = "tree " + widths_text(tree)
            methods += [Method(f"{name} k={k}", "specdesk", "model", k, tree) for k in ks if 2 <= k <= 4]
            methods.append(Method(f"{name} k=auto", "specdesk", "model", "auto", tree))
            methods.append(Method(f"{name}+lookup k=auto", "specdesk", "model+lookup", "auto", tree))
    methods.append(Method(f"lookup k={lookup_k}", "specdesk", "ngram", lookup_k))
    methods.append(Method("lookup k=auto", "specdesk", "ngram", "auto"))
    if has_phrases:
        methods.append(Method("phrases k=auto", "specdesk", "phrases", "auto"))
    if with_hf:
        if has_draft and hf_assisted:
            methods += [Method(f"hf-assisted k={k}", "hf-assisted", "model", k) for k in hf_ks]
            if hf_default:  # what a transformers user gets without tuning: its own draft-length rule
                methods.append(Method("hf-assisted default", "hf-assisted", "model", "default"))
        methods.append(Method(f"hf-lookup k={lookup_k}", "hf-lookup", "ngram", lookup_k))
    return methods


def position_counts(steps) -> tuple[list[int], list[int]]:
    """Per draft position: how many steps reached it (drafted it, every earlier position accepted) and how many
    accepted it. ``steps``: objects with ``drafted`` and ``accepted`` (the engine's step events)."""
    n = max((s.drafted for s in steps), default=0)
    reached, accepted = [0] * n, [0] * n
    for s in steps:
        for j in range(min(s.accepted + 1, s.drafted)):
            reached[j] += 1
        for j in range(s.accepted):
            accepted[j] += 1
    return reached, accepted


def prompt_ids(engine, prompt: Prompt) -> list[int]:
    """A prompt's token ids: chat prompts as one user message through the target's chat template."""
    if prompt.chat:
        return engine.chat_ids([{"role": "user", "content": prompt.text}])
    return engine.encode(prompt.text)


def _sync(engine) -> None:
    if str(engine.device).startswith("cuda"):
        torch.cuda.synchronize()


def run_specdesk(engine, method: Method, ids: list[int], temperature: float, max_new: int, seed: int,
                 cancel: threading.Event | None = None) -> Run:
    _sync(engine)
    t0 = time.perf_counter()
    r = engine.generate(ids, drafter=method.drafter, k=method.k, max_new_tokens=max_new, temperature=temperature,
                        seed=seed, cancel=cancel, tree=method.tree)
    _sync(engine)
    wall = time.perf_counter() - t0
    succ = trials = 0.0
    for s in r.steps:
        if s.drafted:
            succ += s.accepted
            trials += s.accepted + (1 if s.accepted < s.drafted else 0)
    st = r.stats
    first = r.steps[0] if r.steps else None
    steady_s = (st.decode_seconds - first.step_s) if first is not None and len(r.steps) > 1 else None
    steady_tokens = st.new_tokens - len(first.token_ids) if first is not None else 0
    reached, accepted = position_counts(r.steps)
    return Run(category="", prompt="", method=method.name, kind=method.kind, k=method.k, temperature=temperature,
               repeat=0, new_tokens=st.new_tokens, wall_s=wall, decode_s=st.decode_seconds,
               forwards=st.target_forwards, drafted=st.drafted, accepted=st.accepted, draft_s=st.draft_seconds,
               verify_s=st.verify_seconds, steady_s=steady_s, steady_tokens=steady_tokens, successes=succ, trials=trials,
               chosen_k=[s.k for s in r.steps] if method.k == "auto" else [], position_reached=reached,
               position_accepted=accepted, token_ids=tuple(r.token_ids))


class _StepClock:
    """A transformers streamer that only notes when each batch of new tokens arrives (the first put is the prompt)."""

    def __init__(self) -> None:
        self.puts: list[tuple[float, int]] = []
        self.prompt_seen = False

    def put(self, value) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.puts.append((time.perf_counter(), int(value.numel())))

    def end(self) -> None:
        pass


_ASSISTANT_FIELDS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


@contextmanager
def _assistant_drafts(engine, method: Method):
    """transformers drafts exactly k tokens per step, for this call only.

    Its assisted generation reads the draft length and the early-stop confidence from the *assistant's*
    generation config, not from ``generate``'s arguments (there they are silently ignored), and defaults
    to up to 20 tokens cut short where the draft's confidence falls under 0.4 (a threshold it tunes while
    it runs). Without this every "k" would run that same default.
    """
    if method.kind != "hf-assisted":
        yield
        return
    cfg = engine.draft.model.generation_config
    saved = {name: getattr(cfg, name, None) for name in _ASSISTANT_FIELDS}
    # "default": transformers' own defaults, spelled out so an earlier call's settings cannot leak in
    values = (20, "constant", 0.4) if method.k == "default" else (int(method.k), "constant", 0.0)
    for name, value in zip(_ASSISTANT_FIELDS, values):
        setattr(cfg, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(cfg, name, value)


def run_hf(engine, method: Method, ids: list[int], temperature: float, max_new: int, seed: int) -> Run:
    """transformers' own assisted generation / prompt lookup on the same models, prompt and settings."""
    model = engine.target.model
    eos = sorted(engine.target.eos_ids)
    kwargs: dict = dict(max_new_tokens=max_new, do_sample=temperature > 0, eos_token_id=eos or None,
                        pad_token_id=eos[0] if eos else 0)
    if temperature > 0:
        kwargs.update(temperature=temperature, top_k=0, top_p=1.0)
    if method.kind == "hf-assisted":
        kwargs.update(assistant_model=engine.draft.model)
    else:
        kwargs.update(prompt_lookup_num_tokens=int(method.k), max_matching_ngram_size=engine.ngram[0])
    x = torch.tensor([ids], device=model.device)
    clock = _StepClock()
    kwargs["streamer"] = clock
    torch.manual_seed(seed)
    with _assistant_drafts(engine, method):
        _sync(engine)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(x, attention_mask=torch.ones_like(x), **kwargs)
        _sync(engine)
        wall = time.perf_counter() - t0
    new = out[0, len(ids):].tolist()
    steady_s, steady_tokens = None, 0
    if len(clock.puts) > 1:
        steady_s = clock.puts[-1][0] - clock.puts[0][0]
        steady_tokens = sum(n for _, n in clock.puts[1:])
    return Run(category="", prompt="", method=method.name, kind=method.kind, k=method.k, temperature=temperature,
               repeat=0, new_tokens=len(new), wall_s=wall, steady_s=steady_s, steady_tokens=steady_tokens,
               token_ids=tuple(new))


def run_method(engine, method: Method, ids: list[int], temperature: float, max_new: int, seed: int,
               cancel: threading.Event | None = None) -> Run:
    if method.kind == "specdesk":
        return run_specdesk(engine, method, ids, temperature, max_new, seed, cancel)
    return run_hf(engine, method, ids, temperature, max_new, seed)


def run_suite(engine, prompts: list[Prompt], methods: list[Method], temperatures: tuple[float, ...],
              repeats: int, max_new: dict[str, int], progress: Callable[[str], None] | None = None,
              cancel: threading.Event | None = None) -> list[Run]:
    """Every (repeat, prompt, temperature) runs all methods back to back, in a rotated order."""
    say = progress or (lambda msg: None)
    engine.reuse_cache = False  # every method reads its whole prompt (a kept cache would spare all but the first)
    encoded = {p.name + p.category: prompt_ids(engine, p) for p in prompts}
    # Warm-up (first calls pay one-off costs: allocator, kernels, lazy imports); not recorded. Engine.warm_up first,
    # as the app and the server run it after a load: its lesson gives k=auto this machine's costs
    if hasattr(engine, "warm_up"):
        engine.warm_up()
    warm = engine.encode(prompts[0].text)[:64]
    for m in methods:
        run_method(engine, m, warm, 0.0, 8, 0)
    runs: list[Run] = []
    # tree rows run greedy only: sampled, they would be their chain rows again
    total = repeats * len(prompts) * sum(1 for t in temperatures for m in methods if not (m.tree and t > 0))
    done = 0
    for rep in range(repeats):
        for pi, p in enumerate(prompts):
            ids = encoded[p.name + p.category]
            for temp in temperatures:
                shift = (rep + pi) % len(methods)
                for m in methods[shift:] + methods[:shift]:
                    if cancel is not None and cancel.is_set():
                        return runs
                    if m.tree and temp > 0:
                        continue
                    r = run_method(engine, m, ids, temp, max_new[p.category], seed=1000 * rep + pi)
                    r.category, r.prompt, r.repeat = p.category, p.name, rep
                    runs.append(r)
                    done += 1
                    say(f"[{done}/{total}] {p.category:12s} {p.name:28s} T={temp:<4} {m.name:18s} "
                        f"{r.wall_tps:7.1f} tok/s")
    return runs
