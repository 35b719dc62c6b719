"""One distillation, start to finish, as a generator of plain progress events (like the decode loop).

    for ev in distill(DistillConfig(target="model.gguf", out=Path("my-draft"), minutes=30)):
        print(ev.phase, ev.fraction, ev.agreement)

Phases: ``load`` the target; ``prompts`` (the prompt set "self" only): the target writes its prompts; ``data``:
the target answers the held-out prompts (greedy) and the training prompts (one shard per batch, greedy and, every
``sampled_every``-th batch, at temperature 0.7; more replies than the templates have prompts answer them again,
sampled: :func:`training_jobs`); ``features`` (an EAGLE head only: the target's hidden states on every reply,
cached); ``train`` the draft
(checkpoints every ``checkpoint_s`` seconds and at the end; held-out agreement every ``eval_every`` steps);
``write`` the draft folder (with ``phrases_only``: no training, only the table of the target's phrases,
:func:`_write_phrases`). Every phase resumes: present shards are kept, training goes on from its checkpoint.
Cancellation is a ``threading.Event`` checked between batches and steps (a checkpoint is written first).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from specdesk.core.errors import BadSetting


@dataclass
class DistillConfig:
    target: str
    out: Path
    minutes: float | None = None  # training time budget (data generation not counted)
    steps: int | None = None  # or a number of optimiser steps
    device: str = "auto"
    resume: bool = False
    seed: int = 0
    train_prompts: int = 640
    skip_prompts: int = 0  # leave out the first N of the seeded prompt list (those an --init-from draft learned)
    # the prompt set (distill.prompts.PROMPT_SETS): "varied" is the templates and 14 more kinds of request; None: varied,
    # or for a resumed run the set it began with (see prompt_set_for)
    prompts: str | None = None
    held_out_prompts: int = 64
    max_new_tokens: int = 128
    answer_batch: int = 64  # prompts a batch (and a data shard)
    sampled_every: int = 4  # every 4th training batch is answered at temperature 0.7, the rest greedily
    topk: int = 64
    kind: str = "draft"  # "draft": a few layers of its own; "eagle": a one-layer head on the target's hidden states
    # no draft model: only the table of the target's phrases in its replies (core/phrases.py), kept for the target
    phrases_only: bool = False
    layers: int = 2  # decoder layers of a draft (an EAGLE head: 1 unless set)
    init_from: str | None = None  # start from this distilled draft's layers, norm and head tokens (draft or EAGLE head)
    head_vocab: int = 8192  # 0: the target's whole vocabulary
    batch: int = 8  # sequences per optimiser step
    lr: float = 1e-3
    eval_every: int = 50
    checkpoint_s: float = 120.0
    command: str = ""  # the command line that started this run, for the model card

    def data_settings(self, target_sha256: str) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in ("out", "command", "resume")}
        d["target_sha256"] = target_sha256
        from specdesk.core.distill.prompts import fingerprint

        d["prompt_set"] = fingerprint(self.prompts)
        return d


@dataclass(frozen=True)
class DistillEvent:
    phase: str  # load, prompts, data, features, train, write, done
    message: str
    fraction: float = 0.0  # of this phase
    step: int = 0
    total_steps: int | None = None
    eta_s: float | None = None  # of this phase
    agreement: float | None = None  # latest held-out teacher-forced agreement (draft top-1 == target top-1)
    loss: float | None = None
    tokens: int = 0  # training tokens (data phase: replies so far)
    elapsed_s: float = 0.0  # training seconds so far (all runs together)
    curve: tuple[tuple[int, float, float], ...] = ()  # (step, training seconds, agreement) so far
    out: str = ""


def file_sha256(path: Path) -> str:
    """sha256 of a GGUF file, or of a folder's weight files in name order."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin"))
    h = hashlib.sha256()
    for f in files:
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def data_dtype(device: str) -> str:
    """The dtype the target answers in (and the draft trains under autocast): bfloat16 where matmuls are fast in it."""
    from specdesk.hw.cpu import cpu_flags

    return "bfloat16" if device.startswith("cuda") or "amx_tile" in cpu_flags() else "float32"


def training_jobs(train: list[str], want: int, batch: int, sampled_every: int) -> list[tuple[str, list[str], float]]:
    """Shards (name, prompts, temperature) of ``want`` training replies: the distinct prompts once (every
    ``sampled_every``-th batch at temperature 0.7, the rest greedy) and, where more replies are wanted than the
    templates give distinct prompts, the same prompts again, sampled (rounds at 0.7 and 1.0 in turn)."""
    jobs: list[tuple[str, list[str], float]] = []
    left, rnd = want, 0
    while left > 0 and train:
        part = train[:left]
        for b0 in range(0, len(part), batch):
            i = len(jobs)
            temp = (0.7 if i % sampled_every == sampled_every - 1 else 0.0) if rnd == 0 else (0.7 if rnd % 2 else 1.0)
            jobs.append((f"train-{i:05d}", part[b0:b0 + batch], temp))
        left -= len(part)
        rnd += 1
    return jobs


def _budget(cfg: DistillConfig) -> None:
    if cfg.minutes is None and cfg.steps is None:
        cfg.minutes = 30.0
    if cfg.minutes is not None and cfg.minutes <= 0:
        raise BadSetting("--minutes must be more than 0")
    if cfg.steps is not None and cfg.steps < 1:
        raise BadSetting("--steps must be at least 1")
    if cfg.layers < 1:
        raise BadSetting("the draft needs at least one layer")
    if cfg.kind not in ("draft", "eagle"):
        raise BadSetting(f"unknown draft kind {cfg.kind!r}: use draft or eagle")
    if cfg.skip_prompts < 0:
        raise BadSetting("--skip-prompts must be 0 or more")
    if cfg.train_prompts < 1:
        raise BadSetting("--prompts must be at least 1 (the replies the draft learns from)")
    out = Path(cfg.out).expanduser()
    if out.exists() and not out.is_dir():
        raise BadSetting(f"--out {out} is a file: give a folder (it is made if missing)")
    if cfg.phrases_only:
        if cfg.kind != "draft" or cfg.init_from:
            raise BadSetting("--phrases-only trains nothing: it takes neither --kind eagle nor --init-from")
        cfg.held_out_prompts = 0  # nothing is measured as it trains
    from specdesk.core.distill.prompts import check

    check(cfg.prompts)  # an unknown prompt set is refused here, before the target loads


DEFAULT_PROMPT_SET = "varied"
PHRASES_ONLY_PROMPTS = 3000  # --phrases-only's replies: SmolLM2-135M-Instruct on 2 Xeon cores, 26.5 minutes in all


def prompt_set_for(cfg: DistillConfig) -> str:
    """The prompt set a run answers: the one asked for; else, resuming a run, the one it began with (runs from before
    the sets existed used "templates"); else :data:`DEFAULT_PROMPT_SET`. Trained on the varied set, SmolLM2's draft
    agreed with its target on 0.466 of the tokens of replies to 24 hand-written prompts against 0.418 from the templates
    alone (and 0.557 against 0.549 on held-out template prompts): what users type is not what templates write."""
    if cfg.prompts is not None:
        return cfg.prompts
    settings = Path(cfg.out) / ".distill" / "settings.json"
    if cfg.resume and settings.exists():
        try:
            return json.loads(settings.read_text()).get("prompts", "templates")
        except (OSError, ValueError):
            pass  # WorkDir.start reports a broken run folder
    return DEFAULT_PROMPT_SET


def earlier_replies(out: Path, init_from: str | None) -> list[tuple[list[int], list[int]]]:
    """The training replies of the run this one started from (``init_from``), where its work folder still holds
    them: a draft trained in two runs counts both runs' replies in its phrase table."""
    from specdesk.core import phrases

    start = Path(init_from) if init_from else None
    if start is None or not (start / ".distill" / "data").is_dir() or start.resolve() == Path(out).resolve():
        return []
    return list(phrases.work_dir_samples(start))


def distill(cfg: DistillConfig, cancel: threading.Event | None = None) -> Iterator[DistillEvent]:
    import torch

    from specdesk.core.distill.data import DataProgress, answer
    from specdesk.core.distill.prompts import chat_prompts
    from specdesk.core.distill.workdir import WorkDir
    from specdesk.core.loading import load_model, resolve, resolve_device

    cfg.prompts = prompt_set_for(cfg)
    _budget(cfg)
    cancel = cancel or threading.Event()
    device = resolve_device(cfg.device)
    out = Path(cfg.out)
    work = WorkDir(out)
    if not cfg.resume and work.exists():
        raise BadSetting(f"{out} already holds a distillation; add --resume to go on with it, or choose another --out")
    if cfg.resume and not work.exists():
        yield DistillEvent("load", f"nothing to resume in {out}: a new run starts")
    yield DistillEvent("load", f"loading target {cfg.target}")
    source = resolve(cfg.target)
    sha = file_sha256(source)
    # The target answers in bfloat16 on CUDA and on CPUs with AMX (890 vs 620 tokens/s at a batch of 128, SmolLM2
    # on 2 Xeon cores), else in float32 (training uses bf16 autocast where the target does).
    target = load_model(cfg.target, dtype=data_dtype(device), device=device)
    if cfg.prompts == "self":
        from specdesk.core.distill.selfprompts import user_prefix

        user_prefix(target.tokenizer)  # a target without a chat template is refused before the work folder is made
    work.start(cfg.data_settings(sha), cfg.resume)

    # ---- data
    if cfg.prompts == "self":
        from specdesk.core.distill import selfprompts

        path, need = work.root / selfprompts.FILE, cfg.held_out_prompts + cfg.skip_prompts + cfg.train_prompts
        t0 = time.perf_counter()
        for kept, _ in selfprompts.write(target.model, target.tokenizer, path, need, seed=cfg.seed,
                                         eos_ids=target.eos_ids):
            if cancel.is_set():
                yield DistillEvent("done", "cancelled while the target wrote prompts", out=str(out))
                return
            rate = kept / max(time.perf_counter() - t0, 1e-9)
            yield DistillEvent("prompts", f"target wrote {kept} of {need} prompts for itself", fraction=kept / need,
                               eta_s=(need - kept) / rate if rate > 0 else None)
        written = selfprompts.load(path)["prompts"]
        if len(written) <= cfg.held_out_prompts:
            raise BadSetting(f"the target wrote only {len(written)} distinct prompts; use --prompt-set varied")
        # held out: the first ones written (the same however many training prompts a resumed run adds)
        held = written[:cfg.held_out_prompts]
        train = written[cfg.held_out_prompts + cfg.skip_prompts:need]
    else:
        held = chat_prompts(cfg.held_out_prompts, held_out=True, seed=cfg.seed, prompt_set=cfg.prompts)
        train = chat_prompts(cfg.skip_prompts + cfg.train_prompts, seed=cfg.seed,
                             prompt_set=cfg.prompts)[cfg.skip_prompts:]
    jobs = [("held-out", held, 0.0)] * bool(held) + \
        training_jobs(train, cfg.train_prompts, cfg.answer_batch, cfg.sampled_every)
    todo = sum(len(p) for name, p, _ in jobs if not work.shard_path(name).exists())
    t0, done = time.perf_counter(), 0
    tokens = 0
    for name, prompts, temp in jobs:
        if work.shard_path(name).exists():
            continue
        samples = []
        ev: DataProgress | None = None
        for ev in answer(target.model, target.tokenizer, prompts, eos_ids=target.eos_ids,
                         max_new_tokens=cfg.max_new_tokens, batch=cfg.answer_batch, temperature=temp,
                         seed=cfg.seed * 100_003 + zlib.crc32(name.encode()) % 10_007, topk=cfg.topk,
                         split="held-out" if name == "held-out" else "train", out=samples):
            if cancel.is_set():
                break
        if cancel.is_set():
            yield DistillEvent("done", "cancelled while answering prompts", out=str(out))
            return
        work.save_shard(name, samples)
        done += len(prompts)
        tokens += ev.tokens if ev else 0
        rate = done / max(time.perf_counter() - t0, 1e-9)
        yield DistillEvent("data", f"target answered {done} of {todo} prompts ({tokens} reply tokens)",
                           fraction=done / max(todo, 1), eta_s=(todo - done) / rate, tokens=tokens)

    if cfg.phrases_only:
        yield from _write_phrases(cfg, work, source, target)
        return

    # ---- training
    from specdesk.core.distill.train import Trainer

    if cfg.kind == "eagle":
        from specdesk.core.distill.eagle import EagleTrainer

        trainer = EagleTrainer(cfg, target, work, device)
        t1 = time.perf_counter()
        for done_n, total in trainer.compute_features(target, cancel):
            rate = done_n / max(time.perf_counter() - t1, 1e-9)
            yield DistillEvent("features", f"target hidden states for {done_n} of {total} replies",
                               fraction=done_n / total, eta_s=(total - done_n) / rate)
        if cancel.is_set():
            yield DistillEvent("done", "cancelled while computing the target's hidden states", out=str(out))
            return
    else:
        trainer = Trainer(cfg, target, work, device)
    for ev in trainer.run(cancel):
        yield ev
    if cancel.is_set():
        yield DistillEvent("done", f"cancelled at step {trainer.step}; the checkpoint is kept (resume goes on from it)",
                           step=trainer.step, agreement=trainer.last_agreement, elapsed_s=trainer.elapsed,
                           curve=trainer.curve_tuple(), out=str(out))
        return

    # ---- the draft folder
    from specdesk.core.distill.card import write_card
    from specdesk.hw.cpu import cpu_description
    from specdesk.core.distill.draft import save_draft

    yield DistillEvent("write", f"writing {out}")
    save_draft(trainer.draft, out, target, head_ids=trainer.head_ids, target_sha256=sha, target_source=source)
    yield DistillEvent("write", "counting the target's phrases in its replies")
    from specdesk.core import phrases

    replies = [(s.prompt, s.reply) for s in trainer.train] + earlier_replies(out, cfg.init_from)  # this run's: in memory
    phrases.build(replies).save(out / phrases.FILE)
    write_card(out, cfg, trainer, target_name=target.name, target_source=source, target_sha256=sha,
               cpu=cpu_description(), torch_threads=torch.get_num_threads())
    from specdesk.core import userdirs

    userdirs.add_folder(out.resolve())  # listed by `specdesk models` and offered first for its target
    yield DistillEvent("done", f"wrote the draft to {out}", fraction=1.0, step=trainer.step,
                       agreement=trainer.last_agreement, elapsed_s=trainer.elapsed, curve=trainer.curve_tuple(),
                       out=str(out))


def _write_phrases(cfg: DistillConfig, work, source: Path, target) -> Iterator[DistillEvent]:
    """--phrases-only: the table of the target's phrases in this run's replies, in ``out`` and where the engine looks
    for this target's (phrases.own_table_path), with a short card; no draft model."""
    import shutil

    from specdesk.core import phrases

    out = Path(cfg.out)
    yield DistillEvent("write", "counting the target's phrases in its replies")
    table = phrases.build(phrases.work_dir_samples(out))
    table.save(out / phrases.FILE)
    own = phrases.own_table_path(source)
    own.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out / phrases.FILE, own)
    i = table.info
    (out / "README.md").write_text(f"""# The phrases of {target.name} (counted by specdesk)

`{phrases.FILE}`: the {len(table):,} contexts of 1 to {table.max_n} tokens after which {target.name}'s
{int(i.get("replies", 0)):,} replies ({int(i.get("tokens", 0)):,} tokens) to prompts {"it wrote itself" if cfg.prompts == "self"
else f"of the set {cfg.prompts!r}"} went on with the same token at least {float(i.get("min_share", 0)):.0%} of the time
(seen {i.get("min_count")}+ times). No draft model: specdesk proposes these continuations after prompt lookup's
(drafter `phrases`), without running any model, and the target verifies every one, so its output is unchanged.
A copy is kept at `{own}` for the model at `{source}`: specdesk drafts with it whenever that model is loaded
without a draft.

    {cfg.command or "(from the Python API)"}
""", encoding="utf-8")
    yield DistillEvent("done", f"wrote the table of {target.name}'s phrases ({len(table):,} contexts from "
                       f"{int(i.get('replies', 0)):,} replies) to {out / phrases.FILE}; specdesk drafts with it "
                       f"when that model is loaded without a draft", fraction=1.0, out=str(out))
