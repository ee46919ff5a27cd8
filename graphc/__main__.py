"""`python -m graphc ...` runs the `graphc` command."""

import sys

from .cli import main

sys.exit(main())
