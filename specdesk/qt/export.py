"""Session log exports: JSON Lines (a copy), CSV (one row per step) and a self-contained HTML report.

Shared by the app's Session menu and ``specdesk report``. The report's plots are the app's own plot
panel, filled from the log and rendered to PNG, so a report looks like what the user saw.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import os
import shutil
import sys
import tempfile
from pathlib import Path

from specdesk.core.errors import SpecdeskError
from specdesk.core.sessionlog import Generation, SessionLog, read_log

MAX_PLOTTED_GENERATIONS = 50  # a report stays openable even for a day-long session
CSV_FIELDS = ("generation", "drafter", "step", "drafted", "accepted", "k", "tokens", "draft_s", "verify_s", "step_s",
              "elapsed_s", "context_len", "token_ids", "drafted_text", "target_text")


def open_log(path: str | os.PathLike) -> SessionLog:
    """read_log with the user's words for a missing or foreign file."""
    p = Path(path)
    if p.is_dir():
        raise SpecdeskError(f"{p} is a folder: give a session log file (.jsonl) in it")
    if not p.is_file():
        raise SpecdeskError(f"no such session log: {p}")
    try:
        return read_log(p)
    except UnicodeDecodeError:
        raise SpecdeskError(f"{p.name} is not a specdesk session log (not text)") from None
    except ValueError as e:
        raise SpecdeskError(str(e)) from None
    except OSError as e:
        raise SpecdeskError(f"cannot read {p}: {e.strerror or e}") from None


def _write_atomically(dest: str | os.PathLike, write) -> Path:
    """Write through a temporary file beside ``dest``; a full disk leaves no half file behind."""
    dest = Path(dest)
    tmp = None
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
        tmp = None
    except OSError as e:
        raise SpecdeskError(f"cannot write {dest}: {e.strerror or e} (free some space or choose another folder)") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return dest


# ----------------------------------------------------------------------------- JSON Lines and CSV

def export_jsonl(src: str | os.PathLike, dest: str | os.PathLike) -> Path:
    src = Path(src)
    if Path(dest).resolve() == src.resolve():
        return src
    def copy(f):
        with src.open(encoding="utf-8") as g:
            shutil.copyfileobj(g, f)

    return _write_atomically(dest, copy)


def _memory_keys(log: SessionLog) -> list[str]:
    keys: dict[str, None] = {}
    for g in log.generations:
        for s in g.steps:
            for k in (s.get("memory") or {}):
                keys[k] = None
    return list(keys)


def csv_rows(log: SessionLog) -> tuple[list[str], list[dict]]:
    mem = _memory_keys(log)
    rows = []
    for pos, g in enumerate(log.generations):  # positions: appended files restart their indices
        for s in g.steps:
            row = {"generation": pos, "drafter": g.info.get("drafter"), "step": s.get("index"),
                   "tokens": len(s.get("token_ids") or ()),
                   "token_ids": " ".join(str(t) for t in s.get("token_ids") or ())}
            for k in ("drafted", "accepted", "k", "draft_s", "verify_s", "step_s", "elapsed_s", "context_len",
                      "drafted_text", "target_text"):
                row[k] = s.get(k)
            for k in mem:
                row[k] = (s.get("memory") or {}).get(k)
            rows.append(row)
    return list(CSV_FIELDS) + mem, rows


def write_csv(log: SessionLog, dest: str | os.PathLike) -> Path:
    fields, rows = csv_rows(log)

    def write(f):
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)

    return _write_atomically(dest, write)


# ----------------------------------------------------------------------------- summaries

def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _number(v) -> float:
    """v where it is a number, else 0 (a field a damaged or hand-edited log holds as something else)."""
    return v if _is_number(v) else 0


def generation_summary(g: Generation) -> dict:
    """The figures of one generation, from its summary line, or from its steps when it was cut short."""
    st = (g.summary or {}).get("stats")
    st = {k: v for k, v in st.items() if _is_number(v)} if isinstance(st, dict) else {}  # a damaged line's figures
    steps = g.steps
    new_tokens = st.get("new_tokens", sum(len(s.get("token_ids") or ()) for s in steps))
    forwards = st.get("target_forwards", len(steps))
    drafted = st.get("drafted", sum(_number(s.get("drafted")) for s in steps))
    accepted = st.get("accepted", sum(_number(s.get("accepted")) for s in steps))
    seconds = st.get("decode_seconds", _number(steps[-1].get("elapsed_s")) if steps else 0.0)
    settings = g.info.get("settings")
    settings = settings if isinstance(settings, dict) else {}
    drafter = g.info.get("drafter")
    return {"generation": g.index, "drafter": drafter, "k": settings.get("k") if drafter != "none" else None,
            "temperature": settings.get("temperature"), "prompt_tokens": g.info.get("prompt_tokens"),
            # the seed the generation drew with (a "random" setting's drawn seed: it replays the reply)
            "seed": (g.summary or {}).get("seed"),
            # of the prompt's tokens, those kept from the last generation's cache (a chat's earlier turns), and the
            # seconds reading the rest took
            "kept_prompt_tokens": st.get("cached_prompt_tokens", 0), "prefill_seconds": st.get("prefill_seconds"),
            "new_tokens": new_tokens, "steps": forwards, "drafted": drafted, "accepted": accepted,
            "seconds": seconds, "tokens_per_second": new_tokens / seconds if seconds else None,
            "acceptance_rate": accepted / drafted if drafted else None,
            "mean_accepted_length": new_tokens / forwards if forwards else None,
            "stop_reason": (g.summary or {}).get("stop_reason", "incomplete (log cut)"),
            "prompt": g.info.get("prompt"), "text": (g.summary or {}).get("text")}


def speedups(log: SessionLog) -> dict[int, tuple[float, int]]:
    """position of a generation -> (speed-up, position of its plain run), for runs repeated with drafter none.

    Positions, not the logged indices: a file that several ``specdesk generate --log`` runs appended to
    restarts its indices at 0.
    """
    out = {}
    plain = {}
    gens = log.generations
    for i, g in enumerate(gens):
        if g.info.get("drafter") == "none" and g.complete:
            plain[_prompt_key(g)] = i
    for i, g in enumerate(gens):
        if g.info.get("drafter") == "none" or not g.complete:
            continue
        j = plain.get(_prompt_key(g))
        if j is None:
            continue
        a, b = generation_summary(g)["tokens_per_second"], generation_summary(gens[j])["tokens_per_second"]
        if a and b:
            out[i] = (a / b, j)
    return out


def _prompt_key(g: Generation) -> str:
    s = dict(g.info.get("settings") or {})
    s.pop("k", None)
    return repr((g.info.get("prompt"), sorted(s.items())))


# ----------------------------------------------------------------------------- plots

def ensure_qapp():
    """A QApplication for rendering; offscreen when there is no display (a server, CI, ssh)."""
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    if app is None:
        if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
            _quiet_offscreen()
        app = QApplication([sys.argv[0] if sys.argv else "specdesk"])
        from specdesk.qt import theme

        theme.apply(app)
    return app


_OFFSCREEN_NOISE = "This plugin does not support propagateSizeHints()"


def _quiet_offscreen() -> None:
    """Drop the offscreen platform's one warning (every headless report and screenshot printed it on stderr, where
    a command's own messages go); Qt's other messages pass as before."""
    from PySide6.QtCore import qInstallMessageHandler

    previous = None

    def handler(mode, context, message) -> None:
        if _OFFSCREEN_NOISE in message:
            return
        if previous is not None:
            previous(mode, context, message)
        else:
            sys.stderr.write(message + "\n")

    previous = qInstallMessageHandler(handler)


def memory_point(mem: dict | None) -> tuple[int | None, int | None, str, str]:
    mem = mem or {}
    if mem.get("cuda_reserved_bytes") is not None:
        return mem.get("cuda_reserved_bytes"), mem.get("gpu_free_bytes"), "this process (GPU)", "GPU free"
    return mem.get("rss_bytes"), mem.get("ram_available_bytes"), "this process (RSS)", "RAM free"


def fill_panel(panel, g: Generation, plain: Generation | None = None) -> None:
    """Replay a logged generation into a PlotsPanel."""
    from specdesk.qt.series import StepSeries

    panel.new_generation()
    panel.memory.clear()
    for s in g.steps:
        panel.add_step(s)
        used, free, ul, fl = memory_point(s.get("memory"))
        if used is not None or free is not None:
            panel.add_memory(float(s.get("elapsed_s", 0.0)), used, free, ul, fl)
    if plain is not None:
        base = StepSeries()
        for s in plain.steps:
            base.add_step(s)
        panel.set_baseline(base)
    panel.refresh()


def render_generation_png(g: Generation, plain: Generation | None = None, size: tuple[int, int] = (1100, 620)) -> bytes:
    from PySide6.QtCore import Qt

    from specdesk.qt.plots import PlotsPanel

    app = ensure_qapp()
    panel = PlotsPanel(live=False)
    panel.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen)
    panel.resize(*size)
    panel.show()
    try:
        fill_panel(panel, g, plain)
        app.processEvents()
        return panel.png()
    finally:
        panel.close()
        panel.deleteLater()


# ----------------------------------------------------------------------------- HTML

def _fmt(v, kind: str = "") -> str:
    if v is None:
        return "–"
    if kind == "pct":
        return f"{v:.0%}"
    if kind == "x":
        return f"{v:.2f}×"
    if isinstance(v, float):
        return f"{v:.2f}"
    return html.escape(str(v))


def _model_row(role: str, m: dict | None) -> str:
    if not m:
        return f"<tr><th>{role}</th><td colspan=5>–</td></tr>"
    return (f"<tr><th>{role}</th><td>{html.escape(str(m.get('name')))}</td><td>{_fmt(m.get('quant'))}</td>"
            f"<td>{_fmt(m.get('dtype'))}</td><td>{_fmt(m.get('params'))}</td><td>{_fmt(m.get('device'))}</td></tr>")


def _excerpt(v, n: int = 600) -> str:
    if v is None:
        return ""
    text = v if isinstance(v, str) else f"[{len(v)} prompt token ids]" if isinstance(v, list) else str(v)
    return html.escape(text if len(text) <= n else text[:n] + " …")


CSS = """
body { background:#15171c; color:#e4e7ec; font-family: system-ui, -apple-system, 'Segoe UI', sans-serif;
       margin: 28px auto; max-width: 1160px; padding: 0 16px; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 32px; border-bottom: 1px solid #333a47; padding-bottom: 6px; }
table { border-collapse: collapse; margin: 10px 0; font-size: 13px; }
th, td { padding: 5px 10px; border-bottom: 1px solid #2a2f39; text-align: left; }
th { color: #8d96a5; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
pre { background:#1c1f26; border:1px solid #333a47; border-radius:6px; padding:10px; white-space: pre-wrap;
      font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace; font-size: 12px; max-height: 260px; overflow:auto; }
.muted { color:#8d96a5; font-size: 12px; }
img { max-width: 100%; border-radius: 8px; border: 1px solid #333a47; }
"""


def report_html(log: SessionLog, plots: bool = True) -> str:
    h = log.header
    sums = [generation_summary(g) for g in log.generations]
    ups = speedups(log)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>specdesk report: "
             f"{html.escape(log.path.name)}</title><style>{CSS}</style></head><body>",
             f"<h1>specdesk session report</h1><p class=muted>{html.escape(log.path.name)} · created "
             f"{_fmt(h.get('created'))} · {_fmt(h.get('platform'))}</p>"]
    if log.truncated:
        parts.append("<p class=muted>The last line of this log was cut (the app was killed mid-write); "
                     "every completed line is included.</p>")
    if log.damaged:
        parts.append(f"<p class=muted>{log.damaged} damaged line(s) skipped (a run killed mid-line that a later "
                     f"run appended to); every whole line is included.</p>")
    parts.append("<h2>Models and settings</h2><table><tr><th></th><th>model</th><th>quantization</th><th>dtype</th>"
                 "<th>parameters</th><th>device</th></tr>")
    parts.append(_model_row("target", h.get("target")) + _model_row("draft", h.get("draft")) + "</table>")
    versions = ", ".join(f"{k} {v}" for k, v in (h.get("versions") or {}).items() if v)
    parts.append(f"<p class=muted>drafter when the session opened: {_fmt(h.get('drafter'))} (each generation's "
                 f"own below) · device {_fmt(h.get('device'))} · "
                 f"{html.escape(versions)}</p>")
    first_settings = h.get("settings") or {}
    if first_settings:
        parts.append("<table>" + "".join(f"<tr><th>{html.escape(str(k))}</th><td>{_fmt(v)}</td></tr>"
                                         for k, v in first_settings.items()) + "</table>")
    parts.append("<h2>Summary</h2><table><tr><th>#</th><th>drafter</th><th>k</th><th>temp.</th><th>seed</th>"
                 "<th>prompt tok.</th>"
                 "<th>new tok.</th><th>steps</th><th>tok/s</th><th>acceptance</th><th>tokens/step</th>"
                 "<th>vs plain</th><th>stop</th></tr>")
    for pos, s in enumerate(sums):
        up = ups.get(pos)
        kept = f" ({s['kept_prompt_tokens']} kept)" if s["kept_prompt_tokens"] else ""
        parts.append(
            f"<tr><td>{pos}</td><td>{_fmt(s['drafter'])}</td><td>{_fmt(s['k'])}</td>"
            f"<td class=n>{_fmt(s['temperature'])}</td><td class=n>{_fmt(s['seed'])}</td>"
            f"<td class=n>{_fmt(s['prompt_tokens'])}{kept}</td>"
            f"<td class=n>{_fmt(s['new_tokens'])}</td><td class=n>{_fmt(s['steps'])}</td>"
            f"<td class=n>{_fmt(s['tokens_per_second'])}</td><td class=n>{_fmt(s['acceptance_rate'], 'pct')}</td>"
            f"<td class=n>{_fmt(s['mean_accepted_length'])}</td>"
            f"<td class=n>{_fmt(up[0], 'x') if up else '–'}</td><td>{_fmt(s['stop_reason'])}</td></tr>")
    parts.append("</table>")
    if not sums:
        parts.append("<p class=muted>This session has no generations yet.</p>")
    for n, (g, s) in enumerate(zip(log.generations, sums)):
        parts.append(f"<h2>Generation {n} · {_fmt(s['drafter'])} · {_fmt(s['tokens_per_second'])} tok/s</h2>")
        parts.append(f"<p class=muted>prompt</p><pre>{_excerpt(s['prompt'])}</pre>")
        if s["text"] is not None:
            parts.append(f"<p class=muted>output</p><pre>{_excerpt(s['text'], 1500)}</pre>")
        if plots and g.steps and n < MAX_PLOTTED_GENERATIONS:
            up = ups.get(n)
            png = render_generation_png(g, log.generations[up[1]] if up else None)
            parts.append(f"<img alt='plots of generation {n}' src='data:image/png;base64,"
                         f"{base64.b64encode(png).decode('ascii')}'>")
        elif plots and n == MAX_PLOTTED_GENERATIONS:
            parts.append(f"<p class=muted>Plots are shown for the first {MAX_PLOTTED_GENERATIONS} generations.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(log: SessionLog, dest: str | os.PathLike, plots: bool = True) -> Path:
    text = report_html(log, plots=plots)
    return _write_atomically(dest, lambda f: f.write(text))


def summary_text(log: SessionLog) -> str:
    """A few lines for the terminal."""
    out = io.StringIO()
    for pos, g in enumerate(log.generations):
        s = generation_summary(g)
        tps = f"{s['tokens_per_second']:.1f}" if s["tokens_per_second"] else "-"
        acc = f"{s['acceptance_rate']:.0%}" if s["acceptance_rate"] is not None else "-"
        out.write(f"generation {pos}: {s['drafter']}, {s['new_tokens']} tokens, {tps} tok/s, "
                  f"acceptance {acc}, stop {s['stop_reason']}\n")
    if log.damaged:
        out.write(f"note: {log.damaged} damaged line(s) skipped (a run killed mid-line, appended to later)\n")
    return out.getvalue()
