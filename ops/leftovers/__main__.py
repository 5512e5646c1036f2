"""`python -m ops.leftovers`: see ``ops/leftovers/cli.py``."""

import sys

from ops.leftovers.cli import main

sys.exit(main())
