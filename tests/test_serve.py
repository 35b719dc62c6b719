"""`specdesk serve` as a subprocess on a free port, driven by the real `openai` client and read by
`prometheus_client`'s own parser: parity with `specdesk generate`, counters, concurrency, disconnects,
bad requests, API keys, SIGTERM, session logs."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from specdesk.core.sessionlog import read_log

openai = pytest.importorskip("openai")
prom_parser = pytest.importorskip("prometheus_client.parser")

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def chat_target(tiny_target, tmp_path_factory) -> Path:
    """The tiny target with a chat template, so one server answers both endpoints."""
    dest = tmp_path_factory.mktemp("chat") / "tiny-chat"
    shutil.copytree(tiny_target, dest)
    cfg = json.loads((dest / "tokenizer_config.json").read_text())
    cfg["chat_template"] = CHAT_TEMPLATE
    (dest / "tokenizer_config.json").write_text(json.dumps(cfg))
    return dest


class Server:
    def __init__(self, proc: subprocess.Popen, url: str, log: Path) -> None:
        self.proc, self.url, self.log = proc, url, log
        self.base = url[:-3]
        self.host, self.port = url.split("//")[1].split("/")[0].split(":")

    def client(self):
        return openai.OpenAI(base_url=self.url, api_key="unused", max_retries=0, timeout=120)

    def metrics(self) -> dict:
        text = urllib.request.urlopen(self.base + "/metrics", timeout=30).read().decode()
        out: dict = {}
        for fam in prom_parser.text_string_to_metric_families(text):
            for s in fam.samples:
                key = (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("model_name", "engine"))))
                out[key] = s.value
        return out

    def post(self, path: str, body, headers: dict | None = None) -> tuple[int, dict]:
        conn = http.client.HTTPConnection(self.host, int(self.port), timeout=60)
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request("POST", path, data, {"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        status, raw = r.status, r.read()
        conn.close()
        return status, json.loads(raw)


def start_server(target: Path, draft: Path, log: Path, *extra: str) -> Server:
    proc = subprocess.Popen([sys.executable, "-m", "specdesk", "serve", "--target", str(target), "--draft", str(draft),
                             "--device", "cpu", "--port", "0", "--log", str(log), *extra], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if " at http://" not in line:
        proc.kill()
        raise AssertionError(f"server did not start: {line!r} {proc.stderr.read()}")
    url = line.split(" at ", 1)[1].split(" ", 1)[0]
    return Server(proc, url, log)


@pytest.fixture(scope="module")
def server(chat_target, tiny_draft, tmp_path_factory):
    log = tmp_path_factory.mktemp("serve-log") / "serve.jsonl"
    s = start_server(chat_target, tiny_draft, log)
    yield s
    if s.proc.poll() is None:
        s.proc.send_signal(signal.SIGTERM)
        s.proc.wait(60)


def generate_cli(capsys, target: Path, draft: Path, prompt: str, n: int, *extra: str) -> dict:
    """`specdesk generate --json`, run in this process (its own command line and code path)."""
    from specdesk.cli import main

    capsys.readouterr()
    assert main(["generate", "--target", str(target), "--draft", str(draft), "--device", "cpu", "--prompt", prompt,
                 "--max-new-tokens", str(n), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


PROMPT = "def fibonacci(n):\n    "


def test_completions_greedy_and_sampled_match_specdesk_generate(server, chat_target, tiny_draft, capsys):
    client = server.client()
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny-chat"]
    want = generate_cli(capsys, chat_target, tiny_draft, PROMPT, 24, "--k", "3", "--raw")  # completions: raw text
    got = client.completions.create(model="tiny-chat", prompt=PROMPT, max_tokens=24, temperature=0,
                                    extra_body={"specdesk": {"k": 3}})
    assert got.choices[0].text == want["text"]
    assert got.model_extra["specdesk"]["token_ids"] == want["token_ids"]
    assert got.usage.completion_tokens == len(want["token_ids"])
    stream = client.completions.create(model="tiny-chat", prompt=PROMPT, max_tokens=24, temperature=0, stream=True,
                                       stream_options={"include_usage": True}, extra_body={"specdesk": {"k": 3}})
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == want["text"]
    ids = [t for c in chunks if c.choices and "token_ids" in (c.model_extra.get("specdesk") or {})
           for t in c.model_extra["specdesk"]["token_ids"]]
    assert ids == want["token_ids"]
    assert chunks[-1].usage.completion_tokens == len(want["token_ids"]) and not chunks[-1].choices
    # the same prompt again: read from the last request's cache (all of it but the last token, which is fed to decode)
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == chunks[-1].usage.prompt_tokens - 1 > 0
    # sampling: temperature, top_p and the seed reach the engine exactly as `generate` takes them
    want_s = generate_cli(capsys, chat_target, tiny_draft, PROMPT, 16, "--temperature", "0.8", "--top-p", "0.9",
                          "--seed", "7", "--k", "3", "--raw")  # a fixed k: with auto, the draws per step follow timings
    got_s = client.completions.create(model="tiny-chat", prompt=PROMPT, max_tokens=16, temperature=0.8, top_p=0.9,
                                      seed=7, extra_body={"specdesk": {"k": 3}})
    assert got_s.model_extra["specdesk"]["token_ids"] == want_s["token_ids"]


def test_chat_stream_and_whole_agree_with_the_engine(server, chat_target, tiny_draft):
    import specdesk

    client = server.client()
    messages = [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "import os"}]
    # the quantizations `specdesk serve` takes by default (auto: q8 on a CPU where specdesk's kernels build)
    engine = specdesk.load(str(chat_target), str(tiny_draft), device="cpu", target_quant="auto", draft_quant="auto")
    want = engine.generate(engine.chat_ids(messages), max_new_tokens=20, temperature=0.0, k=4)
    fixed_k = {"specdesk": {"k": 4}}  # the draft counts below compare one fixed k (auto's depend on timings)
    whole = client.chat.completions.create(model="tiny-chat", messages=messages, max_tokens=20, temperature=0,
                                           extra_body=fixed_k)
    assert whole.choices[0].message.content == want.text
    assert whole.choices[0].finish_reason == ("length" if want.stop_reason == "max_new_tokens" else "stop")
    stats = whole.model_extra["stats"]
    sd = whole.model_extra["metrics"]["speculative_decoding"]
    assert stats["total_draft_tokens_count"] == sd["num_draft_tokens"] == want.stats.drafted
    assert stats["accepted_draft_tokens_count"] == sd["num_accepted_draft_tokens"] == want.stats.accepted
    assert stats["rejected_draft_tokens_count"] == want.stats.drafted - want.stats.accepted
    assert sum(sd["acceptance_histogram"]) == sd["num_spec_steps"]
    if sd["num_spec_steps"]:
        assert sd["mean_acceptance_length"] == pytest.approx(1 + sd["num_accepted_draft_tokens"] / sd["num_spec_steps"])
    stream = client.chat.completions.create(model="tiny-chat", messages=messages, max_tokens=20, temperature=0,
                                            stream=True, extra_body=fixed_k)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == want.text


def _counters(m: dict) -> dict:
    get = lambda name, **lab: m.get(("specdesk:" + name, tuple(sorted(lab.items()))), 0.0)  # noqa: E731
    return {"drafts": get("spec_decode_num_drafts_total"), "draft_tokens": get("spec_decode_num_draft_tokens_total"),
            "accepted": get("spec_decode_num_accepted_tokens_total"),
            "generated": get("generation_tokens_total"),
            "pos0": get("spec_decode_num_accepted_tokens_per_pos_total", position="0"),
            "success": sum(v for (n, _), v in m.items() if n == "specdesk:request_success_total")}


def test_concurrent_clients_are_not_mixed_up_and_counters_add_up(server):
    prompts = [f"x = {i}\nfor item in range({i}):\n    " for i in range(8)]
    client = server.client()
    expected = {p: client.completions.create(model="tiny-chat", prompt=p, max_tokens=6, temperature=0)
                .choices[0].text for p in prompts}
    before = _counters(server.metrics())
    results: list[tuple[str, object]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        c = server.client()
        try:
            for j in range(5):
                p = prompts[(i + j) % len(prompts)]
                if j % 2:
                    r = c.completions.create(model="tiny-chat", prompt=p, max_tokens=6, temperature=0)
                    text, extra = r.choices[0].text, r.model_extra
                else:
                    chunks = list(c.completions.create(model="tiny-chat", prompt=p, max_tokens=6, temperature=0,
                                                       stream=True, stream_options={"include_usage": True}))
                    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
                    extra = chunks[-1].model_extra
                with lock:
                    results.append((p, text, extra))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert len(results) == 40
    for p, text, _ in results:
        assert text == expected[p]  # each client got its own prompt's continuation
    after = _counters(server.metrics())
    sd = [extra["metrics"]["speculative_decoding"] for _, _, extra in results]
    assert after["success"] - before["success"] == 40
    assert after["drafts"] - before["drafts"] == sum(s["num_spec_steps"] for s in sd)
    assert after["draft_tokens"] - before["draft_tokens"] == sum(s["num_draft_tokens"] for s in sd)
    assert after["accepted"] - before["accepted"] == sum(s["num_accepted_draft_tokens"] for s in sd)
    assert after["pos0"] - before["pos0"] == sum(sum(s["acceptance_histogram"][1:]) for s in sd)
    assert after["generated"] - before["generated"] == 40 * 6


def _raw_stream(server, body: dict):
    """A streaming request on a plain socket (so the test can drop the connection mid-stream)."""
    import socket

    sock = socket.create_connection((server.host, int(server.port)), timeout=60)
    data = json.dumps(body).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    f = sock.makefile("rb")
    assert f.readline().startswith(b"HTTP/1.1 200")
    while f.readline() not in (b"\r\n", b""):
        pass
    assert f.readline().startswith(b"data: ")  # the first step
    return sock, f


def test_client_disconnect_cancels_its_generation(server):
    sock, f = _raw_stream(server, {"prompt": "import sys\n", "max_tokens": 900, "temperature": 0, "stream": True})
    f.close()
    sock.close()
    deadline = time.time() + 30
    while time.time() < deadline:
        m = server.metrics()
        if m.get(("specdesk:num_requests_running", ())) == 0:
            break
        time.sleep(0.1)
    assert m.get(("specdesk:num_requests_running", ())) == 0
    assert m.get(("specdesk:request_success_total", (("finished_reason", "abort"),)), 0) >= 1
    # the session log shows it stopped early, as cancelled, within a few steps of the disconnect
    gen = [g for g in read_log(server.log).generations if g.info.get("settings", {}).get("max_new_tokens") == 900][-1]
    assert gen.summary["stop_reason"] == "cancelled" and gen.summary["stats"]["new_tokens"] < 900
    # and the server goes on serving
    r2 = server.client().completions.create(model="tiny-chat", prompt="x", max_tokens=2, temperature=0)
    assert r2.usage.completion_tokens == 2


BAD_REQUESTS = [
    ("/v1/completions", b"{not json", 400, "invalid_json"),
    ("/v1/completions", b"[1, 2]", 400, "invalid_type"),
    ("/v1/completions", {"model": "gpt-4", "prompt": "x"}, 404, "model_not_found"),
    ("/v1/completions", {"prompt": "x", "temperature": -1}, 400, "invalid_value"),
    ("/v1/completions", {"prompt": "x", "top_p": 2}, 400, "invalid_value"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "invalid_value"),
    ("/v1/completions", {"prompt": "x", "n": 2}, 400, "invalid_value"),
    ("/v1/completions", {"prompt": "x", "seed": "seven"}, 400, "invalid_type"),
    ("/v1/completions", {"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 400, "invalid_value"),
    ("/v1/completions", {"prompt": "x", "logprobs": 3}, 400, "unsupported_parameter"),
    ("/v1/completions", {"max_tokens": 3}, 400, "missing_required_parameter"),
    ("/v1/completions", {"prompt": "x " * 900, "max_tokens": 500}, 400, "context_length_exceeded"),
    ("/v1/completions", {"prompt": "\ud800 a lone surrogate", "max_tokens": 2}, 400, None),  # was a 500
    ("/v1/chat/completions", {"messages": []}, 400, "invalid_type"),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "hi"}]}, 400, "invalid_value"),
    ("/v1/nothing", {}, 404, "not_found"),
    ("/v1/models", {}, 405, "method_not_allowed"),
]


def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(server):
    errors_before = sum(v for (n, _), v in server.metrics().items() if n == "specdesk:request_errors_total")
    for path, body, status, code in BAD_REQUESTS:
        got_status, got = server.post(path, body)
        assert got_status == status, (path, body, got)
        assert set(got["error"]) == {"message", "type", "param", "code"} and got["error"]["code"] == code, got
        assert got["error"]["message"]
        ok_status, ok = server.post("/v1/completions", {"prompt": "y", "max_tokens": 1, "temperature": 0})
        assert ok_status == 200 and ok["usage"]["completion_tokens"] == 1
    errors_after = sum(v for (n, _), v in server.metrics().items() if n == "specdesk:request_errors_total")
    assert errors_after - errors_before == len(BAD_REQUESTS)


def test_openai_client_raises_its_own_errors(server):
    client = server.client()
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x", max_tokens=2)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny-chat", messages=[{"role": "user", "content": "x"}],
                                       max_tokens=2, temperature=9)
    assert "temperature" in str(e.value)


def test_api_key_and_binding(tiny_engine, tmp_path):
    from specdesk.core.errors import BadSetting
    from specdesk.serve import EngineHost, SpecdeskServer

    with pytest.raises(BadSetting, match="api-key"):
        SpecdeskServer(EngineHost(tiny_engine), address="0.0.0.0", port=0)
    srv = SpecdeskServer(EngineHost(tiny_engine), port=0, api_key="s3cret", log_file=tmp_path / "k.jsonl").start()
    try:
        base = srv.url
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=base, api_key="wrong", max_retries=0).models.list()
        ok = openai.OpenAI(base_url=base, api_key="s3cret", max_retries=0)
        assert ok.models.list().data[0].id == tiny_engine.target.name
        assert urllib.request.urlopen(base[:-3] + "/metrics").status == 200  # as vLLM: metrics stay open
    finally:
        srv.stop()
    r = subprocess.run([sys.executable, "-m", "specdesk", "serve", "--host", "0.0.0.0", "--drafter", "none",
                        "--target", "/nowhere"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("specdesk: error: ") and "--api-key" in r.stderr


def test_sigterm_finishes_cleanly_and_every_request_is_logged(chat_target, tiny_draft, tmp_path):
    """Its own server (the signal ends it): two whole requests, then SIGTERM in the middle of a stream."""
    server = start_server(chat_target, tiny_draft, tmp_path / "serve.jsonl")
    try:
        client = server.client()
        for prompt in ("def f(x):", "import os\n"):
            assert client.completions.create(model="tiny-chat", prompt=prompt, max_tokens=4, temperature=0).choices
    except BaseException:
        server.proc.kill()
        raise
    sock, f = _raw_stream(server, {"prompt": "while True:\n", "max_tokens": 800, "temperature": 0, "stream": True})
    server.proc.send_signal(signal.SIGTERM)
    rest = f.read()  # the stream ends (cancelled), it does not hang
    sock.close()
    assert server.proc.wait(60) == 0
    assert b'"finish_reason": "abort"' in rest
    log = read_log(server.log)
    assert not log.truncated
    assert all(g.complete for g in log.generations)
    assert len(log.generations) == 3 and all("request" in g.info for g in log.generations)
    assert log.header.get("server") is True


def test_a_request_may_choose_any_drafter_the_engine_knows():
    from specdesk.serve.protocol import ApiError, parse_request

    body = {"messages": [{"role": "user", "content": "hi"}], "specdesk": {"drafter": "model+lookup"}}
    assert parse_request("chat", body, ("m",), 2048).drafter == "model+lookup"
    with pytest.raises(ApiError) as e:
        parse_request("chat", {**body, "specdesk": {"drafter": "eagle"}}, ("m",), 2048)
    assert e.value.param == "specdesk.drafter" and "model+lookup" in e.value.message


def test_a_port_in_use_is_refused_before_the_models_load(tiny_target, tiny_draft):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "specdesk", "serve", "--target", str(tiny_target), "--draft",
                            str(tiny_draft), "--device", "cpu", "--port", str(port)], cwd=ROOT, env=ENV,
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr == f"specdesk: error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    assert "loading" not in r.stderr and "warming up" not in r.stderr  # refused before the pair loaded
