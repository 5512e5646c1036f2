import sys

from rehearse.cli import main

sys.exit(main())
