"""`python -m servesim ...` is the `servesim` command."""

import sys

from servesim.simulator.cli import main

sys.exit(main())
