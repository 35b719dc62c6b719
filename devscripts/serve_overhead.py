"""Tokens/s through `specdesk serve` against `specdesk generate`, on the same prompts, side by side in one run.

    python devscripts/serve_overhead.py [--repeats 3] [--max-new-tokens 128] [--json OUT]

The server (demo pair, k=4, greedy) runs as a subprocess for the whole run; `specdesk generate --json` runs
once per prompt and repeat (interleaved with the server's request, order alternating per repeat, so machine
drift falls on both). Per prompt it reports:
- generate: the engine's decode tokens/s (first step to last, prefill excluded);
- server, engine: the same figure from the server's response (the engine on the server's thread);
- server, client: tokens over the client's wall time from the request to the last streamed token, minus
  the prefill seconds the server reports: decode seen through HTTP, JSON and server-sent events;
- end to end: generate's prefill + decode seconds against the client's whole request (headers to [DONE]).
Greedy outputs are compared token for token. Prompts: one per bench category (specdesk.core.bench.suite).
"""

from __future__ import annotations

import argparse
import http.client
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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


def via_generate(prompt: str, n: int) -> dict:
    r = subprocess.run([sys.executable, "-m", "specdesk", "generate", "--prompt", prompt, "--max-new-tokens", str(n),
                        "--k", "4", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    out = json.loads(r.stdout)
    s = out["stats"]
    return {"token_ids": out["token_ids"], "tps": s["tokens_per_second"],
            "wall": s["prefill_seconds"] + s["decode_seconds"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from specdesk.core.bench.suite import build_suite

    prompts = build_suite(per_category=1)
    server = subprocess.Popen([sys.executable, "-m", "specdesk", "serve", "--port", "0", "--log", "/dev/null"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = server.stdout.readline().split(" at ", 1)[1].split(" ", 1)[0]
        host, port = url.split("//")[1].split("/")[0].split(":")
        via_server(host, int(port), "import os\n", 8)  # warm the server's first-call paths
        rows = []
        for rep in range(args.repeats):
            for p in prompts:
                order = ("server", "generate") if rep % 2 == 0 else ("generate", "server")
                got = {}
                for which in order:
                    got[which] = (via_server(host, int(port), p.text, args.max_new_tokens) if which == "server"
                                  else via_generate(p.text, args.max_new_tokens))
                g, s = got["generate"], got["server"]
                rows.append({"repeat": rep, "prompt": p.name, "category": p.category,
                             "tokens": len(g["token_ids"]), "identical": g["token_ids"] == s["token_ids"],
                             "generate_tps": g["tps"], "server_engine_tps": s["engine_tps"],
                             "server_client_tps": s["client_tps"], "generate_wall": g["wall"],
                             "server_wall": s["wall"]})
                r = rows[-1]
                print(f"{rep} {p.category:12} {r['tokens']:4} tok  generate {r['generate_tps']:6.1f}  server engine "
                      f"{r['server_engine_tps']:6.1f}  client {r['server_client_tps']:6.1f} tok/s  "
                      f"identical {r['identical']}", flush=True)
    finally:
        server.terminate()
        server.wait(60)

    def med(key_a, key_b):
        return statistics.median(r[key_a] / r[key_b] for r in rows if r[key_a] and r[key_b])

    summary = {"cpu": cpu_name(), "cores": __import__("os").cpu_count(), "runs": len(rows),
               "identical": sum(r["identical"] for r in rows),
               "server_engine_over_generate": med("server_engine_tps", "generate_tps"),
               "server_client_over_generate": med("server_client_tps", "generate_tps"),
               "end_to_end_generate_over_server_wall": med("generate_wall", "server_wall"),
               "generate_tps_median": statistics.median(r["generate_tps"] for r in rows),
               "server_client_tps_median": statistics.median(r["server_client_tps"] for r in rows)}
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
