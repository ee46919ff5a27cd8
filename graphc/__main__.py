"""`python -m graphc ...` runs the `graphc` command."""

import sys

from .tools.cli import main

sys.exit(main())
