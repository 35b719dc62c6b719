"""Tokens/s through `specdesk serve` against `specdesk generate`'s engine loop, same prompts, side by side in one run.

    python devscripts/serve_overhead.py [--repeats 3] [--max-new-tokens 128] [--json OUT]

One process loads the demo pair once (k=4, greedy) and, for every prompt and repeat, generates it twice,
back to back, order alternating per repeat: directly (the loop `specdesk generate` runs: engine.stream) and
through a SpecdeskServer on the same engine, read by an HTTP client streaming server-sent events. Sharing
the process and the model removes load time and model differences, and back-to-back pairs keep a busy
machine's drift out of the ratios. Per prompt:
- direct: the engine's decode tokens/s (first step to last, prefill excluded), as `specdesk generate` prints;
- server, engine: the same figure measured inside the server (the engine on the server's thread);
- server, client: tokens over the client's wall time from sending the request to the last streamed token,
  minus the prefill seconds the server reports: decode as a client sees it through HTTP, JSON and SSE.
Greedy outputs are compared token for token. Prompts: one per bench category (specdesk.core.bench.suite).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def via_server(host: str, port: int, prompt: str, n: int) -> dict:
    conn = http.client.HTTPConnection(host, port, timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}, "specdesk": {"k": 4}})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    ids, last_token_t, stats = [], None, None
    while True:
        line = r.fp.readline()
        if not line:
            break
        if not line.startswith(b"data: "):
            continue
        data = line[6:].strip()
        if data == b"[DONE]":
            break
        obj = json.loads(data)
        ext = obj.get("specdesk") or {}
        if "token_ids" in ext and "drafted" in ext:
            ids.extend(ext["token_ids"])
            last_token_t = time.perf_counter()
        if "stats" in ext:
            stats = ext["stats"]
    t_end = time.perf_counter()
    conn.close()
    decode_client = (last_token_t - t0) - stats["prefill_seconds"]
    return {"token_ids": ids, "engine_tps": stats["tokens_per_second"],
            "client_tps": len(ids) / decode_client if decode_client > 0 else None,
            "wall": t_end - t0, "engine_wall": stats["prefill_seconds"] + stats["decode_seconds"]}


def direct(engine, prompt: str, n: int) -> dict:
    from specdesk.core.events import DoneEvent

    done = None
    for ev in engine.stream(prompt, max_new_tokens=n, k=4):
        if isinstance(ev, DoneEvent):
            done = ev
    return {"token_ids": list(done.token_ids), "tps": done.stats.tokens_per_second}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import specdesk
    from specdesk.core.bench.suite import build_suite
    from specdesk.serve import EngineHost, SpecdeskServer

    prompts = build_suite(per_category=1)
    engine = specdesk.load("demo-target", "demo-draft", drafter="model")
    import tempfile

    log = Path(tempfile.mkdtemp(prefix="specdesk-overhead-")) / "server.jsonl"  # the server logs as it always does
    server = SpecdeskServer(EngineHost(engine), port=0, log_file=log).start()
    host, port = server.address
    try:
        via_server(host, port, "import os\n", 8)  # warm both paths
        direct(engine, "import os\n", 8)
        rows = []
        for rep in range(args.repeats):
            for p in prompts:
                order = ("server", "direct") if rep % 2 == 0 else ("direct", "server")
                got = {}
                for which in order:
                    got[which] = (via_server(host, port, p.text, args.max_new_tokens) if which == "server"
                                  else direct(engine, p.text, args.max_new_tokens))
                g, s = got["direct"], got["server"]
                rows.append({"repeat": rep, "prompt": p.name, "category": p.category,
                             "tokens": len(g["token_ids"]), "identical": g["token_ids"] == s["token_ids"],
                             "generate_tps": g["tps"], "server_engine_tps": s["engine_tps"],
                             "server_client_tps": s["client_tps"]})
                r = rows[-1]
                print(f"{rep} {p.category:12} {r['tokens']:4} tok  direct {r['generate_tps']:6.1f}  server engine "
                      f"{r['server_engine_tps']:6.1f}  client {r['server_client_tps']:6.1f} tok/s  "
                      f"identical {r['identical']}", flush=True)
    finally:
        server.stop()

    def med(key_a, key_b):
        return statistics.median(r[key_a] / r[key_b] for r in rows if r[key_a] and r[key_b])

    summary = {"cpu": cpu_name(), "cores": os.cpu_count(), "load_average": os.getloadavg(), "runs": len(rows),
               "identical": sum(r["identical"] for r in rows),
               "server_engine_over_generate": med("server_engine_tps", "generate_tps"),
               "server_client_over_generate": med("server_client_tps", "generate_tps"),
               "worst_client_over_generate": min(r["server_client_tps"] / r["generate_tps"] for r in rows),
               "generate_tps_median": statistics.median(r["generate_tps"] for r in rows),
               "server_client_tps_median": statistics.median(r["server_client_tps"] for r in rows)}
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
