"""`python -m ops.preflight`: see ``ops/preflight/cli.py``."""

import sys

from ops.preflight.cli import main

sys.exit(main())
