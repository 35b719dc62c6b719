"""The speculative decoding loop, written as a generator of plain events.

Per step: the drafter proposes up to k tokens after the last committed token; the target runs once
over [last committed, d1..dk] (k+1 positions, one forward pass); the acceptance rule keeps a prefix
of the drafts and adds one token of the target's own (a correction, or a bonus when all k were kept).
Both KV caches are then rolled back past the first rejected position. The work per step is a fixed
number of tensor operations and list appends: nothing in it scans the context.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import torch

from specdesk.core import kernels
from specdesk.core.acceptance import SampledCheck, verify_greedy, verify_sampled_logits
from specdesk.core.detok import IncrementalDetokenizer
from specdesk.core.drafters import Drafter
from specdesk.core.events import DoneEvent, Event, GenerationStats, PrefillEvent, StepEvent
from specdesk.core.ngram import NgramIndex
from specdesk.core.sampling import make_generator
from specdesk.core.settings import MAX_K, GenerationSettings
from specdesk.core.stops import StopStrings
from specdesk.core.target import TargetRunner
from specdesk.core.tree import layout, leaf_count, verify_greedy_tree


def _synchronizer(device: torch.device):
    if device.type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def decode(target: TargetRunner, drafter: Drafter, tokenizer, prompt_ids: list[int],
           settings: GenerationSettings, eos_ids: frozenset[int], controller,
           cancel: threading.Event | None = None) -> Iterator[Event]:
    """Yield a PrefillEvent, one StepEvent per target forward pass, then a DoneEvent."""
    if not prompt_ids:
        raise ValueError("the prompt must hold at least one token")
    device = target.device
    on_cpu = device.type == "cpu"
    sync = _synchronizer(device)
    sampling = settings.sampling
    seed = settings.seed
    generator = None
    if not sampling.greedy:
        if seed is None:
            seed = int.from_bytes(os.urandom(7), "little")
        generator = make_generator(device, seed)
    k_cap = MAX_K if settings.k == "auto" else int(settings.k)
    # room for a tree's leaves wherever the drafter could draft one (the planner counts the same, sampled or not)
    leaves = leaf_count(settings.tree, k_cap) if drafter.drafts_trees else 0
    capacity = len(prompt_ids) + settings.max_new_tokens + k_cap + 2 + leaves

    sync()
    t0 = time.perf_counter()
    cached = target.prefill(prompt_ids[:-1], capacity)
    drafter.start(prompt_ids[:-1], capacity)
    # a controller that drafts by confidence also reads what prompt lookup would propose (a hint, not a draft)
    hints = NgramIndex() if drafter.reports_confidence and getattr(controller, "reads_hints", False) else None
    # how much of a free continuation (prompt lookup's, beside a draft model) to verify: the controller's to say
    drafter.free_limit = getattr(controller, "free_length", None)
    if hints is not None:
        hints.extend(prompt_ids)  # ~4 ms for 1,200 tokens, once; then microseconds per step
    sync()
    prefill_s = time.perf_counter() - t0
    yield PrefillEvent(prompt_tokens=len(prompt_ids), seconds=prefill_s, cached_tokens=cached)

    ids = list(prompt_ids)
    generated: list[int] = []
    detok = IncrementalDetokenizer(tokenizer, prompt_ids)
    stops = StopStrings(settings.stop)
    texts: list[str] = []
    last = torch.tensor([ids[-1]], dtype=torch.long, device=device)
    forwards = drafted = accepted = 0
    draft_total = verify_total = 0.0
    scratch = None  # a sampled verification's (2, V) float32 rows on a CPU, reused step to step (SampledCheck)
    stop_reason = None
    step = 0
    start = time.perf_counter()
    end = start
    passed = None  # when the last step's pass ended: from there to the next draft is the loop's own time

    while stop_reason is None:
        if cancel is not None and cancel.is_set():
            stop_reason = "cancelled"
            break
        remaining = settings.max_new_tokens - len(generated)
        context = len(ids)
        hint = hints.lookup(ids, controller.k_max) if hints is not None else ()
        k, keep = controller.plan(context, drafter.reports_confidence, hint)
        k = max(0, min(k, remaining - 1))  # never draft past the token budget
        drafter.budget = remaining - 1
        sync()
        ta = time.perf_counter()
        # a tree's leaves where the target verifies trees (greedy only: a sampled proposal is a chain, core/tree.py)
        proposal = drafter.propose(ids, k, sampling, generator, keep, settings.tree if target.takes_trees else ())
        sync()
        tb = time.perf_counter()
        m = len(proposal)
        if proposal.leaves:
            tree = layout(last, proposal.tokens, proposal.leaves)
            logits = target.verify_tree(tree)  # (rows, V)
            chain_kept, n, emitted, leaf = verify_greedy_tree(kernels.argmax(logits).tolist(),
                                                              proposal.tokens.tolist(), tree)
            target.settle_tree(len(tree.depths), chain_kept, leaf)
        else:
            if on_cpu:  # the tokens as ints (target.verify_ids): fewer tensor calls, each dear right after a pass
                drafts = proposal.id_list() if m else []
                if sampling.greedy:  # the argmax from the pass's own call, no logits tensor (verify_top_ids)
                    top = target.verify_top_ids([ids[-1], *drafts])
                else:  # the draws and the kernel's arguments made before the pass, the decision after it
                    check = SampledCheck(sampling, proposal.probs, drafts, generator, target.vocab,
                                         proposal.prob_ids, proposal.pos_list() if m else None, scratch)
                    scratch = check.scratch
                    logits = target.verify_ids([ids[-1], *drafts])  # (m+1, V)
            else:
                drafts = proposal.tokens
                logits = target.verify(torch.cat([last, proposal.tokens]) if m else last)  # (m+1, V)
                top = kernels.argmax(logits) if sampling.greedy else None
            if sampling.greedy:
                n, emitted = verify_greedy(top, drafts)
            else:
                n, emitted = check.decide(logits) if on_cpu else verify_sampled_logits(
                    logits, sampling, proposal.probs, proposal.tokens, generator, draft_ids=proposal.prob_ids,
                    draft_pos=proposal.prob_pos)
            target.rollback(m - n)
            chain_kept = n
        sync()
        tc = time.perf_counter()
        other = ta - passed if passed is not None else 0.0
        passed = tc
        drafter.commit(len(ids) + chain_kept)  # a kept leaf is not in the draft's cache: it sees it next step

        cut = len(emitted)
        for i, tok in enumerate(emitted):
            if tok in eos_ids:
                cut, stop_reason = i + 1, "eos"
                break
        if len(generated) + cut >= settings.max_new_tokens:
            cut = settings.max_new_tokens - len(generated)
            stop_reason = stop_reason or "max_new_tokens"
        emitted = emitted[:cut]
        kept = min(n, cut)
        drafted_text = stops.feed(detok.push(emitted[:kept]))
        target_text = "" if stops.stopped else stops.feed(detok.push(emitted[kept:]))
        if stops.stopped:
            stop_reason = "stop_string"
        ids.extend(emitted)
        generated.extend(emitted)
        if not on_cpu or settings.tree:  # the accelerator's form, and a tree's layout, take it as a tensor
            last = torch.tensor(emitted[-1:], dtype=torch.long, device=device)
        forwards += 1
        drafted += m
        accepted += n
        draft_total += tb - ta
        verify_total += tc - tb
        if proposal.free:  # prompt lookup's tokens: only the verify cost is the controller's to learn
            controller.observe_verify(m, tc - tb, context, n, other_s=other, phrases=proposal.phrases)
        else:
            controller.observe(k, m, n, tb - ta, tc - tb, context, proposal.confidences, proposal.setup_s,
                               other_s=other)
        if keep is not None:
            k = m  # drafting by confidence: the step's k is what the draft was let draft
        end = time.perf_counter()
        texts.append(drafted_text + target_text)
        yield StepEvent(index=step, token_ids=tuple(emitted), drafted=m, accepted=n, k=k,
                        draft_s=tb - ta, verify_s=tc - tb, step_s=end - ta, elapsed_s=end - start,
                        context_len=len(ids), drafted_text=drafted_text, target_text=target_text,
                        setup_s=proposal.setup_s, lookup=proposal.free)
        step += 1

    # the caches hold the first positions of ids: a next prompt that starts with them (a chat's next turn) skips them
    target.remember(ids)
    drafter.remember(ids)
    tail = ""
    if stop_reason != "stop_string":
        tail = stops.feed(detok.flush()) + stops.flush()
    stats = GenerationStats(prompt_tokens=len(prompt_ids), new_tokens=len(generated), target_forwards=forwards,
                            drafted=drafted, accepted=accepted, prefill_seconds=prefill_s,
                            cached_prompt_tokens=cached, decode_seconds=end - start, draft_seconds=draft_total,
                            verify_seconds=verify_total)
    yield DoneEvent(token_ids=tuple(generated), text="".join(texts) + tail, stats=stats,
                    stop_reason=stop_reason, seed=seed, tail=tail)
