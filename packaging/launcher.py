"""The packaged app's entry point: the same `specdesk` command (the app by default, every subcommand too)."""

import multiprocessing
import sys

from specdesk.cli import main

if __name__ == "__main__":
    multiprocessing.freeze_support()
    sys.exit(main())
