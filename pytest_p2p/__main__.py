"""``python -m pytest_p2p``."""

import sys

from .cli import main

sys.exit(main())
