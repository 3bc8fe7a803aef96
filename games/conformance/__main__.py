"""``python -m games.conformance`` (see ``games.conformance.cli``)."""

import sys

from games.conformance.cli import main

if __name__ == "__main__":
    sys.exit(main())
