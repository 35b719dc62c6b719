"""The ``specdesk`` command: the desktop app by default, headless subcommands for everything else.

Errors a user can cause end as ``specdesk: error: <one line>`` on stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys

from specdesk import __version__
from specdesk.core.errors import SpecdeskError

COMMANDS = ("generate", "models", "plan", "bench", "report", "screenshot", "serve", "export", "desktop_entry",
            "distill")


class UsageError(SpecdeskError):
    pass


class Parser(argparse.ArgumentParser):
    """argparse, but bad arguments are one line in specdesk's error format."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = Parser(prog="specdesk", description="Run local LLMs faster with exact speculative decoding. "
                                                 "With no command, opens the desktop app.")
    parser.add_argument("--version", action="version", version=f"specdesk {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")
    gui = sub.add_parser("gui", help="open the desktop app (the default)")
    gui.add_argument("--target", default=None, help="target model to load at start")
    gui.add_argument("--draft", default=None, help="draft model to load at start")
    for name in COMMANDS:
        mod = importlib.import_module(f"specdesk.commands.{name}")
        mod.add_parser(sub)
    return parser


def run_gui(args: argparse.Namespace) -> int:
    try:
        from specdesk.qt.app import run_app
    except ImportError as e:
        raise SpecdeskError(f"the desktop app cannot start: {e}") from None
    return run_app(target=getattr(args, "target", None), draft=getattr(args, "draft", None))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                            format="%(levelname)s %(name)s: %(message)s")
        if args.command in (None, "gui"):
            return run_gui(args)
        return int(args.func(args) or 0)
    except SpecdeskError as e:
        print(f"specdesk: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specdesk: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
