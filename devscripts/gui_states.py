"""Render the window in each state the failure-mode banners and the first run add, to PNGs, for a person to look at.

    QT_QPA_PLATFORM=offscreen python devscripts/gui_states.py out/states     # offscreen
    python devscripts/gui_states.py out/states --x11-root                    # on a real X server

Every state is provoked for real, on the demo pair: the first-run welcome (a fresh settings folder),
drafting that slows a reply (the demo target with an untrained draft of the same shape as demo-draft:
its guesses almost never pass), a reply the planner says will not fit (a small memory budget), an
out-of-memory in the middle of a reply (a memory limit 256 MiB over what the app holds, then 512 MiB
taken by this process), and acceptance drifting down (a completion document that turns from Python to
a list of digits). Settings and session logs go to a temporary folder. About a minute on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def untrained_draft(dest: Path) -> Path:
    """demo-draft's shape and tokenizer, random weights: a draft whose guesses the target rejects."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from specdesk.core.loading import resolve

    src = resolve("demo-draft")
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src)).save_pretrained(dest)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(src / name, dest / name)
    return dest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", default="1440x900")
    ap.add_argument("--x11-root", action="store_true",
                    help="also capture the X server's whole screen (ImageMagick's import) beside each window grab")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="specdesk-states-"))
    os.environ["SPECDESK_CONFIG_DIR"] = str(tmp / "config")
    os.environ["SPECDESK_DATA_DIR"] = str(tmp / "data")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import torch
    from PySide6.QtCore import QEventLoop, QTimer

    from specdesk.core.events import StepEvent
    from specdesk.hw.memory import process_reader
    from specdesk.qt.app import make_app
    from specdesk.qt.main_window import DEMO_PAIR, MainWindow
    from specdesk.qt.worker import LoadRequest

    app = make_app()
    w, h = (int(x) for x in args.size.split("x"))
    win = MainWindow()
    win.resize(w, h)
    win.show()

    def wait(signal, seconds: float = 300.0):
        got: list = []
        loop = QEventLoop()
        signal.connect(lambda *a: (got.append(a), loop.quit()))
        QTimer.singleShot(int(seconds * 1000), loop.quit)
        loop.exec()
        if not got:
            raise SystemExit(f"timed out waiting for {signal}")
        return got[0]

    def settle(seconds: float = 0.6) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            app.processEvents()
            time.sleep(0.02)
        win.plots.refresh()
        app.processEvents()

    def shot(name: str) -> None:
        settle()
        path = args.out / f"{name}.png"
        win.grab().toImage().save(str(path), "PNG")
        print(path)
        if args.x11_root:
            import subprocess

            root = args.out / f"{name}-x11-root.png"
            subprocess.run(["import", "-window", "root", str(root)], check=True)
            print(root)

    def send(text: str, max_new: int, k: int | str = 4, drafter: str = "model"):
        c = win.controls
        c.max_new.setValue(max_new)
        c.k_box.setValue(-1 if k == "auto" else k)
        c.drafter_box.setCurrentIndex(c.drafter_box.findData(drafter))
        win.input.setPlainText(text)
        win.send()

    def when(n_steps: int, then) -> None:
        """Call ``then`` once the reply has streamed n_steps steps."""
        seen = [0]

        def on_event(tag, ev):
            if isinstance(ev, StepEvent):
                seen[0] += 1
                if seen[0] == n_steps:
                    win.worker.event.disconnect(on_event)
                    then()
        win.worker.event.connect(on_event)

    win.load_pair(DEMO_PAIR, startup=True)
    wait(win.engine_ready)
    shot("01-first-run-welcome")

    # memory: the planner's total for a 40-token reply is the budget, and 600 new tokens are asked for
    from specdesk.core.plan import plan

    prompt = "def fibonacci(n):\n    "
    win.memory_budget = plan("demo-target", "demo-draft", device="cpu", context=60, k="auto", budget_bytes=2**40,
                             recommend=False, use_history=False).total_bytes
    send(prompt, 600, k="auto")
    wait(win.generation_failed)
    shot("02-memory-warning")
    win.memory_budget = None
    win.health.memory.hide()

    # out of memory mid-reply: a limit 256 MiB over what the app holds, then 512 MiB taken
    win.new_chat()
    read = process_reader("cpu")
    win.memory_limit = read() + 256 * 2**20
    hog: list = []
    when(12, lambda: hog.append(torch.ones(128 * 2**20)))
    send(prompt, 1500, k="auto")
    wait(win.generation_failed)
    hog.clear()
    win.memory_limit = None
    shot("03-out-of-memory")
    win.health.oom.hide()

    # drift: Python, then digits, in one completion document
    win.new_chat()
    send('import os\n\n\ndef list_python_files(root):\n    """Return the paths of the .py files under root."""\n'
         "    found = []\n", 96)
    wait(win.reply_done)
    send("\n\n# the digits of pi\n3 1 4 1 5 9 2 6 5 3 5 8 9 7 9 3 2 3 8 4 6 2 6 4 3 3 8 3 2 7 9 5 0 2 8 8 ", 128)
    wait(win.reply_done)
    shot("04-acceptance-drift")

    # drafting that does not pay: an untrained draft
    draft = untrained_draft(tmp / "untrained-draft")
    win.load_pair(LoadRequest("demo-target", str(draft), "model"))
    wait(win.engine_ready)
    send("def fibonacci(n):\n    ", 24, k="auto", drafter="none")  # Compare-like plain steps: the plain cost
    wait(win.reply_done)
    send("\n\ndef main():\n    ", 160, k=4)
    wait(win.reply_done)
    shot("05-drafting-slows-this-reply")
    b = win.health.slow.buttons.get("Use k=auto")
    if b is not None:
        b.click()
        shot("06-fix-applied")
    win.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
