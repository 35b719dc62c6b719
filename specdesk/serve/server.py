"""The HTTP front door: the standard library's ThreadingHTTPServer, OpenAI routes, server-sent events.

    GET  /v1/models, /v1/models/{id}     the loaded pair (id: the target's name, or --served-model-name)
    POST /v1/chat/completions            chat (models with a chat template)
    POST /v1/completions                 text completion
    GET  /metrics                        Prometheus text (see metrics.py)
    GET  /health                         200 once a model is loaded, 503 before

One handler thread per connection parses and checks the request, queues it for the engine thread
(runner.py) and writes what comes back: one JSON body, or one SSE ``data:`` line per engine step and
``data: [DONE]``. Before writing each step the handler checks whether the client is still there (a
readable socket with nothing to read is a closed one) and cancels the job if not, so a disconnected
client stops its generation within one step. Errors are OpenAI's error bodies with 4xx codes; no error
ends the server. With an API key, the /v1 routes need ``Authorization: Bearer <key>`` (vLLM guards the
same routes and leaves /metrics and /health open).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from specdesk.core.errors import BadSetting
from specdesk.core.events import DoneEvent, StepEvent
from specdesk.serve import protocol as P
from specdesk.serve.metrics import ServerMetrics
from specdesk.serve.runner import EngineHost, EngineLoop, Job

log = logging.getLogger(__name__)

MAX_BODY = 8 * 1024 * 1024
WAIT_POLL_S = 0.1  # how often a waiting handler checks whether its client is still there


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    app: "SpecdeskServer"


class Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "specdesk"

    def log_message(self, fmt, *args) -> None:  # through logging, not stderr
        log.info("%s %s", self.address_string(), fmt % args)

    # ---------------------------------------------------------------- plumbing

    @property
    def app(self) -> "SpecdeskServer":
        return self.server.app

    def _send_json(self, status: int, obj: dict, headers: dict | None = None) -> None:
        data = json.dumps(obj, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, e: P.ApiError) -> None:
        self.app.metrics.error(e.status)
        headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else None
        self._send_json(e.status, e.body(), headers)

    def _client_gone(self) -> bool:
        """True when the peer closed its side: the socket reads as ready and yields no bytes."""
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            if not r:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _authorized(self) -> bool:
        key = self.app.api_key
        if not key:
            return True
        got = self.headers.get("Authorization", "")
        token = got[7:].strip() if got.lower().startswith("bearer ") else ""
        return hmac.compare_digest(token.encode(), key.encode())

    def _read_json(self):
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise P.ApiError(411, "send the body with a Content-Length", code="length_required")
        try:
            n = int(length or 0)
        except ValueError:
            raise P.ApiError(400, "bad Content-Length header", code="invalid_request") from None
        if n > MAX_BODY:
            raise P.ApiError(413, f"request body of {n} bytes is over the limit of {MAX_BODY}",
                             code="request_too_large")
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise P.ApiError(400, "We could not parse the JSON body of your request. (The body must be valid "
                                  "JSON, UTF-8.)", code="invalid_json") from None

    # ---------------------------------------------------------------- routes

    def do_GET(self) -> None:  # noqa: N802 - http.server's names
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        try:
            if path == "/metrics":
                data = self.app.render_metrics().encode("utf-8")
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            elif path == "/health":
                ok = self.app.host.current() is not None
                self._send_json(200 if ok else 503, {"status": "ok" if ok else "no model loaded"})
            elif path in ("/v1/models", "/models") or path.startswith(("/v1/models/", "/models/")):
                if not self._authorized():
                    raise P.ApiError(401, "Incorrect API key provided.", code="invalid_api_key")
                models = self.app.model_cards()
                if path.endswith("/models"):
                    self._send_json(200, {"object": "list", "data": models})
                else:
                    want = path.split("/models/", 1)[1]
                    card = next((m for m in models if m["id"] == want), None)
                    if card is None:
                        raise P.ApiError(404, f"The model '{want}' does not exist", param="model",
                                         code="model_not_found")
                    self._send_json(200, card)
            elif path == "/":
                self._send_json(200, {"specdesk": "OpenAI-compatible server", "models": self.app.model_ids(),
                                      "routes": ["/v1/models", "/v1/chat/completions", "/v1/completions",
                                                 "/metrics", "/health"]})
            elif path in ("/v1/chat/completions", "/v1/completions"):
                raise P.ApiError(405, f"{path} takes POST", code="method_not_allowed")
            else:
                raise P.ApiError(404, f"no route {path}", code="not_found")
        except P.ApiError as e:
            self._error(e)

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0].rstrip("/")
        kinds = {"/v1/chat/completions": "chat", "/chat/completions": "chat", "/v1/completions": "completion",
                 "/completions": "completion"}
        try:
            if path not in kinds:
                if path in ("/v1/models", "/metrics", "/health"):
                    raise P.ApiError(405, f"{path} takes GET", code="method_not_allowed")
                raise P.ApiError(404, f"no route {path}", code="not_found")
            if not self._authorized():
                self._read_json_quietly()
                raise P.ApiError(401, "Incorrect API key provided.", code="invalid_api_key")
            body = self._read_json()
            engine = self.app.host.current()
            if engine is None:
                raise P.ApiError(503, "no model is loaded", type="server_error", code="model_not_loaded")
            req = P.parse_request(kinds[path], body, self.app.model_ids(), engine.max_context)
        except P.ApiError as e:
            self._error(e)
            return
        self._generate(req)

    def _read_json_quietly(self) -> None:
        try:
            n = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
            if n:
                self.rfile.read(n)
        except (ValueError, OSError):
            pass

    # ---------------------------------------------------------------- generation

    def _wait(self, job: Job):
        """The next message of ``job``; cancels it if the client leaves meanwhile (then returns None)."""
        import queue

        while True:
            try:
                return job.out.get(timeout=WAIT_POLL_S)
            except queue.Empty:
                if self._client_gone():
                    job.cancel.set()
                    return None

    def _generate(self, req: P.ParsedRequest) -> None:
        self.app.active.acquire()
        try:
            self._generate_job(req)
        finally:
            self.app.active.release()

    def _generate_job(self, req: P.ParsedRequest) -> None:
        job = Job(id=P.new_id(req.kind), request=req, client=self.client_address[0],
                  timing=P.Timing(received=time.monotonic()))
        created = P.now()
        self.app.loop.submit(job)
        first = self._wait(job)
        if first is None:
            self.close_connection = True
            self._drain(job)
            return
        kind, payload = first
        if kind == "error":
            self._error(payload)
            return
        draft_model = self.app.draft_name()
        fig = P.RequestFigures(k=req.settings.k if isinstance(req.settings.k, int) else 0)
        if req.stream:
            self._stream(job, req, created, fig, draft_model)
        else:
            self._whole(job, req, created, fig, draft_model)

    def _drain(self, job: Job) -> None:
        """Let a cancelled job's remaining messages go (the engine thread ends it within one step)."""
        def drain():
            while True:
                kind, _ = job.out.get()
                if kind in ("end", "error"):
                    return

        threading.Thread(target=drain, daemon=True).start()

    def _whole(self, job: Job, req: P.ParsedRequest, created: int, fig: P.RequestFigures, draft_model) -> None:
        done = None
        while True:
            msg = self._wait(job)
            if msg is None:
                self.close_connection = True
                self._drain(job)
                return
            kind, payload = msg
            if kind == "event":
                if isinstance(payload, StepEvent):
                    fig.add(payload)
                elif isinstance(payload, DoneEvent):
                    done = payload
            elif kind == "error":
                self._error(payload)
                self._drain(job)
                return
            elif kind == "end":
                break
        if done is None:
            self._error(P.ApiError(500, "the generation ended without a result", type="server_error"))
            return
        self._send_json(200, P.full_response(req, job.id, created, done, fig, job.timing, draft_model))

    def _stream(self, job: Job, req: P.ParsedRequest, created: int, fig: P.RequestFigures, draft_model) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

        def send(obj) -> bool:
            if self._client_gone():
                return False
            try:
                line = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
                self.wfile.write(b"data: " + line.encode("utf-8") + b"\n\n")
                self.wfile.flush()
                return True
            except OSError:
                return False

        ok = True
        if req.kind == "chat":
            ok = send(P.chunk(req, job.id, created, "", role=True))
        while ok:
            msg = self._wait(job)
            if msg is None:
                ok = False
                break
            kind, payload = msg
            if kind == "event":
                if isinstance(payload, StepEvent):
                    fig.add(payload)
                    ok = send(P.chunk(req, job.id, created, payload.text, step=payload))
                elif isinstance(payload, DoneEvent):
                    for c in P.final_chunks(req, job.id, created, payload, fig, job.timing, draft_model):
                        ok = ok and send(c)
            elif kind == "error":  # after the headers: an error event, as vLLM sends one
                send({"error": payload.body()["error"]})
                return
            elif kind == "end":
                send("[DONE]")
                return
        job.cancel.set()
        self._drain(job)


class _Active:
    """A count of handlers in a generation, and a way to wait until none is."""

    def __init__(self) -> None:
        self._n = 0
        self._cond = threading.Condition()

    def acquire(self) -> None:
        with self._cond:
            self._n += 1

    def release(self) -> None:
        with self._cond:
            self._n -= 1
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._n == 0, timeout)


class SpecdeskServer:
    """The server object: start() listens on a background thread, stop() cancels work and closes the log."""

    def __init__(self, host: EngineHost, *, address: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
                 served_model_name: str | None = None, logs_dir: Path | None = None,
                 log_file: Path | None = None) -> None:
        if not is_loopback(address) and not api_key:
            raise BadSetting(f"listening on {address} (not this machine only) needs --api-key: anyone who can reach "
                             f"the port could use the model")
        self.host = host
        self.api_key = api_key or None
        self.served_model_name = served_model_name
        self.metrics = ServerMetrics(self.model_ids()[0] if host.current() is not None else "none")
        self.loop = EngineLoop(host, self.metrics, logs_dir=logs_dir, log_file=log_file)
        try:
            self.httpd = _HTTPServer((address, port), Handler)
        except OSError as e:
            self.loop.stop()
            raise BadSetting(f"cannot listen on {address}:{port}: {e.strerror or e}") from None
        self.httpd.app = self
        self._thread: threading.Thread | None = None
        self.active = _Active()  # handlers answering a generation request

    @property
    def address(self) -> tuple[str, int]:
        return self.httpd.server_address[:2]

    @property
    def url(self) -> str:
        host, port = self.address
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        if ":" in shown:
            shown = f"[{shown}]"
        return f"http://{shown}:{port}/v1"

    def model_ids(self) -> tuple[str, ...]:
        eng = self.host.current()
        if eng is None:
            return (self.served_model_name or "none",)
        name = self.served_model_name or eng.target.name
        return (name,) if name == eng.target.name else (name, eng.target.name)

    def draft_name(self) -> str | None:
        eng = self.host.current()
        return eng.draft.name if (eng is not None and eng.draft is not None) else None

    def model_cards(self) -> list[dict]:
        eng = self.host.current()
        if eng is None:
            return []
        d = eng.describe()
        return [{"id": self.model_ids()[0], "object": "model", "created": P.now(), "owned_by": "specdesk",
                 "max_model_len": eng.max_context,
                 "specdesk": {"target": d.get("target", {}).get("name"), "draft": self.draft_name(),
                              "drafter": eng.drafter, "drafters": list(eng.available_drafters()),
                              "device": eng.device, "chat_template": eng.has_chat_template,
                              "target_quant": d.get("target", {}).get("quant")}}]

    def render_metrics(self) -> str:
        from specdesk.hw.memory import memory_snapshot

        eng = self.host.current()
        self.metrics.model_name = self.model_ids()[0]
        self.metrics.set_waiting(self.loop.waiting())
        return self.metrics.render(memory_snapshot(eng.device if eng is not None else "cpu"))

    def start(self) -> "SpecdeskServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="specdesk-serve-http", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def stop(self) -> None:
        """Stop listening, cancel the running and waiting requests (within one step), close the session log."""
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(10)
        self.loop.stop()
        self.active.wait_idle(10)  # let cancelled streams write their last chunks and [DONE]
        self.httpd.server_close()

    @property
    def log_path(self) -> Path | None:
        return self.loop.log_path
