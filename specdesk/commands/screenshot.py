"""``specdesk screenshot``: the main window after a real generation, rendered offscreen to a PNG.

For the README and bug reports: it loads the pair (the demo pair by default), sends the prompt, measures
plain decoding for the speed-up, waits until the plots have data, and saves the window. It neither reads
nor writes the user's settings, and its session log goes to a temporary folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

from specdesk.core.errors import SpecdeskError
from specdesk.core.loading import QUANTS
from specdesk.core.pairing import DRAFTERS

DEFAULT_PROMPT = ('import os\n\n\ndef list_python_files(root):\n    """Return the paths of the .py files under root."""\n'
                  "    found = []\n")


def add_parser(sub) -> None:
    p = sub.add_parser("screenshot", help="render the app after a real generation to a PNG (no display needed)",
                       description="Open the main window offscreen, generate with the demo pair (or --target/"
                                   "--draft), compare with plain decoding, and save the window as a PNG.")
    p.add_argument("out", type=Path, metavar="OUT.png")
    p.add_argument("--prompt", action="append", default=None,
                   help="prompt text (default: the start of a Python function); given again, the next turn of the "
                        "chat (each reply compared with plain decoding), and the window shows the last")
    p.add_argument("--max-new-tokens", type=int, default=160)
    p.add_argument("--k", default="auto", help="draft tokens per step, or auto (the default)")
    p.add_argument("--drafter", default=None, choices=DRAFTERS,
                   help="who drafts, as the window's Drafter box (default: what the app picks for the pair)")
    p.add_argument("--target", default="demo-target")
    p.add_argument("--draft", default=None, help="default: demo-draft for demo-target, the bundled draft distilled for the "
                                                     "target if there is one, else prompt lookup (as the app)")
    p.add_argument("--target-quant", default="auto", choices=QUANTS,
                   help="the target's quantization, as the app's: auto (the default: on a CPU q4 for a GGUF file of "
                        "4 bits a weight or fewer, q8 for one of 5 to 8 bits or a float llama/mistral/qwen2 model of "
                        "100 MB and more, else none), none, int8, nf4, fp4, q4 or q8 (CPU)")
    p.add_argument("--no-compare", action="store_true", help="skip measuring plain decoding")
    p.add_argument("--size", default="1440x900", help="window size WIDTHxHEIGHT (default 1440x900)")
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for each stage (default 600)")
    p.set_defaults(func=run)


def _size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(x) for x in text.lower().split("x"))
        if w < 400 or h < 300:
            raise ValueError
        return w, h
    except ValueError:
        raise SpecdeskError(f"--size must look like 1440x900 (at least 400x300), not {text!r}") from None


def run(args: argparse.Namespace) -> int:
    size = _size(args.size)
    if args.out.suffix.lower() != ".png":
        raise SpecdeskError(f"the screenshot is a PNG: give a file name ending in .png, not {args.out.name}")
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SpecdeskError(f"cannot write {args.out}: {e.strerror or e}") from None
    with tempfile.TemporaryDirectory(prefix="specdesk-screenshot-") as tmp:
        image = take_screenshot(args, size, Path(tmp))
        if not image.save(str(args.out), "PNG"):
            raise SpecdeskError(f"cannot write {args.out} (disk full or no permission?)")
    print(f"wrote {args.out}")
    return 0


def take_screenshot(args, size: tuple[int, int], logs_dir: Path):
    from PySide6.QtCore import QEventLoop, QTimer

    from specdesk.qt.app import make_app, startup_request
    from specdesk.qt.main_window import MainWindow

    app = make_app()
    win = MainWindow(logs_dir=logs_dir, persist=False)
    win.resize(*size)
    win.show()

    def wait(ok_signal, fail_signal=None, what: str = "") -> object:
        got: dict = {}
        loop = QEventLoop()
        ok_signal.connect(lambda v=None: (got.setdefault("ok", v), loop.quit()))
        if fail_signal is not None:
            fail_signal.connect(lambda msg: (got.setdefault("error", msg), loop.quit()))
        QTimer.singleShot(int(args.timeout * 1000), loop.quit)
        loop.exec()
        if "error" in got:
            raise SpecdeskError(f"{what} failed: {got['error']}")
        if "ok" not in got:
            raise SpecdeskError(f"{what} did not finish within {args.timeout:.0f} s")
        return got["ok"]

    try:
        draft = args.draft
        req = dataclasses.replace(startup_request(args.target, draft, None), target_quant=args.target_quant)
        win.load_pair(req)
        wait(win.engine_ready, win.load_error, f"loading {args.target}")
        win.controls.max_new.setValue(args.max_new_tokens)
        win.controls.temperature.setValue(0.0)
        win.controls.k_box.setValue(-1 if args.k == "auto" else int(args.k))
        if getattr(args, "drafter", None) is not None:
            box = win.controls.drafter_box
            i = box.findData(args.drafter)
            if i < 0 or not box.model().item(i).isEnabled():
                raise SpecdeskError(f"drafter {args.drafter} is not available for this pair")
            box.setCurrentIndex(i)
        prompts = args.prompt or [DEFAULT_PROMPT]
        for text in prompts:
            settle(app)
            win.input.setPlainText(text)
            win.send()
            done = wait(win.reply_done, win.generation_failed, "generating")
            settle(app)  # as a user's click on Compare would: the finished reply drawn before plain decoding starts
            if not args.no_compare and _start_compare(win):
                wait(win.compare_done, win.generation_failed, "plain decoding")
        settle(app, 1.2)  # a few more memory samples, and the 10 Hz plot timer
        win.plots.refresh()
        bar = win.chat.verticalScrollBar()
        bar.setValue(0 if len(prompts) == 1 else bar.maximum())  # the prompt and the start of the reply, or the last
        app.processEvents()
        if not done.token_ids:
            raise SpecdeskError("the generation produced no tokens")
        return win.grab().toImage()
    finally:
        win.close()
        win.deleteLater()
        app.processEvents()


def settle(app, seconds: float = 0.4) -> None:
    """Let the window draw what is pending (a finished reply's chat, plots and cards: on 2 cores that drawing, run
    beside a generation, slowed the first plain comparisons, plain against plain, to 0.7-0.95x)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.02)


def _start_compare(win) -> bool:
    win.compare()
    return win.state == "comparing"
