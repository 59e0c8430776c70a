"""``python -m hpcbsp``: see :mod:`hpcbsp.cli.main`."""
import sys

from .cli.main import main

sys.exit(main())
