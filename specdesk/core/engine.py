"""The engine: a loaded target, an optional draft, and the decode loop behind a small API.

    engine = specdesk.load("demo-target", "demo-draft")
    result = engine.generate("def fib(n):", max_new_tokens=64)
    for event in engine.stream("import os\\n", k=4): ...
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from specdesk.core.adaptive import AdaptiveK, Lesson
from specdesk.core.compat import Compatibility, check_tokenizers
from specdesk.core.decode import decode
from specdesk.core.distill.draft import FC, is_eagle
from specdesk.core.drafters import Drafter, LookupFirstDrafter, ModelDrafter, NgramDrafter, NoDrafter, PhraseDrafter
from specdesk.core.eagle import EagleDrafter
from specdesk.core.errors import BadSetting
from specdesk.core.events import DoneEvent, Event, GenerationResult, StepEvent
from specdesk.core.kcontrol import FixedK
from specdesk.core.loading import LoadedModel, load_borrowing_draft, load_model, resolve
from specdesk.core.membudget import MemoryBudget, guarded
from specdesk.core.pairing import DRAFTERS, HYBRID, MODEL_DRAFTERS, PHRASES, may_take_own_draft, resolve_drafter
from specdesk.core.phrases import FILE as PHRASES_FILE
from specdesk.core.settings import GenerationSettings
from specdesk.core.target import TargetRunner



def no_phrases(name: str) -> BadSetting:
    """Drafter "phrases" asked of a draft without a table of its target's phrases: one line that says what to do."""
    return BadSetting(f"{name} has no table of its target's phrases ({PHRASES_FILE}; `specdesk distill` writes one): "
                      f"choose another drafter")


class Engine:
    def __init__(self, target: LoadedModel, draft: LoadedModel | None = None, drafter: str = "model",
                 ngram_max: int = 4, ngram_min: int = 2, lean_draft: bool = True, lean_target: bool = True,
                 phrases=None) -> None:
        """``phrases``: a table of the target's phrases (core/phrases.py) without its draft model (drafter
        "phrases" loads no model); a loaded distilled draft brings its own."""
        if drafter not in DRAFTERS:
            raise BadSetting(f"unknown drafter {drafter!r}: use one of {', '.join(DRAFTERS)}")
        if drafter in MODEL_DRAFTERS and draft is None:
            raise BadSetting(f"drafter '{drafter}' needs a draft model (or choose drafter ngram or none)")
        # the draft's table of the target's phrases (core/phrases.py)
        self.phrases = phrases if phrases is not None else getattr(draft, "phrases", None)
        if drafter == PHRASES and self.phrases is None:
            raise no_phrases(draft.name if draft is not None else "the draft")
        if not (1 <= ngram_min <= ngram_max <= 16):
            raise BadSetting(f"n-gram sizes must satisfy 1 <= min ({ngram_min}) <= max ({ngram_max}) <= 16")
        self.target = target
        self.draft = draft
        self.drafter = drafter
        self.ngram = (ngram_max, ngram_min)
        self.compatibility: Compatibility | None = None
        self._runner = TargetRunner(target.model, target.vocab, lean=lean_target)
        self._model_drafter: ModelDrafter | None = None
        self._adaptive: dict[tuple[str, str], AdaptiveK] = {}
        self._costs: AdaptiveK | None = None  # what warm_up's lesson taught: each new k=auto but a tree's starts from it
        if draft is not None:
            if draft.device != target.device:
                raise BadSetting(f"target on {target.device} but draft on {draft.device}: use one device")
            self.compatibility = check_tokenizers(target.tokenizer, draft.tokenizer, target.name, draft.name)
            self.compatibility.raise_if_bad()
            shared = min(self.compatibility.shared_vocab, draft.vocab, target.vocab)
            if is_eagle(draft.model):  # an EAGLE head drafts from the target's features
                self._model_drafter = EagleDrafter(draft.model, getattr(draft.model, FC), self._runner.seq,
                                                   vocab=shared, target_vocab=target.vocab, head_ids=draft.head_ids)
            else:
                self._model_drafter = ModelDrafter(draft.model, vocab=shared, target_vocab=target.vocab,
                                                   lean=lean_draft, head_ids=draft.head_ids)

    @property
    def tokenizer(self):
        return self.target.tokenizer

    @property
    def device(self) -> str:
        return self.target.device

    @property
    def reuse_cache(self) -> bool:
        """Whether a prompt that starts with the last generation's prompt and reply (a chat's next turn) skips that
        part (the KV caches kept between generations; see core/sequence.py). The bench turns it off: every method
        it times reads the whole prompt, as Hugging Face's generate does."""
        return self._runner.seq.reuse

    @reuse_cache.setter
    def reuse_cache(self, on: bool) -> None:
        for seq in [self._runner.seq] + ([self._model_drafter.seq] if self._model_drafter is not None else []):
            seq.reuse = on
            seq.cached = None

    def available_drafters(self) -> tuple[str, ...]:
        return tuple(d for d in DRAFTERS if (d not in MODEL_DRAFTERS or self._model_drafter is not None)
                     and (d != PHRASES or self.phrases is not None))

    # warm_up's lesson for k=auto: plain steps (the first few after a prefill run slow and are not learnt), then
    # k = 1 .. 4 (each k's first step pays the draft's catch-up and is not learnt either): ~30 passes
    LESSON = (0,) * 10 + (1,) * 6 + (2,) * 6 + (3,) * 4 + (4,) * 4

    def warm_up(self, tokens: int = 8) -> None:
        """A few throwaway steps, plain and with the draft model (k = 4) when there is one: first calls pay one-off
        costs (the allocator, a kernel's first use at each size), which made the app's first reply after a load
        slower than the plain comparison run after it. Then, with a draft model, a lesson for k=auto (greedy): a
        short reply decoded plainly and at k = 1 .. 4, whose pass and draft costs every k=auto controller but a
        tree's starts from, greedy or sampled (see adaptive.Lesson); none of its acceptance."""
        ids = self.encode("Hello. Hello. Hello. Hello.")[:16]
        self.generate(ids, drafter="none", max_new_tokens=tokens)
        if self._model_drafter is None:
            return
        self.generate(ids, drafter="model", k=4, max_new_tokens=tokens)
        teacher = AdaptiveK()
        prompt, _ = self.prompt_ids("Write a few paragraphs about the sea.")
        done = threading.Event()
        self.generate(prompt, drafter="model", controller=Lesson(teacher, self.LESSON, done), cancel=done,
                      max_new_tokens=4 * len(self.LESSON))
        self._costs = teacher
        self._adaptive.clear()  # controllers made before (none, in the app) start again from the lesson
        self.release_buffers()  # a first chat prompt would keep the lesson's system prompt: "5 kept" of what?

    def _drafter(self, name: str) -> Drafter:
        if name == HYBRID:
            return LookupFirstDrafter(self._drafter("model"), NgramDrafter(self._runner.device, *self.ngram),
                                      phrases=self.phrases)
        if name == PHRASES:
            if self.phrases is None:
                raise no_phrases("this engine's draft")
            return PhraseDrafter(self._runner.device, self.phrases, *self.ngram)
        if name == "model":
            if self._model_drafter is None:
                raise BadSetting("this engine has no draft model; use drafter ngram or none")
            return self._model_drafter
        if name == "ngram":
            return NgramDrafter(self._runner.device, *self.ngram)
        if name == "none":
            return NoDrafter(self._runner.device)
        raise BadSetting(f"unknown drafter {name!r}: use one of {', '.join(DRAFTERS)}")

    # ----------------------------------------------------------------- prompts

    def encode(self, prompt: str | list[int] | tuple[int, ...]) -> list[int]:
        """Text -> token ids (the tokenizer's own special tokens added); a list of ids is checked and kept."""
        if isinstance(prompt, str):
            ids = self.tokenizer(_utf8(prompt, "prompt"))["input_ids"]
        else:
            ids = [int(i) for i in prompt]
            bad = [i for i in ids if not (0 <= i < self.target.vocab)]
            if bad:
                raise BadSetting(f"prompt token id {bad[0]} is outside the vocabulary (0..{self.target.vocab - 1})")
        if not ids:  # an empty prompt starts a fresh document
            start = self.tokenizer.bos_token_id
            if start is None:
                start = self.tokenizer.eos_token_id
            if start is None:
                raise BadSetting("the prompt is empty and the tokenizer has no start token")
            ids = [start]
        return ids

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def chat_ids(self, messages: list[dict]) -> list[int]:
        """Token ids for a conversation, through the tokenizer's chat template."""
        if not self.has_chat_template:
            raise BadSetting(f"{self.target.name} has no chat template; use completion mode")
        for m in messages:
            if isinstance(m.get("content"), str):
                _utf8(m["content"], f"{m.get('role', 'user')} message")
        out = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(out, dict) or hasattr(out, "keys"):
            out = out["input_ids"]
        return [int(i) for i in out]

    def prompt_ids(self, text: str, *, raw: bool = False, system: str | None = None) -> tuple[list[int], bool]:
        """Token ids for a text prompt, and whether the chat template was applied.

        A model with a chat template gets the text as one user message (after ``system``, if given) through
        its template, as the model was trained to read it; ``raw=True`` sends the text as it is.
        """
        if system is not None and raw:
            raise BadSetting("a system message needs the chat template: leave out --raw or --system")
        if raw or not self.has_chat_template:
            if system is not None:
                raise BadSetting(f"{self.target.name} has no chat template, so it takes no system message")
            return self.encode(text), False
        messages = ([{"role": "system", "content": system}] if system is not None else []) + \
            [{"role": "user", "content": text}]
        return self.chat_ids(messages), True

    def decode_ids(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    # ----------------------------------------------------------------- generation

    def stream(self, prompt, *, cancel: threading.Event | None = None, drafter: str | None = None,
               controller=None, memory_budget: MemoryBudget | None = None, **settings) -> Iterator[Event]:
        """Yield a PrefillEvent, StepEvents and a final DoneEvent. ``settings``: see GenerationSettings.

        ``memory_budget``: checked after the prefill and every step; over it, the generation raises
        OutOfMemory (then call :meth:`release_buffers`)."""
        gs = settings.pop("settings", None) or GenerationSettings(**settings)
        name = drafter or self.drafter
        dr = self._drafter(name)
        if controller is None:
            controller = self._controller(gs, name)
        ids = self.encode(prompt)
        if len(ids) + gs.max_new_tokens > self.max_context:
            raise BadSetting(f"prompt ({len(ids)} tokens) + max new tokens ({gs.max_new_tokens}) exceeds the "
                             f"model's context of {self.max_context} tokens")
        events = decode(self._runner, dr, self.tokenizer, ids, gs, self.target.eos_ids, controller, cancel)
        return events if memory_budget is None else guarded(events, memory_budget)

    def release_buffers(self) -> None:
        """Drop the last generation's KV caches (kept until the next prefill otherwise): after an out-of-memory,
        or to give the memory back while idle."""
        self._runner.seq.release()
        if self._model_drafter is not None:
            self._model_drafter.seq.release()

    def kv_reserved_bytes(self) -> int:
        """Bytes of KV cache buffers the target and the draft hold now."""
        d = self._model_drafter.seq.kv_reserved_bytes() if self._model_drafter is not None else 0
        return self._runner.kv_reserved_bytes() + d

    def _controller(self, gs: GenerationSettings, drafter: str):
        if drafter == "none":
            return FixedK(0)
        if gs.k == "auto":
            # One controller per drafter and decoding mode lives as long as the engine: the costs it learns
            # belong to this machine and these models; acceptance belongs to the text, so it is mostly reset
            # per prompt. Greedy and sampled decoding keep apart: sampled acceptance (min(1, p/q) on average)
            # differs from greedy agreement on the same text, and sampling adds its own cost per token. A tree
            # (greedy only) keeps apart too: its passes verify the leaves beside the chain, so a chain of k tokens
            # costs what k + 1 + leaves positions cost (learnt as a chain's, it priced the draft's chains out).
            mode = "greedy" if gs.sampling.greedy else "sampled"
            tree = bool(gs.tree) and gs.sampling.greedy
            if tree:
                mode += ", tree " + ",".join(map(str, gs.tree))
            key = (drafter, mode)
            ctl = self._adaptive.get(key)
            if ctl is None:
                ctl = self._adaptive[key] = AdaptiveK()
                # the lesson's passes are greedy ones; a sampled controller starts from them too (a sampled pass
                # and drafted token cost ~0.1 and ~0.05 ms more on q4 SmolLM2, learnt as it goes): untaught, its
                # first prompts' few noisy plain and drafted steps priced drafting out (fresh engines on a 2-core
                # AMD EPYC drafted 0.1-0.4 tokens a step on half the bench's chat prompts at 0.7, learnt verify(1)
                # 6.1 ms where a pass took ~4.2)
                if self._costs is not None and not tree:
                    ctl.learn_costs_from(self._costs, draft=drafter in MODEL_DRAFTERS)
            else:
                ctl.reset_acceptance()
            return ctl
        return FixedK(int(gs.k))

    @property
    def max_context(self) -> int:
        cfg = self.target.model.config
        return int(getattr(cfg, "max_position_embeddings", None) or 1 << 20)

    def generate(self, prompt, *, cancel: threading.Event | None = None, drafter: str | None = None,
                 on_event: Callable[[Event], None] | None = None, **settings) -> GenerationResult:
        steps: list[StepEvent] = []
        done: DoneEvent | None = None
        for ev in self.stream(prompt, cancel=cancel, drafter=drafter, **settings):
            if isinstance(ev, StepEvent):
                steps.append(ev)
            elif isinstance(ev, DoneEvent):
                done = ev
            if on_event is not None:
                on_event(ev)
        assert done is not None
        return GenerationResult(token_ids=list(done.token_ids), text=done.text, stats=done.stats,
                                stop_reason=done.stop_reason, seed=done.seed, steps=steps)

    @functools.cached_property
    def draft_distilled_for_target(self) -> bool:
        """Whether the draft was distilled for exactly this target (discovery.distilled_for): read once, as describe()
        runs for every session log and every /v1/models request, and its first call may hash the target file."""
        from specdesk.core.discovery import distilled_for

        return self.draft is not None and distilled_for(self.draft.path, self.target.path)

    @functools.cached_property
    def draft_made_for(self) -> str | None:
        """The file a distilled draft was distilled for, as its config names it (another file of the same model where
        draft_distilled_for_target is False), else None; read once, as draft_distilled_for_target."""
        from specdesk.core.distill.draft import made_for

        return made_for(Path(self.draft.path)).get("name") if self.draft is not None else None

    def describe(self) -> dict:
        """Models, quantization and device, for session logs and status bars."""
        draft = None
        if self.draft is not None:
            draft = {**self.draft.describe(), "distilled_for_target": self.draft_distilled_for_target,
                     "distilled_for": self.draft_made_for}
        phrases = None if self.phrases is None else {"contexts": len(self.phrases), **self.phrases.info}
        return {"target": self.target.describe(), "draft": draft, "phrases": phrases,
                "drafter": self.drafter, "device": self.device,
                "ngram": {"max_n": self.ngram[0], "min_n": self.ngram[1]},
                "lean_draft": self._model_drafter.uses_lean_path if self._model_drafter else None,
                "lean_target": self._runner.uses_lean_path, "cpu_kernels": self._cpu_kernels()}

    def _cpu_kernels(self) -> str | None:
        """Which kernels a CPU target's q4 products and verify attention run on (core/kernels), in words."""
        if self.device != "cpu":
            return None
        if getattr(self.target, "dtype", None) != "bfloat16":
            return (f"torch's kernels ({self.target.dtype}: specdesk's own serve q4, q8 and bfloat16 models; "
                    f"quantization q8 decodes a float model several times faster on a CPU, near its precision)")
        from specdesk.core import kernels

        return kernels.status()


def load(target: str = "demo-target", draft: str | None = None, *, drafter: str | None = None,
         target_quant: str = "none", draft_quant: str = "none", double_quant: bool = False,
         dtype: str = "auto", device: str = "auto", ngram_max: int = 4, ngram_min: int = 2,
         lean_draft: bool = True, lean_target: bool = True,
         progress: Callable[[str], None] | None = None) -> Engine:
    """Load a target and a drafter.

    drafter: "model" (needs ``draft``), "model+lookup" (the draft model, and prompt lookup where the text
    repeats; with a distilled draft's phrase table, its phrases where k=auto leaves the model out), "phrases"
    (prompt lookup, then the draft's table of the target's phrases; no model pass), "ngram" (prompt lookup) or
    "none" (plain decoding). Left out, it is "model+lookup" when a draft is
    given, or when the target is the bundled demo-target (its draft is demo-draft), and "ngram" otherwise. With no
    draft given and a drafter that may use one, a target with a draft distilled for it (discovery.own_draft: bundled,
    as SmolLM2-135M-Instruct's, or made here by `specdesk distill`; for that file, else for the same model in another
    file) drafts with that draft, as the command line and the app do.
    Quantization: "none", "int8", "nf4" or "fp4", for each model independently.
    """
    say = progress or (lambda msg: None)
    if may_take_own_draft(target, draft, drafter):
        from specdesk.core.discovery import drafting_with, own_draft

        draft = own_draft(target)
        if draft is not None:
            say(drafting_with(draft, drafter, target))
    from specdesk.core import phrases

    table = None
    own = phrases.own_table_for(target, draft, drafter)  # the table `specdesk distill --phrases-only` made for it
    if own is not None:
        table = phrases.read(own, "delete it, or run `specdesk distill --phrases-only` again")
        drafter = PHRASES  # prompt lookup, then the table: what lookup alone does, and more
        say(f"drafting with the table of this model's phrases ({len(table):,} contexts from "
            f"{int(table.info.get('replies', 0)):,} of its replies; {own})")
    else:
        drafter, draft = resolve_drafter(target, draft, drafter)
    say(f"loading target {target}")
    t = load_model(target, target_quant, double_quant, dtype, device, progress=say)
    d = None
    if draft is not None and drafter == PHRASES:  # it runs no model: only the draft folder's table is read
        say(f"reading the table of the target's phrases in {draft}")
        table = phrases.find(resolve(draft))
        if table is None:
            raise no_phrases(Path(draft).name)
    elif draft is not None:
        say(f"loading draft {draft}")
        from specdesk.core.distill.draft import borrow_info

        if borrow_info(resolve(draft)) is not None:  # a distilled draft: built on the target's embeddings
            if draft_quant not in ("none", "auto"):
                say(f"draft quantization {draft_quant} not applied: a distilled draft follows its target's "
                    f"(4-bit with a q4 or q8 target, else the target's dtype)")
            d = load_borrowing_draft(draft, t, progress=say)
        else:
            d = load_model(draft, draft_quant, double_quant, dtype, t.device, progress=say)
    say("checking compatibility")
    return Engine(t, d, drafter, ngram_max=ngram_max, ngram_min=ngram_min, lean_draft=lean_draft,
                  lean_target=lean_target, phrases=table)


def _utf8(text: str, what: str) -> str:
    """``text`` where it is valid Unicode; a lone surrogate (undecodable bytes Python kept from a command line or a
    pipe, or a JSON escape) is a one-line BadSetting, not the tokenizer's TypeError."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise BadSetting(f"the {what} is not valid UTF-8 text (an undecodable byte or a lone surrogate at character "
                         f"{e.start}): save it as UTF-8") from None
    return text
