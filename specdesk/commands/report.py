"""``specdesk report``: a session log as an HTML report (settings, summary, plots) and/or CSV, headless."""

from __future__ import annotations

import argparse
from pathlib import Path

from specdesk.core.errors import SpecdeskError


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="turn a session log into an HTML report and/or CSV (no display needed)",
                       description="Read a session log (JSON Lines, from the app or `specdesk generate --log`) and "
                                   "write an HTML report with the plots embedded, a CSV with one row per step, or "
                                   "both. With neither, print a summary.")
    p.add_argument("log", type=Path, help="the session log (.jsonl)")
    p.add_argument("--html", type=Path, metavar="OUT.html", help="write a self-contained HTML report here")
    p.add_argument("--csv", type=Path, metavar="OUT.csv", help="write one row per step here")
    p.add_argument("--no-plots", action="store_true", help="leave the plots out of the HTML report")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specdesk.qt import export

    log = export.open_log(args.log)
    if not log.generations and (args.html or args.csv):
        print(f"note: {args.log.name} holds no generation yet; the report has the header only")
    if args.csv:
        export.write_csv(log, args.csv)
        print(f"wrote {args.csv}")
    if args.html:
        if not args.no_plots:
            _ensure_qt()
        export.write_html(log, args.html, plots=not args.no_plots)
        print(f"wrote {args.html}")
    if not args.csv and not args.html:
        print(export.summary_text(log), end="")
    return 0


def _ensure_qt() -> None:
    try:
        from specdesk.qt.export import ensure_qapp

        ensure_qapp()
    except ImportError as e:
        raise SpecdeskError(f"the plots need PySide6 and pyqtgraph ({e}); use --no-plots") from None
