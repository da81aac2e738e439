"""`python -m servesim ...` is the `servesim` command."""

import sys

from servesim.entry import main

sys.exit(main())
