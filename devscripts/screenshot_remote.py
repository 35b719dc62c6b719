"""Screenshot of the app connected to `specdesk serve` (the demo pair in a subprocess), offscreen.

    QT_QPA_PLATFORM=offscreen python devscripts/screenshot_remote.py docs/screenshot-remote.png
    QT_QPA_PLATFORM=offscreen python devscripts/screenshot_remote.py /tmp/serving.png --serving   # Start server…

Starts the server on a free port, opens the main window, connects (Tools → Connect to a server…), sends
a prompt, waits for a few /metrics scrapes, and saves the window. Neither the user's settings nor logs
are touched (temporary folders).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPT = ('import os\n\n\ndef list_python_files(root):\n    """Return the paths of the .py files under root."""\n'
          "    found = []\n")


def main(out: str, size=(1440, 980)) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="specdesk-remote-shot-"))
    os.environ["SPECDESK_CONFIG_DIR"] = str(tmp / "config")
    os.environ["SPECDESK_DATA_DIR"] = str(tmp / "data")
    server = subprocess.Popen([sys.executable, "-m", "specdesk", "serve", "--port", "0", "--log",
                               str(tmp / "server.jsonl")], stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        url = line.split(" at ", 1)[1].split(" ", 1)[0]
        from specdesk.qt import theme
        from specdesk.qt.app import make_app
        from specdesk.qt.main_window import MainWindow
        from specdesk.qt.server_tools import RemoteRequest

        app = make_app()
        theme.apply(app)
        win = MainWindow(logs_dir=tmp / "logs", persist=False)
        win.resize(*size)
        win.show()

        def until(cond, timeout=300):
            end = time.monotonic() + timeout
            while not cond() and time.monotonic() < end:
                app.processEvents()
                time.sleep(0.01)

        ready, done = [], []
        win.engine_ready.connect(ready.append)
        win.reply_done.connect(done.append)
        win.server_tools.connect_to(RemoteRequest(url))
        until(lambda: ready)
        win.controls.max_new.setValue(160)
        win.controls.temperature.setValue(0.0)
        win.input.setPlainText(PROMPT)
        win.send()
        until(lambda: done)
        panel = win.server_tools.panel
        end = time.monotonic() + 2.5  # two more scrapes after the reply
        until(lambda: time.monotonic() > end)
        win.plots.refresh()
        panel.refresh()
        win.chat.verticalScrollBar().setValue(0)
        app.processEvents()
        win.grab().toImage().save(out, "PNG")
        print(f"wrote {out}: {done[0].stats.new_tokens} tokens at {done[0].stats.tokens_per_second:.1f} tok/s "
              f"(server-side), server figures: {panel.latest}")
        win.close()
        app.processEvents()
        return 0
    finally:
        server.terminate()
        server.wait(60)


def serving(out: str, size=(1440, 980)) -> int:
    """The app serving its loaded demo pair (Tools → Start server…) while a client streams a request."""
    import json
    import threading
    import urllib.request

    tmp = Path(tempfile.mkdtemp(prefix="specdesk-serve-shot-"))
    os.environ["SPECDESK_CONFIG_DIR"] = str(tmp / "config")
    os.environ["SPECDESK_DATA_DIR"] = str(tmp / "data")
    from specdesk.qt import theme
    from specdesk.qt.app import make_app
    from specdesk.qt.main_window import DEMO_PAIR, MainWindow

    app = make_app()
    theme.apply(app)
    win = MainWindow(logs_dir=tmp / "logs", persist=False)
    win.resize(*size)
    win.show()

    def until(cond, timeout=300):
        end = time.monotonic() + timeout
        while not cond() and time.monotonic() < end:
            app.processEvents()
            time.sleep(0.01)

    ready, done = [], []
    win.engine_ready.connect(ready.append)
    win.reply_done.connect(done.append)
    win.load_pair(DEMO_PAIR)
    until(lambda: ready)
    win.server_tools.start_server(port=0)
    url = win.server_tools.server.url
    answers = []

    def client():
        body = json.dumps({"prompt": PROMPT, "max_tokens": 160, "temperature": 0}).encode()
        req = urllib.request.Request(url + "/completions", body, {"Content-Type": "application/json"})
        answers.append(json.loads(urllib.request.urlopen(req, timeout=600).read()))

    t = threading.Thread(target=client)
    t.start()
    until(lambda: answers)
    win.controls.max_new.setValue(60)
    win.input.setPlainText("import sys\n")
    win.send()
    until(lambda: done)
    end = time.monotonic() + 2.5
    until(lambda: time.monotonic() > end)
    win.grab().toImage().save(out, "PNG")
    print(f"wrote {out}; the client's request: {answers[0]['usage']}, {answers[0]['stats']['tokens_per_second']:.1f} tok/s")
    win.close()
    app.processEvents()
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[2] == "--serving":
        rc = serving(sys.argv[1])
    else:
        rc = main(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshot-remote.png")
    sys.stdout.flush()
    os._exit(rc)  # skip collecting Qt objects at interpreter exit (a script, not the app)
