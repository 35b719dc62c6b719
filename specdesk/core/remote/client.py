"""A small OpenAI-compatible HTTP client (standard library): models, streamed completions, /metrics.

Streams are read as server-sent events (``data: {...}`` lines, ``data: [DONE]`` at the end). A
``threading.Event`` cancels a stream from another thread by shutting the socket down, which ends the
blocking read at once; the server sees the client leave and stops its generation.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

from specdesk.core.errors import SpecdeskError


class RemoteError(SpecdeskError):
    """The server refused a request or could not be reached; the message is one line."""


class Endpoint:
    """``base_url`` ends in /v1 (as OpenAI clients take it); /metrics is looked for beside it."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 30.0) -> None:
        url = base_url.strip().rstrip("/")
        if "://" not in url:
            url = "http://" + url
        if not url.endswith("/v1"):
            url += "/v1"
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RemoteError(f"not an http(s) URL: {base_url!r}")
        self.base_url = url
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path  # e.g. /v1
        self.root = parts.path[: -len("/v1")]
        self.api_key = api_key or None
        self.timeout = timeout

    # ---------------------------------------------------------------- plumbing

    def _conn(self, timeout: float | None = None) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout or self.timeout)

    def _headers(self) -> dict:
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def _open(self, method: str, path: str, body: dict | None = None, timeout: float | None = None):
        conn = self._conn(timeout)
        try:
            conn.request(method, path, json.dumps(body).encode() if body is not None else None, self._headers())
            self._last_sock = conn.sock  # http.client drops it from conn for a Connection: close response
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise RemoteError(f"cannot reach {self.base_url}: {getattr(e, 'strerror', None) or e}") from None
        if resp.status >= 400:
            raw = resp.read()
            conn.close()
            raise RemoteError(f"{self.base_url} answered {resp.status}: {_error_message(raw)}")
        return conn, resp

    def get_json(self, path: str) -> dict:
        conn, resp = self._open("GET", self.prefix + path)
        try:
            return json.loads(resp.read())
        except ValueError:
            raise RemoteError(f"{self.base_url}{path} did not answer JSON") from None
        finally:
            conn.close()

    # ---------------------------------------------------------------- API

    def models(self) -> list[dict]:
        data = self.get_json("/models").get("data")
        if not isinstance(data, list):
            raise RemoteError(f"{self.base_url}/models did not list models")
        return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]

    def metrics_text(self, timeout: float = 5.0) -> str:
        conn, resp = self._open("GET", self.root + "/metrics", timeout=timeout)
        try:
            return resp.read().decode("utf-8", "replace")
        finally:
            conn.close()

    def stream(self, path: str, body: dict, cancel: threading.Event | None = None) -> Iterator[dict]:
        """POST ``body`` with stream=true; yield each event's JSON. Ends at [DONE] or when ``cancel`` is set."""
        conn, resp = self._open("POST", self.prefix + path, {**body, "stream": True}, timeout=600)
        sock = self._last_sock
        finished = threading.Event()
        if cancel is not None:
            def watch() -> None:  # a blocking read ends only when its socket does
                while not finished.is_set():
                    if cancel.wait(0.05):
                        try:
                            sock.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                        return
            threading.Thread(target=watch, daemon=True, name="specdesk-remote-cancel").start()
        try:
            while True:
                try:
                    line = resp.fp.readline()
                except (OSError, ValueError, AttributeError):
                    if cancel is not None and cancel.is_set():
                        return
                    raise RemoteError(f"the connection to {self.base_url} broke") from None
                if not line:
                    if cancel is not None and cancel.is_set():
                        return
                    raise RemoteError(f"{self.base_url} closed the stream before [DONE]")
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    return
                try:
                    obj = json.loads(data)
                except ValueError:
                    continue
                if isinstance(obj, dict) and "error" in obj and "choices" not in obj:
                    raise RemoteError(f"{self.base_url}: {_error_message(json.dumps(obj).encode())}")
                yield obj
        finally:
            finished.set()
            conn.close()


def _error_message(raw: bytes) -> str:
    try:
        obj = json.loads(raw)
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return str(err.get("message") or err)[:300]
        return str(err)[:300]
    except ValueError:
        return raw.decode("utf-8", "replace").strip()[:300] or "(no body)"


def wait_until_up(endpoint: Endpoint, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            endpoint.models()
            return
        except RemoteError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
