"""``python -m arena_cli``: the ``arena`` command."""

import sys

from arena_cli import main

sys.exit(main())
