"""``python -m eppkit``: the eppkit command."""

import sys

from eppkit.cli import main

sys.exit(main())
