"""`python -m flowsim.cli`: the `flowsim` command."""

import sys

from .command import main

sys.exit(main())
