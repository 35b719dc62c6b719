"""``specdesk generate``: one generation, text streamed to stdout as it is produced."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from specdesk.commands.common import (add_model_args, add_sampling_args, end_progress, load_engine, tty_progress,
                                      use_own_draft)
from specdesk.core.errors import BadSetting, SpecdeskError
from specdesk.core.events import DoneEvent, StepEvent
from specdesk.core.pairing import MODEL_DRAFTERS, resolve_drafter
from specdesk.core.settings import GenerationSettings


def add_parser(sub) -> None:
    p = sub.add_parser("generate", help="generate text headless (streams to stdout)",
                       description="Generate with speculative decoding; text streams to stdout.")
    add_model_args(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompt-file", type=Path, help="read the prompt from this file ('-' for stdin)")
    chat = p.add_argument_group("chat models", "A target with a chat template gets the prompt as a user "
                                               "message through its template.")
    chat.add_argument("--system", metavar="TEXT", help="a system message before the prompt (chat models)")
    chat.add_argument("--raw", action="store_true", help="send the prompt as it is, without the chat template")
    add_sampling_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object with the result instead of text")
    p.add_argument("--log", type=Path, help="write a session log (JSON Lines) to this file")
    p.set_defaults(func=run)


def read_prompt(args) -> str:
    if args.prompt is not None:
        return args.prompt
    if str(args.prompt_file) == "-":
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadSetting(f"the prompt on standard input is not UTF-8 text (byte {e.start}: "
                             f"0x{data[e.start]:02x})") from None
    try:
        return args.prompt_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BadSetting(f"cannot read prompt file {args.prompt_file}: {getattr(e, 'strerror', None) or e}") from None


def settings_from(args) -> GenerationSettings:
    return GenerationSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                              top_p=args.top_p, seed=args.seed, k=args.k, stop=tuple(args.stop),
                              tree=args.tree)


def _quant_label(m) -> str:
    """A LoadedModel's quantization as the planner names it (QuantSpec.label): none, int8, nf4, nf4+dq, ..."""
    return m.quant + ("+dq" if m.double_quant else "")


def record_peak(engine, context: int) -> None:
    """Remember this configuration's measured memory peak, shown by `specdesk plan` beside its estimate.

    Best effort: a peak that cannot be read or a history file that cannot be written never fails a generation.
    """
    import logging

    from specdesk.core.plan.history import record_measurement
    from specdesk.hw.memory import peak_memory_bytes

    peak = peak_memory_bytes(engine.device)
    if peak is None:
        return
    t, d = engine.target, engine.draft
    try:
        record_measurement(t.path, _quant_label(t), context, peak, engine.device, dtype=t.dtype,
                           draft=d.path if (d is not None and engine.drafter in MODEL_DRAFTERS) else engine.drafter,
                           draft_quant=_quant_label(d) if d is not None else "none")
    except OSError as e:
        logging.getLogger(__name__).warning("could not record the memory peak: %s", e)


def run(args: argparse.Namespace) -> int:
    notes: list[str] = []  # said once the settings are known good: an error stays the only line
    use_own_draft(args, notes.append)
    resolve_drafter(args.target, args.draft, args.drafter)  # contradictions fail before anything loads
    settings = settings_from(args)  # bad values fail here, before any model is loaded
    prompt = read_prompt(args)
    if args.log is not None:
        try:
            args.log.parent.mkdir(parents=True, exist_ok=True)
            with args.log.open("a"):
                pass
        except OSError as e:
            raise BadSetting(f"cannot write the log file {args.log}: {e.strerror or e}") from None
    if args.system is not None and args.raw:
        raise BadSetting("--system needs the chat template: leave out --raw or --system")
    for note in notes:
        print(f"specdesk: {note}", file=sys.stderr)
    progress = tty_progress()
    try:
        engine = load_engine(args, progress=progress)
    finally:
        if progress is not None:
            end_progress()
    ids, templated = engine.prompt_ids(prompt, raw=args.raw, system=args.system)
    writer = None
    if args.log is not None:
        from specdesk.core.sessionlog import SessionLogWriter
        from specdesk.hw.memory import memory_snapshot

        try:
            writer = SessionLogWriter(args.log, engine.describe(), settings.to_dict(),
                                      memory=lambda: memory_snapshot(engine.device))
        except OSError as e:
            raise SpecdeskError(f"cannot write the log file {args.log}: {e.strerror or e}") from None
    log_failed: list[str] = []

    def log_write(write) -> None:  # a full disk stops the log, not the generation (the app's rule too)
        if writer is None or log_failed:
            return
        try:
            write()
        except OSError as e:
            log_failed.append(e.strerror or str(e))

    cancel = threading.Event()
    done = None

    def on_sigint(signum, frame):  # first Ctrl-C: finish the current step and write the summary
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()

    previous = signal.signal(signal.SIGINT, on_sigint) if threading.current_thread() is threading.main_thread() else None
    try:
        events = engine.stream(ids, settings=settings, cancel=cancel)
        log_write(lambda: writer.begin(prompt, settings.to_dict(), engine.drafter, len(ids),
                                       chat_template=templated, system=args.system))
        for ev in events:
            log_write(lambda: writer.event(ev))
            if isinstance(ev, StepEvent) and not args.json:
                sys.stdout.write(ev.text)
                sys.stdout.flush()
            elif isinstance(ev, DoneEvent):
                done = ev
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if writer is not None:
            writer.close()
    if done is None:
        return 130
    record_peak(engine, done.stats.prompt_tokens + settings.max_new_tokens)
    if args.json:
        out = {**done.stats.to_dict(), "token_ids": list(done.token_ids), "text": done.text,
               "stop_reason": done.stop_reason, "seed": done.seed, "drafter": engine.drafter,
               "chat_template": templated, "stats": done.stats.to_dict()}
        print(json.dumps(out, ensure_ascii=False))
    else:
        sys.stdout.write(done.tail + "\n")
        s = done.stats
        rate = f"{s.acceptance_rate:.2f}" if s.acceptance_rate is not None else "n/a"
        print(f"[{s.new_tokens} tokens, {s.tokens_per_second or 0:.1f} tok/s, acceptance {rate}, "
              f"{s.mean_accepted_length or 0:.2f} tokens/step, drafter {engine.drafter}, stop: {done.stop_reason}"
              f"{', chat template' if templated else ''}]", file=sys.stderr)
    if log_failed:
        print(f"specdesk: error: the session log {args.log} stopped: {log_failed[0]} (the reply is whole; the log "
              f"holds the lines written before)", file=sys.stderr)
        return 2
    return 130 if done.stop_reason == "cancelled" else 0
