"""``specdesk serve``: the loaded pair behind an OpenAI-compatible HTTP API, with Prometheus /metrics."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from specdesk.commands.common import add_model_args, load_engine, use_own_draft
from specdesk.core.gcload import collector_paused
from specdesk.core.pairing import resolve_drafter


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="serve the pair over an OpenAI-compatible HTTP API",
                       description="Load a target and a drafter and serve them: GET /v1/models, POST "
                                   "/v1/chat/completions and /v1/completions (streaming with server-sent events), "
                                   "GET /metrics (Prometheus). Requests queue and run one at a time.")
    add_model_args(p)
    g = p.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine "
                                                       "only; any other needs --api-key)")
    g.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    g.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on the /v1 routes")
    g.add_argument("--served-model-name", default=None, help="the model id clients use (default: the target's name)")
    g.add_argument("--log", type=Path, default=None,
                   help="session log file (default: a new file in the data folder's sessions/)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specdesk.core.errors import BadSetting
    from specdesk.serve import EngineHost, SpecdeskServer
    from specdesk.serve.server import is_loopback

    say = lambda m: print(f"specdesk serve: {m}", file=sys.stderr, flush=True)  # noqa: E731
    use_own_draft(args, say)
    resolve_drafter(args.target, args.draft, args.drafter)
    if not (0 <= args.port <= 65535):
        raise BadSetting(f"--port must be 0..65535, got {args.port}")
    if not is_loopback(args.host) and not args.api_key:
        raise BadSetting(f"listening on {args.host} (not this machine only) needs --api-key")
    _check_port(args.host, args.port)  # a port in use fails now, not after the models load
    with collector_paused():  # core/gcload.py: a faster load, and later collections skip the model's objects
        engine = load_engine(args, progress=say)
        say("warming up")
        engine.warm_up()  # the first request then runs as the ones after it (and k=auto knows this machine's costs)
    server = SpecdeskServer(EngineHost(engine), address=args.host, port=args.port, api_key=args.api_key,
                            served_model_name=args.served_model_name, log_file=args.log)
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    server.start()
    pair = engine.target.name + (f" + {engine.draft.name}" if engine.draft else f" ({engine.drafter})")
    print(f"specdesk serve: {pair} on {engine.device} at {server.url} (model id {server.model_ids()[0]}; "
          f"metrics at {server.url[:-3]}/metrics)", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        print("specdesk serve: stopping (cancelling running requests)…", file=sys.stderr, flush=True)
        server.stop()
        if server.log_path is not None:
            print(f"specdesk serve: session log {server.log_path}", file=sys.stderr, flush=True)
    return 0


def _check_port(host: str, port: int) -> None:
    """Bind and release ``host:port`` as the server will (address reuse on, as http.server sets it)."""
    import socket

    from specdesk.core.errors import BadSetting

    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        raise BadSetting(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as e:
            raise BadSetting(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
