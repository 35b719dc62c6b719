"""The app as the front end of a server: Tools → Start server… serves the loaded pair; Connect to a server…
chats with an OpenAI endpoint (here specdesk's own server) and plots its /metrics; remote runs are logged."""

from __future__ import annotations

import time

import pytest

from specdesk.core.sessionlog import read_log

openai = pytest.importorskip("openai")
WAIT_S = 240


def _until(qapp, cond, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        qapp.processEvents()
        time.sleep(0.01)


@pytest.fixture
def window(qapp, tmp_path, monkeypatch):
    from specdesk.qt import theme
    from specdesk.qt.main_window import MainWindow

    monkeypatch.setenv("SPECDESK_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPECDESK_DATA_DIR", str(tmp_path / "data"))
    theme.apply(qapp)
    win = MainWindow(logs_dir=tmp_path / "logs", persist=False)
    win.resize(1400, 900)
    win.show()
    yield win
    win.close()
    win.deleteLater()
    qapp.processEvents()


def _load(qapp, win, req) -> None:
    ready, failed = [], []
    win.engine_ready.connect(ready.append)
    win.load_error.connect(failed.append)
    win.load_pair(req)
    _until(qapp, lambda: ready or failed, "loading")
    assert ready, failed


def _send(qapp, win, text: str, max_new: int = 16):
    done, failed = [], []
    win.reply_done.connect(done.append)
    win.generation_failed.connect(failed.append)
    win.controls.max_new.setValue(max_new)
    win.controls.temperature.setValue(0.0)
    win.input.setPlainText(text)
    win.send()
    _until(qapp, lambda: done or failed, "a reply")
    assert done, failed
    return done[-1]


def test_start_server_serves_the_loaded_pair_and_the_chat_still_works(qapp, window, tiny_target, tiny_draft):
    from specdesk.qt.worker import LoadRequest

    _load(qapp, window, LoadRequest(str(tiny_target), str(tiny_draft), "model", device="cpu"))
    tools = window.server_tools
    assert tools.start_action.isEnabled() and not tools.stop_action.isEnabled()
    assert tools.start_server(port=0)
    url = tools.server.url
    assert url in tools.status.text() and tools.panel.isVisible()
    client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
    r = client.completions.create(model="tiny-target", prompt="import os\n", max_tokens=8, temperature=0)
    assert r.usage.completion_tokens == 8
    local = _send(qapp, window, "import os\n", max_new=8)  # the chat and the server share one engine
    assert local.text == r.choices[0].text
    _until(qapp, lambda: tools.panel.latest is not None, "a /metrics scrape", 30)
    tools.stop_server()
    assert tools.server is None and not tools.stop_action.isEnabled() and not tools.panel.isVisible()


def test_connected_app_chats_with_a_server_and_plots_its_metrics(qapp, window, tiny_engine, tmp_path):
    from specdesk.qt.server_tools import RemoteRequest
    from specdesk.serve import EngineHost, SpecdeskServer

    srv = SpecdeskServer(EngineHost(tiny_engine), port=0, log_file=tmp_path / "server.jsonl").start()
    try:
        _load(qapp, window, RemoteRequest(srv.url))
        assert window.info.device == srv.url and window.info.draft == tiny_engine.draft.name
        assert window.server_tools.local_action.isEnabled() and not window.server_tools.start_action.isEnabled()
        want = tiny_engine.generate("def f(x):\n", max_new_tokens=24, k=4)
        window.controls.k_box.setValue(4)
        done = _send(qapp, window, "def f(x):\n", max_new=24)
        assert list(done.token_ids) == want.token_ids  # the remote reply is the local engine's, token for token
        steps = window.plots.steps
        assert steps.tokens == 24 and steps.drafted == want.stats.drafted and steps.accepted == want.stats.accepted
        panel = window.server_tools.panel
        _until(qapp, lambda: panel.first is not None and panel.last is not None
               and panel.last.get("generation_tokens") is not None and len(panel.t) >= 2, "two scrapes", 30)
        whole = __import__("specdesk.core.remote.figures", fromlist=["figures"]).figures(panel.first, panel.last)
        assert panel.latest.prefix == "specdesk:" and "specdesk:" in panel.gauges.text()
        assert whole.generated is not None
        # the remote run is recorded in the app's session log, with the server's step figures
        log = read_log(window.log_path)
        assert log.header["remote"]["url"] == srv.url
        gen = log.generations[-1]
        assert gen.complete and [s["token_ids"] for s in gen.steps] == [list(s.token_ids) for s in want.steps]
    finally:
        window.server_tools.shutdown()
        srv.stop()
