import sys

from specdesk.cli import main

sys.exit(main())
